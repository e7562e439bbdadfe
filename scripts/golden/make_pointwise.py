#!/usr/bin/env python3
"""Writes tests/golden/pointwise.txt: what PyTorch computes (or refuses) for the pointwise and
masking ops: floor_divide, remainder, fmod, masked_fill(_), isnan/isinf/isfinite, lerp, addcmul,
tril/triu. Forward values with their dtypes and, for float64 programs, gradients.
tests/test_pointwise.cpp runs the same programs, case by case, and must match. The activations
are scripts/golden/make_activations.py's.

Run with Debian's PyTorch:  /usr/bin/python3 scripts/golden/make_pointwise.py

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

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "golden", "pointwise.txt")
D = torch.float64
INF = float("inf")
NAN = float("nan")

# Shared inputs (tests/test_pointwise.cpp builds the same ones).
FA = [5.5, -5.5, 7.0, -7.0, 0.0, 3.25, -3.25, 1.0]
FB = [2.0, 2.0, -2.0, -2.0, 3.0, -1.5, 1.5, 0.75]
IA = [7, -7, 7, -7, 0, 9, -9, 1]
IB = [2, 2, -2, -2, 3, -4, 4, 5]
ACT = [-20.0, -3.0, -1.0, -0.5, 0.0, 0.25, 1.0, 4.0]
SPECIAL = [1.0, INF, -INF, NAN, 0.0, -0.0, -2.5, 3e38]


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


# ---- floor_divide / remainder / fmod ----------------------------------------------------------
for op in ("floor_divide", "remainder", "fmod"):
    f = getattr(torch, op)

    def make(f=f, op=op):
        def float64():
            return {"out": f(t(FA), t(FB))}

        def float32():
            return {"out": f(t(FA, torch.float32), t(FB, torch.float32))}

        def int64():
            return {"out": f(t(IA, torch.int64), t(IB, torch.int64))}

        def int32_scalar():
            return {"out": f(t(IA, torch.int32), -3)}

        def int_by_float_scalar():
            return {"out": f(t(IA, torch.int64), 2.5)}

        def float_by_zero():
            return {"out": f(t([1.0, -1.0, 0.0, 2.5]), t([0.0, 0.0, 0.0, -0.0]))}

        def int_by_zero_refused():
            return {"out": f(t(IA, torch.int64), t([2, 2, 0, 1, 1, 1, 1, 1], torch.int64))}

        def broadcast():
            return {"out": f(t(FA, D, (2, 4)), t([2.0, -3.0, 0.5, 4.0]))}

        for g in (float64, float32, int64, int32_scalar, int_by_float_scalar, float_by_zero,
                  int_by_zero_refused, broadcast):
            CASES[op + "_" + g.__name__] = g

    make()


@case
def remainder_grad():
    a, b = leaf(FA, (2, 4)), leaf([2.0, -3.0, 0.75, 4.0])
    y = torch.remainder(a, b)
    (y * weights(8, (2, 4))).sum().backward()
    return {"y": y, "a.grad": a.grad, "b.grad": b.grad}


@case
def fmod_grad():
    a, b = leaf(FA, (2, 4)), leaf([2.0, -3.0, 0.75, 4.0])
    y = torch.fmod(a, b)
    (y * weights(8, (2, 4))).sum().backward()
    return {"y": y, "a.grad": a.grad, "b.grad": b.grad}


@case
def remainder_scalar_grad():
    a = leaf(FA)
    y = torch.remainder(a, -2.5)
    (y * weights(8)).sum().backward()
    return {"y": y, "a.grad": a.grad}


# ---- masked_fill -------------------------------------------------------------------------------
MASK4 = [True, False, False, True]


@case
def masked_fill_float32_broadcast_mask():
    return {"out": t(FA, torch.float32, (2, 4)).masked_fill(t(MASK4, torch.bool), 2.5)}


@case
def masked_fill_int64_float_value():
    return {"out": t(IA, torch.int64, (2, 4)).masked_fill(t(MASK4, torch.bool), 2.7)}


@case
def masked_fill_bool():
    return {"out": t(MASK4, torch.bool).masked_fill(t([True, True, False, False], torch.bool), True)}


@case
def masked_fill_mask_broadcasts_self():
    x = t([1.0, 2.0, 3.0, 4.0], D, (1, 4))
    return {"out": x.masked_fill(t([True, False, True], torch.bool, (3, 1)), -1.0)}


@case
def masked_fill_tensor_value_grad():
    x, v = leaf(FA, (2, 4)), leaf(2.0)
    y = x.masked_fill(t(MASK4, torch.bool), v)
    (y * weights(8, (2, 4))).sum().backward()
    return {"y": y, "x.grad": x.grad, "v.grad": v.grad}


@case
def masked_fill_float64_value_into_float32():
    x = t(FA, torch.float32)
    return {"out": x.masked_fill(t(MASK4 * 2, torch.bool), t(0.1, D))}


@case
def masked_fill_inplace_grad():
    x, v = leaf(FA, (2, 4)), leaf(-1.5)
    y = x * 2
    y.masked_fill_(t(MASK4, torch.bool), v)
    (y * weights(8, (2, 4))).sum().backward()
    return {"y": y, "x.grad": x.grad, "v.grad": v.grad}


@case
def masked_fill_value_with_dims_refused():
    return {"out": t(FA).masked_fill(t(MASK4 * 2, torch.bool), t([1.0]))}


@case
def masked_fill_inplace_broadcast_self_refused():
    x = t([1.0, 2.0, 3.0, 4.0])
    x.masked_fill_(t([True, False], torch.bool, (2, 1)), 0.0)
    return {"out": x}


# ---- isnan / isinf / isfinite --------------------------------------------------------------------
for op in ("isnan", "isinf", "isfinite"):
    f = getattr(torch, op)

    def make(f=f, op=op):
        def float32():
            return {"out": f(t(SPECIAL, torch.float32))}

        def float64():
            return {"out": f(t(SPECIAL))}

        def float16():
            return {"out": f(t(SPECIAL[:7], torch.float16))}

        def int64():
            return {"out": f(t(IA, torch.int64))}

        def bool_():
            return {"out": f(t(MASK4, torch.bool))}

        for g in (float32, float64, float16, int64, bool_):
            CASES[op + "_" + g.__name__.rstrip("_")] = g

    make()


# ---- lerp ---------------------------------------------------------------------------------------
for w in (0.25, 0.75, 1.0, -0.5, 1.5):
    def make(w=w):
        def f64():
            return {"out": torch.lerp(t(FA), t(FB), w)}

        def f32():
            return {"out": torch.lerp(t(FA, torch.float32), t(FB, torch.float32), w)}

        tag = str(w).replace("-", "m").replace(".", "p")
        CASES["lerp_scalar_" + tag + "_float64"] = f64
        CASES["lerp_scalar_" + tag + "_float32"] = f32

    make()


@case
def lerp_tensor_weight_grad():
    s, e = leaf(FA, (2, 4)), leaf([1.0, -2.0, 0.5, 3.0])
    w = leaf([0.25, 0.75, -0.5, 1.5, 0.0, 1.0, 0.5, 0.4], (2, 4))
    y = torch.lerp(s, e, w)
    (y * weights(8, (2, 4))).sum().backward()
    return {"y": y, "s.grad": s.grad, "e.grad": e.grad, "w.grad": w.grad}


@case
def lerp_scalar_weight_grad():
    s, e = leaf(FA), leaf(FB)
    y = torch.lerp(s, e, 0.3)
    (y * weights(8)).sum().backward()
    return {"y": y, "s.grad": s.grad, "e.grad": e.grad}


@case
def lerp_weight_float32():
    w = t([0.25, 0.75, -0.5, 1.5, 0.0, 1.0, 0.5, 0.4], torch.float32)
    return {"out": torch.lerp(t(FA, torch.float32), t(FB, torch.float32), w)}


@case
def lerp_mixed_dtypes_refused():
    return {"out": torch.lerp(t(FA, torch.float32), t(FB), 0.5)}


# ---- addcmul ------------------------------------------------------------------------------------
@case
def addcmul_grad():
    s, a, b = leaf(FA, (2, 4)), leaf(FB, (2, 4)), leaf([1.0, -2.0, 0.5, 3.0])
    y = torch.addcmul(s, a, b, value=0.5)
    (y * weights(8, (2, 4))).sum().backward()
    return {"y": y, "s.grad": s.grad, "a.grad": a.grad, "b.grad": b.grad}


@case
def addcmul_float32():
    return {"out": torch.addcmul(t(FA, torch.float32), t(FB, torch.float32),
                                 t(ACT, torch.float32), value=-1.5)}


@case
def addcmul_int64():
    return {"out": torch.addcmul(t(IA, torch.int64), t(IB, torch.int64), t(IA, torch.int64),
                                 value=3)}


@case
def addcmul_promotes():
    return {"out": torch.addcmul(t(FA, torch.float32), t(FB), t(IA, torch.int64))}


@case
def addcmul_zero_dim_operand():
    return {"out": torch.addcmul(t(IA, torch.int64), t(2.5), t(IB, torch.int64))}


# ---- tril / triu --------------------------------------------------------------------------------
M234 = [float(i) - 11.0 for i in range(24)]
for op in ("tril", "triu"):
    f = getattr(torch, op)
    for k in (0, 1, -1, 5, -5):
        def make(f=f, k=k):
            return lambda: {"out": f(t(M234, D, (2, 3, 4)), k)}

        CASES["%s_%s" % (op, str(k).replace("-", "m"))] = make()

    def extra(f=f, op=op):
        def int64():
            return {"out": f(t(list(range(12)), torch.int64, (3, 4)), 1)}

        def bool_():
            return {"out": f(t([True] * 12, torch.bool, (4, 3)), -1)}

        def grad():
            x = leaf(M234, (2, 3, 4))
            y = f(x, 1)
            (y * weights(24, (2, 3, 4))).sum().backward()
            return {"y": y, "x.grad": x.grad}

        def one_dim_refused():
            return {"out": f(t(FA))}

        CASES[op + "_int64"] = int64
        CASES[op + "_bool"] = bool_
        CASES[op + "_grad"] = grad
        CASES[op + "_one_dim_refused"] = one_dim_refused

    extra()


def main():
    write_cases(OUT, CASES, with_dtype=True)


if __name__ == "__main__":
    main()
