#!/usr/bin/env python3
"""Writes tests/golden/linear_cross_entropy.txt: PyTorch's cross_entropy(linear(x, w, b), t) and the
gradients of x, w and b, in float64, for every reduction, with and without label smoothing and
bias, with an ignored target. tests/test_linear_cross_entropy.cpp runs mantissa's fused
linear_cross_entropy on the same inputs (in several chunkings) and must match.

Run with Debian's PyTorch:  /usr/bin/python3 scripts/golden/make_linear_cross_entropy.py

Inputs: x [7, 6], w [11, 6], b [11] (absent without bias), t [7], g (the gradient fed to backward
of an unreduced loss). Results: loss, x.grad, w.grad, b.grad.
"""
import os

import torch
import torch.nn.functional as F

from golden_cases import write_cases

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "golden",
                   "linear_cross_entropy.txt")
D = torch.float64
gen = torch.Generator().manual_seed(20261129)
X = torch.randn(7, 6, dtype=D, generator=gen)
W = torch.randn(11, 6, dtype=D, generator=gen) * 0.5
B = torch.randn(11, dtype=D, generator=gen) * 0.1
T = torch.tensor([3, 10, -100, 0, 7, 3, 5])
G = torch.randn(7, dtype=D, generator=gen)


def make(reduction, smoothing, bias):
    def run():
        x = X.clone().requires_grad_()
        w = W.clone().requires_grad_()
        b = B.clone().requires_grad_() if bias else None
        loss = F.cross_entropy(F.linear(x, w, b), T, reduction=reduction,
                               label_smoothing=smoothing)
        if reduction == "none":
            loss.backward(G)
        else:
            loss.backward()
        out = {"x": X, "w": W}
        if bias:
            out["b"] = B
        out.update({"t": T, "g": G, "loss": loss, "x.grad": x.grad, "w.grad": w.grad})
        if bias:
            out["b.grad"] = b.grad
        return out
    return run


cases = {}
for reduction in ["none", "mean", "sum"]:
    for smoothing in [0.0, 0.1]:
        for bias in [False, True]:
            name = "%s_ls%s_%s" % (reduction, "0" if smoothing == 0 else "1",
                                   "bias" if bias else "nobias")
            cases[name] = make(reduction, smoothing, bias)
write_cases(OUT, cases, with_dtype=True)
