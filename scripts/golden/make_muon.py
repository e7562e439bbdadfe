#!/usr/bin/env python3
"""Writes tests/golden/muon.txt: torch.optim.Muon training a 32-48-48-16 MLP (no biases: Muon
takes 2-D parameters only; tanh between the layers, MSE on fixed data) for 30 steps, for each
adjust_lr_fn and nesterov on and off:
  - with the Newton-Schulz iteration patched to run in float32 (mantissa's ns_float32), the loss
    before each step, the weights after 10 steps, and the losses of the same run with the
    iteration's products summed in float64 instead (another correct float32 result: the spread
    of two orders, which the iteration amplifies step by step; by step 30 two orders' weights
    differ by 1e-4 to 2e-2 here, after 10 steps by under 6e-6);
  - as PyTorch runs it (bfloat16), the first update of the middle weight and the loss before each
    step, and the same of the iteration written as PyTorch's main branch writes it without addmm
    (b G + c G G, a X + U X: another correct bfloat16 order, 15-20% from the first on this
    model's updates);
and the hybrid that the GPT-2 speedrun uses: the same MLP with biases, Muon for the weights and
torch.optim.AdamW for the biases, in float32. The data and initial weights come from splitmix64
of their indices (data() below; tests/test_muon.cpp computes the same float32 values), so no
generator of PyTorch's is needed. Values are written as float32 (9 significant digits).

Run with PyTorch 2.9 or later (the benchmark environment's):
  build-bench/torch-venv/bin/python scripts/golden/make_muon.py
"""
import math
import os
import sys

import torch
import torch.nn.functional as F
import torch.optim._muon as muon_module

sys.path.insert(0, os.path.dirname(__file__))
import golden_cases  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "golden", "muon.txt")
SIZES = [32, 48, 48, 16]
BATCH = 64  # more examples than any layer is wide: the gradients have full rank
STEPS = 30
LR = 0.02


M64 = (1 << 64) - 1


def splitmix64(z):
    z = (z + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def uniform(rows, cols, stream, scale):
    """scale * u, u uniform in [-1, 1) from splitmix64(stream << 32 | k), k = 0, 1, ... row-major:
    exact integer arithmetic, then one rounding of a float64 to float32, on both sides."""
    v = [scale * (2.0 * (splitmix64((stream << 32) | k) >> 11) / 2.0 ** 53 - 1.0)
         for k in range(rows * cols)]
    return torch.tensor(v, dtype=torch.float64).reshape(rows, cols).to(torch.float32)


def data():
    x = uniform(BATCH, SIZES[0], 1, 1.0)
    y = uniform(BATCH, SIZES[-1], 2, 1.0)
    ws = [uniform(SIZES[i + 1], SIZES[i], 10 + i, 1.0 / math.sqrt(SIZES[i]))
          for i in range(len(SIZES) - 1)]
    bs = [uniform(1, SIZES[i + 1], 20 + i, 0.1).reshape(-1) for i in range(len(SIZES) - 1)]
    return x, y, ws, bs


def forward(x, ws, bs=None):
    h = x
    for i, w in enumerate(ws):
        h = F.linear(h, w, None if bs is None else bs[i])
        if i + 1 < len(ws):
            h = torch.tanh(h)
    return h


def newton_schulz(dtype, step):
    """PyTorch's _zeropower_via_newtonschulz in `dtype`, each iteration x = step(x, a, b, c)."""
    def iterate(grad, ns_coefficients, ns_steps, eps):
        a, b, c = ns_coefficients
        x = grad.to(dtype=dtype, copy=True)
        if grad.size(0) > grad.size(1):
            x = x.T
        x = x / x.norm().clamp(min=eps)
        for _ in range(ns_steps):
            x = step(x, a, b, c)
        return x.T if grad.size(0) > grad.size(1) else x
    return iterate


def addmm_step(x, a, b, c):
    """PyTorch's iteration (2.15): two addmm."""
    gram = x @ x.T
    update = torch.addmm(gram, gram, gram, beta=b, alpha=c)
    return torch.addmm(x, update, x, beta=a)


def separate_step(x, a, b, c):
    """The same without addmm (PyTorch's main branch with use_addmm False): another order."""
    gram = x @ x.T
    update = b * gram + c * (gram @ gram)
    return a * x + update @ x


def float64_sums_step(x, a, b, c):
    """addmm_step's products accumulated in float64 and rounded to float32 once."""
    d = torch.float64
    gram = (x.to(d) @ x.T.to(d)).float()
    update = (b * gram.to(d) + c * (gram.to(d) @ gram.to(d))).float()
    return (a * x.to(d) + update.to(d) @ x.to(d)).float()


ns_float32 = newton_schulz(torch.float32, addmm_step)  # mantissa's ns_float32
ns_float64_sums = newton_schulz(torch.float32, float64_sums_step)
ns_bf16_without_addmm = newton_schulz(torch.bfloat16, separate_step)


SNAPSHOT = 10  # the step after which the float32 cases' weights are written


def train(adjust, nesterov, float32, hybrid=False, ns=None):
    x, y, ws, bs = data()
    ws = [w.clone().requires_grad_() for w in ws]
    bs = [b.clone().requires_grad_() for b in bs] if hybrid else None
    saved = muon_module._zeropower_via_newtonschulz
    if float32 or ns is not None:
        muon_module._zeropower_via_newtonschulz = ns or ns_float32
    try:
        opt = torch.optim.Muon(ws, lr=LR, weight_decay=0.1, momentum=0.95, nesterov=nesterov,
                               adjust_lr_fn=adjust)
        aux = torch.optim.AdamW(bs, lr=3e-3, betas=(0.9, 0.95), eps=1e-8,
                                weight_decay=0.01) if hybrid else None
        losses, first, snapshot = [], None, None
        for step in range(STEPS):
            opt.zero_grad()
            if aux:
                aux.zero_grad()
            loss = F.mse_loss(forward(x, ws, bs), y)
            losses.append(loss.detach().clone())
            loss.backward()
            before = [w.detach().clone() for w in ws]
            opt.step()
            if aux:
                aux.step()
            if step == 0:
                first = [w.detach() - b for w, b in zip(ws, before)]
            if step + 1 == SNAPSHOT:
                snapshot = [t.detach().clone() for t in ws + (bs or [])]
        return torch.stack(losses), snapshot, first
    finally:
        muon_module._zeropower_via_newtonschulz = saved


CASES = {}


def inputs_case():
    """The first values of the data, to check that both sides computed the same."""
    x, y, ws, bs = data()
    return {"x": x[0], "y": y[0], "w1": ws[1][0], "b2": bs[2]}


CASES["inputs"] = inputs_case

for adjust in ["original", "match_rms_adamw"]:
    for nesterov in [True, False]:
        suffix = "%s_%s" % (adjust, "nesterov" if nesterov else "plain")

        def f32(adjust=adjust, nesterov=nesterov):
            losses, snapshot, _ = train(adjust, nesterov, True)
            alt, _, _ = train(adjust, nesterov, True, ns=ns_float64_sums)
            out = {"losses": losses, "losses_alt": alt}
            out.update({"w%d" % i: w for i, w in enumerate(snapshot)})
            return out

        def bf16(adjust=adjust, nesterov=nesterov):
            losses, _, first = train(adjust, nesterov, False)
            alt, _, first_alt = train(adjust, nesterov, False, ns=ns_bf16_without_addmm)
            return {"losses": losses, "first_update1": first[1], "losses_alt": alt,
                    "first_update1_alt": first_alt[1]}

        CASES["float32_" + suffix] = f32
        CASES["bfloat16_" + suffix] = bf16


def hybrid():
    losses, snapshot, _ = train("original", True, True, hybrid=True)
    alt, _, _ = train("original", True, True, hybrid=True, ns=ns_float64_sums)
    out = {"losses": losses, "losses_alt": alt}
    out.update({"w%d" % i: w for i, w in enumerate(snapshot[:3])})
    out.update({"b%d" % i: b for i, b in enumerate(snapshot[3:])})
    return out


CASES["hybrid_adamw_float32"] = hybrid


def float32_record(name, t, with_dtype=False):
    t = t.detach()
    dims = ",".join(str(d) for d in t.shape) if t.dim() > 0 else "-"
    values = " ".join("%.9g" % v for v in t.to(torch.float64).reshape(-1).tolist())
    return ("tensor %s %s" % (name, dims + " " + values)).rstrip()


def main():
    print("torch", torch.__version__)
    golden_cases.tensor_record = float32_record  # float32 values: 9 digits round-trip
    golden_cases.write_cases(OUT, CASES)


if __name__ == "__main__":
    main()
