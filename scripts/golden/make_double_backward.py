#!/usr/bin/env python3
"""Writes tests/golden/double_backward.txt: what PyTorch computes with create_graph=True for a
gradient penalty on a small tanh MLP, a Hessian-vector product, and a leaf's .grad built by
backward(create_graph=True) and then differentiated. tests/test_double_backward.cpp runs the
same programs, case by case, and must match.

Run with Debian's PyTorch:  /usr/bin/python3 scripts/golden/make_double_backward.py

File format, one record per line:
  case NAME
  tensor NAME d0,d1,... v0 v1 ...   (float64 values, %.17g; a 0-d tensor has dims "-")
  end
Inputs are fixed closed-form values (no RNG), written the same way in the C++ test.
"""
import math
import os

import torch
import torch.nn.functional as F

from golden_cases import write_cases

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "golden", "double_backward.txt")
D = torch.float64


def filled(shape, a, b):
    """sin(a * i + b) over the elements in row-major order: varied, deterministic values."""
    n = math.prod(shape)
    return torch.tensor([math.sin(a * i + b) for i in range(n)], dtype=D).reshape(shape)


CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


@case
def gradient_penalty():
    # WGAN-GP style: the squared norm of d out / d x, backpropagated to the weights.
    x = filled((4, 3), 0.7, 0.1).requires_grad_()
    w1 = (filled((5, 3), 1.3, 0.2) * 0.8).requires_grad_()
    b1 = (filled((5,), 2.1, 0.3) * 0.5).requires_grad_()
    w2 = (filled((1, 5), 0.9, 0.4) * 0.8).requires_grad_()
    b2 = (filled((1,), 1.1, 0.5) * 0.5).requires_grad_()
    out = F.linear(torch.tanh(F.linear(x, w1, b1)), w2, b2)
    (g,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    penalty = (g * g).sum(1).mean()
    penalty.backward()
    assert b2.grad is None  # the penalty does not depend on the last bias
    return {"out": out, "g": g, "penalty": penalty, "w1.grad": w1.grad, "b1.grad": b1.grad,
            "w2.grad": w2.grad, "x.grad": x.grad}


@case
def hessian_vector_product():
    x = (filled((3, 4), 0.9, 0.2) * 1.5).requires_grad_()
    w = filled((4, 5), 1.7, 0.6)
    t = filled((3, 5), 0.5, 1.0).abs()
    v = filled((3, 4), 2.3, 0.7)
    target = filled((3, 4), 1.1, 0.3)
    f = ((F.log_softmax(x.mm(w), 1) * t).sum() + (x.pow(3) * torch.sigmoid(x)).sum()
         + (torch.softmax(x, 0) * F.gelu(x)).sum() + F.mse_loss(torch.tanh(x), target))
    (g,) = torch.autograd.grad(f, x, create_graph=True)
    (hv,) = torch.autograd.grad((g * v).sum(), x)
    return {"f": f, "g": g, "hv": hv}


@case
def leaf_grad_with_graph():
    x = torch.tensor([0.5, -1.0, 2.0], dtype=D).requires_grad_()
    (x * x * x).sum().backward(create_graph=True)
    first = x.grad.detach().clone()
    assert x.grad.requires_grad
    x.grad.sum().backward()  # adds 6x into x.grad
    return {"x.grad_first": first, "x.grad": x.grad}


def main():
    write_cases(OUT, CASES)


if __name__ == "__main__":
    main()
