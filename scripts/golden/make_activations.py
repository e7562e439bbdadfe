#!/usr/bin/env python3
"""Writes tests/golden/activations.txt: what PyTorch computes for the activations of
engine/activations.def but silu (leaky_relu, elu, celu, softplus, hardtanh with their parameters;
mish, hardswish, selu, softsign, logsigmoid). Forward values in float32 and, in float64,
gradients. tests/test_activations.cpp runs the same programs, case by case, and must match.

Run with Debian's PyTorch:  /usr/bin/python3 scripts/golden/make_activations.py

File format, one record per line:
  case NAME
  tensor NAME DTYPE d0,d1,... v0 v1 ...   (values %.17g, inf/nan spelled so; 0-d dims are "-")
  raises                                   (PyTorch refused the program)
  end
"""
import os
import torch
import torch.nn.functional as F

from golden_cases import write_cases

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "golden", "activations.txt")
D = torch.float64

# Shared inputs (tests/test_activations.cpp builds the same ones).
ACT = [-20.0, -3.0, -1.0, -0.5, 0.0, 0.25, 1.0, 4.0]
# softplus(beta=2, threshold=3) switches to the identity above x = 1.5.
SOFT = [-30.0, -1.0, 0.0, 1.0, 1.49, 1.5, 1.51, 10.0]
# hardswish's gradient at exactly -3 and 3 changed in PyTorch 2.7 (tests/test_activations.cpp
# checks today's), so its golden inputs stay off them.
HSW = [-20.0, -3.5, -1.0, -0.5, 0.0, 0.25, 1.0, 4.0]


def t(values, dtype=D, shape=None):
    x = torch.tensor(values, dtype=dtype)
    return x.reshape(shape) if shape is not None else x


def leaf(values, shape=None):
    return t(values, D, shape).requires_grad_()


def weights(n, shape=None):
    """A fixed, non-uniform upstream gradient: 1, 2, ..., n (times 0.5)."""
    return t([0.5 * (i + 1) for i in range(n)], D, shape)


CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


# ---- activations ---------------------------------------------------------------------------------
def activation_case(name, fn):
    inputs = SOFT if name.startswith("softplus") else HSW if name == "hardswish" else ACT

    def grad():
        x = leaf(inputs)
        y = fn(x)
        (y * weights(8)).sum().backward()
        return {"y": y, "x.grad": x.grad}

    def float32():
        return {"out": fn(t(inputs, torch.float32))}

    CASES[name + "_grad"] = grad
    CASES[name + "_float32"] = float32


activation_case("leaky_relu", lambda x: F.leaky_relu(x))
activation_case("leaky_relu_slope", lambda x: F.leaky_relu(x, 0.2))
activation_case("elu", lambda x: F.elu(x))
activation_case("elu_alpha", lambda x: F.elu(x, 0.5))
activation_case("softplus", lambda x: F.softplus(x))
activation_case("softplus_beta_threshold", lambda x: F.softplus(x, 2.0, 3.0))


activation_case("mish", lambda x: F.mish(x))
activation_case("hardswish", lambda x: F.hardswish(x))
activation_case("selu", lambda x: F.selu(x))
# alpha exactly representable in float: PyTorch 1.13 computes celu's 1 / alpha from a float alpha.
activation_case("celu", lambda x: F.celu(x))
activation_case("celu_alpha", lambda x: F.celu(x, 0.5))
activation_case("softsign", lambda x: F.softsign(x))
activation_case("logsigmoid", lambda x: F.logsigmoid(x))
# The default ends -1 and 1 are inputs: the gradient is 0 at them.
activation_case("hardtanh", lambda x: F.hardtanh(x))
activation_case("hardtanh_range", lambda x: F.hardtanh(x, -0.5, 2.0))


@case
def mish_hardswish_wide_float32():
    x = t([-100.0, -30.0, -3.0, 3.0, 20.0, 30.0, 89.0, 100.0], torch.float32)
    return {"mish": F.mish(x), "hardswish": F.hardswish(x)}


@case
def wide_float32():
    """The new activations far out, where exp overflows or the result rounds to its limit (not so
    far that logsigmoid's exp(-x) is a float32 subnormal, where PyTorch's vectorised exp is off
    by an ulp)."""
    x = t([-100.0, -30.0, -3.0, 0.0, 3.0, 20.0, 50.0, 80.0], torch.float32)
    return {"selu": F.selu(x), "celu": F.celu(x, 2.0), "softsign": F.softsign(x),
            "logsigmoid": F.logsigmoid(x), "hardtanh": F.hardtanh(x, -2.0, 25.0)}


@case
def softplus_large_float32():
    return {"out": F.softplus(t([15.0, 19.9, 20.0, 20.1, 50.0, 100.0], torch.float32))}


def main():
    write_cases(OUT, CASES, with_dtype=True)


if __name__ == "__main__":
    main()
