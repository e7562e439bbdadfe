#!/usr/bin/env python3
"""Writes tests/golden/float8_linear.txt: torchao's float8 training (Float8Linear, from
convert_to_float8_training with Float8LinearConfig.from_recipe_name) for the recipes
tensorwise, rowwise and rowwise_with_gw_hp, on the CPU:

  - ops: torch's float8 casts with torchao's scales (the e4m3fn/e5m2 bits of scaled inputs,
    tensorwise and rowwise, power-of-two rounding on and off) and torch._scaled_mm with both
    scale layouts, a bias and three output dtypes;
  - layer_<recipe>_<precision>: one Float8Linear 32 -> 48 with bias on x [4, 8, 32], whose rows
    span four orders of magnitude (so row scales differ from the tensor's), the output and the
    gradients of x, weight and bias for the loss sum(out * gy);
  - mlp_<recipe>_<precision>: a 32-64-64-16 MLP (ReLU) of Float8Linear layers trained 20 steps
    with SGD (lr 0.05, momentum 0.9) on MSE to fixed targets: the loss before each step.

precision is float32, or bfloat16 for the forward under torch.autocast("cpu", bfloat16).
torchao 0.18 reads the autocast scope with torch.is_autocast_enabled(), which sees only the
CUDA scope: on the CPU it leaves the input in float32 (and then fails rowwise_with_gw_hp, whose
weight-gradient product meets a bfloat16 gradient and a float32 input). The bfloat16 cases run
torchao's autocast branch as it runs on CUDA, with the CPU scope's answers patched in: the input
is cast to bfloat16 before its float8 cast, as mantissa's float8_linear does.

Run with PyTorch 2.x and torchao 0.18 (pip install torch torchao):
  python scripts/golden/make_float8_linear.py
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torchao.float8 import Float8LinearConfig, convert_to_float8_training
from torchao.float8.float8_linear import Float8Linear
from torchao.float8.float8_utils import amax_to_scale, to_fp8_saturated

sys.path.insert(0, os.path.dirname(__file__))
import golden_cases  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "golden", "float8_linear.txt")
RECIPES = ["tensorwise", "rowwise", "rowwise_with_gw_hp"]
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def cpu_autocast_as_cuda():
    """torchao's Float8Linear.forward asks torch.is_autocast_enabled() (the CUDA scope) and
    torch.get_autocast_gpu_dtype(); answer them with the CPU scope's."""
    enabled = torch.is_autocast_enabled
    torch.is_autocast_enabled = lambda *a: enabled(*a) if a else enabled("cpu")
    torch.get_autocast_gpu_dtype = lambda: torch.get_autocast_dtype("cpu")


def inputs():
    g = torch.Generator().manual_seed(20261207)
    rows = torch.logspace(-2, 2, 32).reshape(4, 8, 1)
    return {
        "x": torch.randn(4, 8, 32, generator=g) * rows,
        "w": torch.randn(48, 32, generator=g) / 32 ** 0.5,
        "b": torch.randn(48, generator=g) * 0.1,
        "gy": torch.randn(4, 8, 48, generator=g),
        "mlp_x": torch.randn(64, 32, generator=g),
        "mlp_y": torch.randn(64, 16, generator=g),
        "mlp_w1": torch.randn(64, 32, generator=g) / 32 ** 0.5,
        "mlp_b1": torch.randn(64, generator=g) * 0.1,
        "mlp_w2": torch.randn(64, 64, generator=g) / 64 ** 0.5,
        "mlp_b2": torch.randn(64, generator=g) * 0.1,
        "mlp_w3": torch.randn(16, 64, generator=g) / 64 ** 0.5,
        "mlp_b3": torch.randn(16, generator=g) * 0.1,
    }


IN = inputs()


def scale_of(x, dtype, rowwise_dim, pow2):
    amax = x.abs().max() if rowwise_dim is None else \
        torch.amax(x.abs(), dim=rowwise_dim, keepdim=True)
    return amax_to_scale(amax, dtype, pow2)


def ops_case():
    out = {}
    x = IN["x"].reshape(32, 32)
    for dtype, dn in ((E4M3, "e4m3"), (E5M2, "e5m2")):
        for rowwise_dim, gn in ((None, "tensor"), (-1, "rows"), (0, "cols")):
            for pow2 in (False, True):
                s = scale_of(x, dtype, rowwise_dim, pow2)
                name = "%s_%s_%s" % (dn, gn, "pow2" if pow2 else "exact")
                out["scale_" + name] = s
                out["cast_" + name] = to_fp8_saturated(x * s, dtype).float()
    # Saturation and the special values: 1e6 saturates, inf saturates (clamp), NaN stays.
    special = torch.tensor([1e6, -1e6, float("inf"), float("-inf"), float("nan"), 0.0, -0.0, 1e-9])
    for dtype, dn in ((E4M3, "e4m3"), (E5M2, "e5m2")):
        out["cast_special_" + dn] = to_fp8_saturated(special * 1.0, dtype).float()
    a = to_fp8_saturated(IN["x"].reshape(32, 32) * scale_of(x, E4M3, -1, False), E4M3)
    w = IN["w"].t()  # [32, 48]
    sw = scale_of(w, E5M2, 0, True)
    b = to_fp8_saturated(w * sw, E5M2)
    sa = scale_of(x, E4M3, -1, False)
    for out_dtype, on in ((torch.float32, "f32"), (torch.bfloat16, "bf16"),
                          (torch.float16, "f16")):
        out["mm_rows_" + on] = torch._scaled_mm(
            a, b, scale_a=sa.reciprocal(), scale_b=sw.reciprocal(),
            out_dtype=out_dtype).float()
        out["mm_tensor_bias_" + on] = torch._scaled_mm(
            a, b, scale_a=torch.tensor(0.25), scale_b=torch.tensor(3.0),
            bias=IN["b"].to(out_dtype), out_dtype=out_dtype).float()
    return out


def layer(recipe, precision):
    torch.manual_seed(0)
    m = nn.Linear(32, 48)
    with torch.no_grad():
        m.weight.copy_(IN["w"])
        m.bias.copy_(IN["b"])
    # convert_to_float8_training swaps children: the layer goes in a container.
    m = convert_to_float8_training(nn.Sequential(m),
                                   config=Float8LinearConfig.from_recipe_name(recipe))
    assert type(m[0]) is Float8Linear
    x = IN["x"].clone().requires_grad_()
    if precision == "bfloat16":
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = m(x)
    else:
        y = m(x)
    (y.float() * IN["gy"]).sum().backward()
    return {"out": y.float(), "gx": x.grad, "gw": m[0].weight.grad, "gb": m[0].bias.grad}


def mlp(recipe, precision):
    m = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                      nn.Linear(64, 16))
    with torch.no_grad():
        for i, k in enumerate((0, 2, 4)):
            m[k].weight.copy_(IN["mlp_w%d" % (i + 1)])
            m[k].bias.copy_(IN["mlp_b%d" % (i + 1)])
    convert_to_float8_training(m, config=Float8LinearConfig.from_recipe_name(recipe))
    assert all(type(m[k]) is Float8Linear for k in (0, 2, 4))
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for _ in range(20):
        opt.zero_grad()
        if precision == "bfloat16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = F.mse_loss(m(IN["mlp_x"]).float(), IN["mlp_y"])
        else:
            loss = F.mse_loss(m(IN["mlp_x"]), IN["mlp_y"])
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return {"losses": torch.stack(losses)}


def main():
    cpu_autocast_as_cuda()
    cases = {"inputs": lambda: IN, "ops": ops_case}
    for recipe in RECIPES:
        for precision in ("float32", "bfloat16"):
            cases["layer_%s_%s" % (recipe, precision)] = \
                lambda r=recipe, p=precision: layer(r, p)
            cases["mlp_%s_%s" % (recipe, precision)] = lambda r=recipe, p=precision: mlp(r, p)
    golden_cases.write_cases(OUT, cases)


if __name__ == "__main__":
    main()
