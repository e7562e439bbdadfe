#!/usr/bin/env python3
"""Writes tests/golden/modules.txt: forward values and gradients of torch.nn modules (Embedding,
Conv1d, Conv2d with padding="same", ConvTranspose2d, AdaptiveAvgPool2d, MaxPool2d with
return_indices, Identity) for given weights, in float64; the state_dict names and shapes of
ModuleList and ModuleDict; and the initialisation bounds of Conv1d and ConvTranspose2d.
tests/test_nn_modules.cpp builds the same modules case by case and must match.

Run with Debian's PyTorch:  /usr/bin/python3 scripts/golden/make_modules.py

File format, one record per line:
  case NAME
  tensor NAME d0,d1,... v0 v1 ...   (float64 values, %.17g; a 0-d tensor has dims "-")
  end
Value cases name their inputs "in.x" (the input), "in.gy" (the gradient that backward starts
from: the loss is (y * gy).sum()) and "in.<param>" (the module's state_dict, loaded strictly),
and their results "y", "x.grad", "<param>.grad" and for max pooling "indices". Names cases list
a state_dict, in order. Init cases hold "bound", the largest magnitude PyTorch's init can draw.
"""
import math
import os

import torch
import torch.nn as nn

from golden_cases import write_cases

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "golden", "modules.txt")
D = torch.float64
CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def values(shape, seed):
    """Deterministic, well-spread values (no ties, so max pooling has one winner per window)."""
    n = math.prod(shape)
    t = torch.arange(n, dtype=D)
    return (torch.sin(t * 1.7 + seed) * 2 + torch.cos(t * 0.31 * (seed + 1)) * 0.5).reshape(shape)


def run(module, x, seed=0, grad_input=True):
    """Loads deterministic weights into module, runs forward and backward on x."""
    module = module.to(D)
    with torch.no_grad():
        for i, (_, p) in enumerate(module.named_parameters()):
            p.copy_(values(p.shape, seed + 10 + i) * 0.5)
    if grad_input:
        x = x.clone().requires_grad_()
    out = module(x)
    indices = None
    if isinstance(out, tuple):
        out, indices = out
    gy = values(out.shape, seed + 3)
    (out * gy).sum().backward()
    rec = {"in.x": x.detach(), "in.gy": gy}
    for name, p in module.named_parameters():
        rec["in." + name] = p.detach()
    rec["y"] = out.detach()
    if grad_input:
        rec["x.grad"] = x.grad
    for name, p in module.named_parameters():
        rec[name + ".grad"] = p.grad
    if indices is not None:
        rec["indices"] = indices.to(D)
    return rec


# ---- Embedding --------------------------------------------------------------------------------
@case
def embedding():
    idx = torch.tensor([[1, 2, 4], [2, 1, 6], [0, 1, 2]])
    return run(nn.Embedding(7, 3, padding_idx=2), idx, seed=1, grad_input=False)


@case
def embedding_negative_padding_idx():
    idx = torch.tensor([4, 3, 0, 4, 4])
    return run(nn.Embedding(5, 4, padding_idx=-1), idx, seed=2, grad_input=False)


@case
def embedding_no_padding():
    idx = torch.tensor([[[3, 0], [3, 3]], [[1, 2], [0, 0]]])
    return run(nn.Embedding(4, 2), idx, seed=3, grad_input=False)


# ---- Conv1d -----------------------------------------------------------------------------------
@case
def conv1d():
    return run(nn.Conv1d(4, 6, 3, stride=2, padding=1, groups=2), values((2, 4, 9), 4), seed=4)


@case
def conv1d_dilation_no_bias():
    return run(nn.Conv1d(3, 2, 2, dilation=3, bias=False), values((2, 3, 10), 5), seed=5)


@case
def conv1d_same_even_kernel():
    return run(nn.Conv1d(3, 2, 4, padding="same"), values((2, 3, 7), 6), seed=6)


@case
def conv1d_valid_unbatched():
    return run(nn.Conv1d(2, 3, 3, padding="valid"), values((2, 8), 7), seed=7)


# ---- Conv2d padding="same" ------------------------------------------------------------------
@case
def conv2d_same_odd_kernel():
    return run(nn.Conv2d(2, 3, 3, padding="same", dilation=2), values((2, 2, 6, 5), 8), seed=8)


@case
def conv2d_same_even_kernel():
    # height: 1 * (2 - 1) = 1 (odd: one extra zero row at the bottom); width: 2 * (4 - 1) = 6
    return run(nn.Conv2d(2, 3, (2, 4), padding="same", dilation=(1, 2)), values((2, 2, 5, 9), 9),
               seed=9)


@case
def conv2d_same_even_both_groups():
    return run(nn.Conv2d(4, 2, (4, 2), padding="same", groups=2), values((1, 4, 6, 5), 10),
               seed=10)


# ---- ConvTranspose2d ----------------------------------------------------------------------------
@case
def conv_transpose2d():
    return run(nn.ConvTranspose2d(3, 2, 3, stride=2), values((2, 3, 4, 3), 11), seed=11)


@case
def conv_transpose2d_padding_output_padding():
    m = nn.ConvTranspose2d(4, 6, (3, 2), stride=(2, 3), padding=(1, 0), output_padding=(1, 2),
                           groups=2)
    return run(m, values((2, 4, 3, 4), 12), seed=12)


@case
def conv_transpose2d_dilation_no_bias():
    m = nn.ConvTranspose2d(2, 3, 2, stride=1, padding=1, output_padding=1, dilation=2, bias=False)
    return run(m, values((1, 2, 4, 5), 13), seed=13)


@case
def conv_transpose2d_unbatched():
    return run(nn.ConvTranspose2d(2, 2, 2, stride=2), values((2, 3, 3), 14), seed=14)


# ---- AdaptiveAvgPool2d --------------------------------------------------------------------------
@case
def adaptive_avg_pool2d():
    return run(nn.AdaptiveAvgPool2d((3, 4)), values((2, 3, 7, 5), 15), seed=15)


@case
def adaptive_avg_pool2d_upsample():
    return run(nn.AdaptiveAvgPool2d((5, 8)), values((1, 2, 3, 5), 16), seed=16)


@case
def adaptive_avg_pool2d_global_unbatched():
    return run(nn.AdaptiveAvgPool2d(1), values((3, 4, 6), 17), seed=17)


# ---- MaxPool2d(return_indices=True) -----------------------------------------------------------
@case
def max_pool2d_indices():
    return run(nn.MaxPool2d(3, stride=2, padding=1, return_indices=True), values((2, 2, 7, 6), 18),
               seed=18)


@case
def max_pool2d_indices_dilation_ceil():
    m = nn.MaxPool2d((2, 3), stride=(2, 1), dilation=(2, 1), ceil_mode=True, return_indices=True)
    return run(m, values((1, 3, 8, 5), 19), seed=19)


# ---- Identity -----------------------------------------------------------------------------------
@case
def identity():
    return run(nn.Identity(), values((3, 4), 20), seed=20)


# ---- state_dict names of containers -----------------------------------------------------------
def state(module):
    return {k: v.to(D) for k, v in module.state_dict().items()}


@case
def names_module_list():
    torch.manual_seed(0)
    return state(nn.ModuleList([nn.Linear(2, 3), nn.Identity(), nn.Conv1d(3, 4, 2),
                                nn.Embedding(5, 2)]))


@case
def names_module_dict():
    torch.manual_seed(0)
    blocks = nn.ModuleList([nn.Linear(3, 3), nn.Linear(3, 1, bias=False)])
    return state(nn.ModuleDict({"enc": nn.Linear(2, 3), "emb": nn.Embedding(4, 2),
                                "blocks": blocks, "up": nn.ConvTranspose2d(2, 1, 2)}))


# ---- initialisation bounds ----------------------------------------------------------------------
def bounds(module):
    """PyTorch's bound for kaiming_uniform(a=sqrt(5)) and the bias: 1/sqrt(fan_in)."""
    fan_in, _ = nn.init._calculate_fan_in_and_fan_out(module.weight)
    gain = nn.init.calculate_gain("leaky_relu", math.sqrt(5))
    weight_bound = math.sqrt(3.0) * gain / math.sqrt(fan_in)
    return {"weight_bound": torch.tensor(weight_bound, dtype=D),
            "bias_bound": torch.tensor(1 / math.sqrt(fan_in), dtype=D)}


@case
def init_conv1d():
    return bounds(nn.Conv1d(6, 40, 5, groups=2))


@case
def init_conv_transpose2d():
    return bounds(nn.ConvTranspose2d(40, 6, (3, 2), groups=2))


def main():
    write_cases(OUT, CASES)


if __name__ == "__main__":
    main()
