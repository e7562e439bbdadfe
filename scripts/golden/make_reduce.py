#!/usr/bin/env python3
"""Writes tests/golden/reduce.txt: what PyTorch computes (or refuses) for logsumexp, prod,
cumsum/cumprod, any/all, topk, sort, split/chunk/repeat, einsum, addmm and baddbmm: forward
values and gradients in float64 and float32, including ties in sort/topk, zeros in prod/cumprod
and infinities in logsumexp. tests/test_reduce_ops.cpp runs the same programs, case by case, and
must match.

Gradients are those of sum(out * weights(out)), with weights(t)[i] = ((i % 7) - 3) / 2 over t's
elements in row-major order.

topk orders equal values as a stable sort does (first occurrence first); PyTorch leaves that
order unspecified, so cases with ties take their reference from torch.sort(stable=True) and check
here that torch.topk returns the same values.

Run with Debian's PyTorch:  /usr/bin/python3 scripts/golden/make_reduce.py

File format, one record per line:
  case NAME
  tensor NAME DTYPE d0,d1,... v0 v1 ...   (values as %.17g; a 0-d tensor has dims "-")
  raises                                    (PyTorch refused the program)
  end
"""
import math
import os

import torch

from golden_cases import write_cases

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "golden", "reduce.txt")
D = torch.float64
F = torch.float32
INF = math.inf
NAN = math.nan


def leaf(values, shape=None, dtype=D):
    t = torch.tensor(values, dtype=D)
    if shape is not None:
        t = t.reshape(shape)
    return t.to(dtype).requires_grad_()


def const(values, shape=None, dtype=D):
    t = torch.tensor(values, dtype=D)
    if shape is not None:
        t = t.reshape(shape)
    return t.to(dtype)


def weights(t):
    w = torch.tensor([((i % 7) - 3) / 2 for i in range(t.numel())], dtype=D)
    return w.reshape(t.shape).to(t.dtype)


def backward(*outs):
    loss = sum((o * weights(o)).sum() for o in outs)
    loss.backward()


def vals(n, shift=0.0):
    """n deterministic, distinct, non-zero values (tests/test_reduce_ops.cpp: vals)."""
    return [math.sin(1.7 * i + 0.3) * 2 + shift for i in range(n)]


CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


# ---- logsumexp ------------------------------------------------------------------------------
def lse(dtype, dims, keepdim, shape):
    x = leaf(vals(math.prod(shape)), shape, dtype)
    y = torch.logsumexp(x, dims, keepdim)
    backward(y)
    return {"y": y, "x.grad": x.grad}


@case
def logsumexp_dim1_f64():
    return lse(D, [1], False, (3, 4))


@case
def logsumexp_dims_keepdim_f64():
    return lse(D, [0, -1], True, (2, 3, 4))


@case
def logsumexp_dim0_f32():
    return lse(F, [0], False, (4, 5))


@case
def logsumexp_large_f32():
    x = leaf([100.0, 101.0, 99.5, -3.0, 88.0, 89.0], (2, 3), F)
    y = torch.logsumexp(x, [1])
    backward(y)
    return {"y": y, "x.grad": x.grad}


@case
def logsumexp_infinities_f64():
    x = leaf([-INF, -INF, -INF, 0.0, -INF, 1.0, INF, 1.0, 2.0, -INF, INF, 0.5], (4, 3))
    y = torch.logsumexp(x, [1])
    backward(y)
    return {"y": y, "x.grad": x.grad}


@case
def logsumexp_int_input():
    x = const([1, 2, 3, 4, 5, 6], (2, 3)).to(torch.int64)
    return {"y": torch.logsumexp(x, [1])}


# ---- prod -----------------------------------------------------------------------------------
def prod_dim(values, shape, dim, keepdim=False, dtype=D):
    x = leaf(values, shape, dtype)
    y = torch.prod(x, dim, keepdim)
    backward(y)
    return {"y": y, "x.grad": x.grad}


def prod_all(values, shape, dtype=D):
    x = leaf(values, shape, dtype)
    y = torch.prod(x)
    backward(y)
    return {"y": y, "x.grad": x.grad}


@case
def prod_all_f64():
    return prod_all(vals(6), (2, 3))


@case
def prod_all_one_zero_f64():
    return prod_all([1.5, -2.0, 0.0, 3.0, 0.5, 2.0], (2, 3))


@case
def prod_all_two_zeros_f64():
    return prod_all([1.5, 0.0, 2.0, 3.0, 0.0, 2.0], (2, 3))


@case
def prod_dim1_zeros_f64():
    # rows: no zero, one zero, two zeros, all zeros
    return prod_dim([1.5, -2.0, 0.5, 3.0,
                     2.0, 0.0, -1.5, 0.5,
                     0.0, 2.0, 0.0, 3.0,
                     0.0, 0.0, 0.0, 0.0], (4, 4), 1)


@case
def prod_dim0_keepdim_zeros_f64():
    return prod_dim([1.5, 0.0, 2.0, -1.0, 3.0, 0.0, 0.5, 2.0, 0.0], (3, 3), -2, True)


@case
def prod_dim_f32():
    return prod_dim(vals(12), (3, 4), 1, False, F)


@case
def prod_dim_zeros_f32():
    return prod_dim([1.5, 0.0, 2.0, -1.0, 3.0, 0.25], (2, 3), 1, False, F)


@case
def prod_int32():
    x = const([1, 2, 3, -4, 5, 6], (2, 3)).to(torch.int32)
    return {"all": torch.prod(x), "dim": torch.prod(x, 0)}


@case
def prod_bool():
    x = torch.tensor([[True, False], [True, True]])
    return {"all": torch.prod(x), "dim": torch.prod(x, 1)}


@case
def prod_dtype_arg():
    x = const([1.5, 2.5, -3.0, 4.0], (2, 2), F)
    return {"y": torch.prod(x, 1, dtype=D)}


# ---- cumsum and cumprod ---------------------------------------------------------------------
def scan(fn, values, shape, dim, dtype=D):
    x = leaf(values, shape, dtype)
    y = fn(x, dim)
    backward(y)
    return {"y": y, "x.grad": x.grad}


@case
def cumsum_dim1_f64():
    return scan(torch.cumsum, vals(12), (3, 4), 1)


@case
def cumsum_dim0_f32():
    return scan(torch.cumsum, vals(12), (3, 4), -2, F)


@case
def cumsum_3d_f64():
    return scan(torch.cumsum, vals(24), (2, 3, 4), 1)


@case
def cumsum_int_and_bool():
    x = const([1, 2, 3, -4, 5, 6], (2, 3)).to(torch.int32)
    b = torch.tensor([True, False, True, True])
    return {"int": torch.cumsum(x, 1), "bool": torch.cumsum(b, 0),
            "as_f64": torch.cumsum(x, 0, dtype=D)}


@case
def cumprod_dim1_f64():
    return scan(torch.cumprod, vals(12), (3, 4), 1)


@case
def cumprod_zeros_f64():
    # rows: zero first, zero in the middle, two zeros, zero last, no zero
    return scan(torch.cumprod, [0.0, 2.0, -1.5, 3.0,
                                1.5, 2.0, 0.0, -3.0,
                                2.0, 0.0, 0.5, 0.0,
                                -1.0, 2.0, 0.5, 0.0,
                                1.5, -0.5, 2.0, 1.25], (5, 4), 1)


@case
def cumprod_zeros_dim0_f32():
    return scan(torch.cumprod, [1.5, 0.0, 2.0, 0.0, 3.0, -1.0, 2.0, 0.5, 0.0, 1.0, 2.0, 3.0],
                (4, 3), 0, F)


@case
def cumprod_int():
    x = const([1, 2, 3, -4, 0, 6], (2, 3)).to(torch.int64)
    return {"y": torch.cumprod(x, 1)}


# ---- any and all ----------------------------------------------------------------------------
@case
def any_all_float():
    x = const([0.0, 0.0, 0.0, 1.5, 0.0, NAN, 2.0, -1.0, 3.0], (3, 3))
    return {"any": torch.any(x), "all": torch.all(x), "any1": torch.any(x, 1),
            "all1": torch.all(x, 1), "any0k": torch.any(x, 0, keepdim=True),
            "all_neg": torch.all(x, -1, keepdim=True)}


@case
def any_all_uint8_and_bool():
    u = const([0, 1, 2, 0, 0, 0], (2, 3)).to(torch.uint8)
    b = torch.tensor([[True, False], [True, True]])
    return {"u_any": torch.any(u, 1), "u_all": torch.all(u), "b_any": torch.any(b, 0),
            "b_all": torch.all(b, 1)}


@case
def any_all_empty():
    e = torch.zeros(0, 3)
    return {"any": torch.any(e), "all": torch.all(e), "any0": torch.any(e, 0),
            "all0": torch.all(e, 0)}


# ---- sort and topk --------------------------------------------------------------------------
def sort_case(values, shape, dim, descending, dtype=D):
    x = leaf(values, shape, dtype)
    v, i = torch.sort(x, dim=dim, descending=descending, stable=True)
    backward(v)
    return {"values": v, "indices": i, "x.grad": x.grad}


TIES = [1.0, 3.0, 3.0, 2.0, 3.0, 1.0,
        2.0, 2.0, 2.0, 2.0, 2.0, 2.0,
        -1.0, 0.5, -1.0, 0.5, -1.0, 4.0]


@case
def sort_ties_ascending_f64():
    return sort_case(TIES, (3, 6), 1, False)


@case
def sort_ties_descending_f64():
    return sort_case(TIES, (3, 6), -1, True)


@case
def sort_dim0_f32():
    return sort_case(TIES, (6, 3), 0, True, F)


@case
def sort_nan_f64():
    return sort_case([1.0, NAN, 3.0, NAN, 2.0, -INF, INF, 0.0], (2, 4), 1, False)


@case
def sort_nan_descending_f32():
    return sort_case([1.0, NAN, 3.0, NAN, 2.0, -INF, INF, 0.0], (2, 4), 1, True, F)


@case
def sort_int():
    x = const([3, 1, 2, 1, 3, 0], (2, 3)).to(torch.int32)
    v, i = torch.sort(x, dim=1, stable=True)
    return {"values": v, "indices": i}


def topk_case(values, shape, k, dim, largest, dtype=D):
    x = leaf(values, shape, dtype)
    v, i = torch.topk(x, k, dim, largest)
    # The stable reference: equal values in input order.
    sv, si = torch.sort(x, dim=dim, descending=largest, stable=True)
    ref_v, ref_i = sv.narrow(dim, 0, k), si.narrow(dim, 0, k)
    torch.testing.assert_close(v, ref_v, rtol=0, atol=0, equal_nan=True)
    backward(ref_v)
    return {"values": ref_v, "indices": ref_i, "x.grad": x.grad}


@case
def topk_largest_f64():
    return topk_case(vals(18), (3, 6), 3, 1, True)


@case
def topk_smallest_dim0_f32():
    return topk_case(vals(18), (6, 3), 2, 0, False, F)


@case
def topk_ties_f64():
    return topk_case(TIES, (3, 6), 4, 1, True)


@case
def topk_ties_smallest_f64():
    return topk_case(TIES, (3, 6), 3, -1, False)


@case
def topk_nan_f64():
    return topk_case([1.0, 3.0, NAN, 3.0, 2.0, 0.5], (2, 3), 2, 1, True)


@case
def topk_all_f64():
    return topk_case(vals(6), (6,), 6, 0, True)


@case
def topk_k_too_large_refused():
    return {"out": torch.topk(torch.ones(2, 3), 4, 1)[0]}


# ---- split, chunk and repeat ----------------------------------------------------------------
@case
def split_size():
    x = leaf(vals(15), (3, 5))
    parts = torch.split(x, 2, dim=1)
    backward(*parts)
    out = {f"p{i}": p for i, p in enumerate(parts)}
    out["x.grad"] = x.grad
    return out


@case
def split_sizes():
    x = leaf(vals(12), (6, 2))
    parts = torch.split(x, [1, 0, 3, 2], dim=0)
    backward(*parts)
    out = {f"p{i}": p for i, p in enumerate(parts)}
    out["x.grad"] = x.grad
    return out


@case
def split_larger_than_dim():
    x = const(vals(6), (2, 3))
    parts = torch.split(x, 5, dim=-1)
    return {f"p{i}": p for i, p in enumerate(parts)}


@case
def split_sizes_wrong_sum_refused():
    return {"out": torch.split(torch.ones(4, 2), [1, 2], dim=0)[0]}


@case
def chunk_uneven():
    x = leaf(vals(10), (5, 2))
    parts = torch.chunk(x, 3, dim=0)
    backward(*parts)
    out = {f"p{i}": p for i, p in enumerate(parts)}
    out["x.grad"] = x.grad
    return out


@case
def chunk_fewer_than_asked():
    x = const(vals(12), (2, 6))
    parts = torch.chunk(x, 4, dim=1)
    return {f"p{i}": p for i, p in enumerate(parts)}


@case
def chunk_zero_refused():
    return {"out": torch.chunk(torch.ones(4), 0)[0]}


@case
def repeat_2d():
    x = leaf(vals(6), (2, 3))
    y = x.repeat(2, 3)
    backward(y)
    return {"y": y, "x.grad": x.grad}


@case
def repeat_new_dims():
    x = leaf(vals(3), (3,))
    y = x.repeat(2, 1, 2)
    backward(y)
    return {"y": y, "x.grad": x.grad}


@case
def repeat_size_one_dims_f32():
    x = leaf(vals(4), (4, 1), F)
    y = x.repeat(1, 3)
    backward(y)
    return {"y": y, "x.grad": x.grad}


@case
def repeat_ones_copies():
    x = leaf(vals(4), (2, 2))
    y = x.repeat(1, 1)
    backward(y)
    return {"y": y, "x.grad": x.grad}


@case
def repeat_too_few_dims_refused():
    return {"out": torch.ones(2, 3).repeat(2)}


# ---- einsum ---------------------------------------------------------------------------------
def einsum_case(equation, shapes, dtype=D):
    xs = [leaf(vals(math.prod(s), shift=0.1 * k), s, dtype) for k, s in enumerate(shapes)]
    y = torch.einsum(equation, *xs)
    backward(y)
    out = {"y": y}
    for k, x in enumerate(xs):
        out[f"x{k}.grad"] = x.grad
    return out


@case
def einsum_matmul():
    return einsum_case("ij,jk->ik", [(3, 4), (4, 2)])


@case
def einsum_batch_transposed_f32():
    return einsum_case("bij,bjk->bki", [(2, 3, 4), (2, 4, 5)], F)


@case
def einsum_attention():
    return einsum_case("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)])


@case
def einsum_implicit():
    return einsum_case("kj,ji", [(3, 4), (4, 2)])


@case
def einsum_outer():
    return einsum_case("i,j->ij", [(3,), (4,)])


@case
def einsum_dot():
    return einsum_case("i,i->", [(5,), (5,)])


@case
def einsum_trace():
    return einsum_case("ii->", [(3, 3)])


@case
def einsum_diagonal():
    return einsum_case("ii->i", [(3, 3)])


@case
def einsum_sum_and_transpose():
    return einsum_case("ijk->kj", [(2, 3, 4)])


@case
def einsum_three_operands():
    return einsum_case("ij,jk,kl->li", [(2, 3), (3, 4), (4, 5)])


@case
def einsum_ellipsis_broadcast():
    return einsum_case("...ij,...jk->...ik", [(2, 1, 3, 4), (3, 4, 2)])


@case
def einsum_ellipsis_summed():
    return einsum_case("...ij->j", [(2, 3, 4)])


@case
def einsum_spaces_and_uppercase():
    return einsum_case("Ab , bC -> CA", [(2, 3), (3, 4)])


@case
def einsum_wrong_operand_count_refused():
    return {"out": torch.einsum("ij,jk->ik", torch.ones(2, 2))}


@case
def einsum_wrong_dims_refused():
    return {"out": torch.einsum("ijk->i", torch.ones(2, 2))}


# ---- addmm and baddbmm ----------------------------------------------------------------------
def scaled_case(fn, shapes, beta, alpha, dtype=D):
    xs = [leaf(vals(math.prod(s), shift=0.1 * k), s, dtype) for k, s in enumerate(shapes)]
    y = fn(*xs, beta=beta, alpha=alpha)
    backward(y)
    out = {"y": y}
    for k, x in enumerate(xs):
        out[f"x{k}.grad"] = x.grad
    return out


@case
def addmm_default():
    return scaled_case(torch.addmm, [(3, 2), (3, 4), (4, 2)], 1, 1)


@case
def addmm_scaled_broadcast():
    return scaled_case(torch.addmm, [(2,), (3, 4), (4, 2)], 0.5, -2.0)


@case
def addmm_f32():
    return scaled_case(torch.addmm, [(1, 2), (3, 4), (4, 2)], 2.0, 0.25, F)


@case
def addmm_beta_zero_ignores_nan():
    x = const([NAN, 1.0], (2,))
    a = leaf(vals(6), (3, 2))
    b = leaf(vals(4), (2, 2))
    y = torch.addmm(x, a, b, beta=0, alpha=1.5)
    backward(y)
    return {"y": y, "a.grad": a.grad, "b.grad": b.grad}


@case
def baddbmm_scaled():
    return scaled_case(torch.baddbmm, [(2, 3, 2), (2, 3, 4), (2, 4, 2)], 0.75, 1.5)


@case
def baddbmm_broadcast_f32():
    return scaled_case(torch.baddbmm, [(3, 1), (2, 3, 4), (2, 4, 2)], -1.0, 2.0, F)


@case
def addmm_shapes_refused():
    return {"out": torch.addmm(torch.ones(2), torch.ones(3, 4), torch.ones(3, 2))}


# ---- writer ---------------------------------------------------------------------------------
def main():
    write_cases(OUT, CASES, with_dtype=True)


if __name__ == "__main__":
    main()
