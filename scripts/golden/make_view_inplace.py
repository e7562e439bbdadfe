#!/usr/bin/env python3
"""Writes tests/golden/view_inplace.txt: what PyTorch computes (or refuses) for in-place ops
written through views, for view ops given out-of-range arguments, and for tensor hooks that
replace a gradient. tests/test_view_inplace.cpp runs the same programs, case by case, and must
match.

Run with Debian's PyTorch:  /usr/bin/python3 scripts/golden/make_view_inplace.py

File format, one record per line:
  case NAME
  tensor NAME d0,d1,... v0 v1 ...   (float64 values, %.17g; a 0-d tensor has dims "-")
  raises                              (PyTorch refused the program)
  end
"""
import os
import torch

from golden_cases import write_cases

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "golden", "view_inplace.txt")
D = torch.float64


def leaf(values, shape=None):
    t = torch.tensor(values, dtype=D)
    if shape is not None:
        t = t.reshape(shape)
    return t.requires_grad_()


def x3():
    return leaf([1.0, 2.0, 3.0])


def x23():
    return leaf([1.0, -2.0, 3.0, 0.5, 4.0, -1.5], (2, 3))


CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


@case
def narrow_mul_scalar():
    x = x3()
    y = x * 1
    y.narrow(0, 1, 1).mul_(3)
    y.sum().backward()
    return {"y": y, "x.grad": x.grad}


@case
def select_fill():
    x = x3()
    y = x * 2
    y.select(0, 0).fill_(5)
    (y * y).sum().backward()
    return {"y": y, "x.grad": x.grad}


@case
def narrow_copy_from_graph():
    x = x3()
    s = leaf([10.0, 20.0])
    y = x * 3
    y.narrow(0, 0, 2).copy_(s * s)
    y.sum().backward()
    return {"y": y, "x.grad": x.grad, "s.grad": s.grad}


@case
def transpose_add_tensor():
    x = x23()
    b = leaf([0.5, 1.0, -1.0, 2.0, 3.0, -0.25], (3, 2))
    y = x * 1
    y.t().add_(b)
    (y * y).sum().backward()
    return {"y": y, "x.grad": x.grad, "b.grad": b.grad}


@case
def view_taken_before_base_mul():
    x = x3()
    y = x * 1
    v = y.narrow(0, 1, 2)
    y.mul_(2)
    (v * v).sum().backward()
    return {"v": v, "x.grad": x.grad}


@case
def sibling_view_after_inplace():
    x = x3()
    y = x * 1
    a = y.narrow(0, 0, 2)
    b = y.narrow(0, 1, 2)
    a.mul_(2)
    (b * b).sum().backward()
    return {"b": b, "x.grad": x.grad}


@case
def view_of_view_mul_tensor():
    x = x23()
    w = leaf([2.0, -3.0])
    y = x * 1
    y.select(0, 1).narrow(0, 1, 2).mul_(w)
    (y * y).sum().backward()
    return {"y": y, "x.grad": x.grad, "w.grad": w.grad}


@case
def buffer_without_grad_gets_history():
    s = leaf([1.5, -2.0])
    buf = torch.zeros(4, dtype=D)
    buf.narrow(0, 1, 2).copy_(s * 2)
    (buf * buf).sum().backward()
    return {"buf": buf, "s.grad": s.grad}


@case
def two_inplace_ops_on_one_view():
    x = x3()
    s = leaf([0.5, -1.0])
    y = x * 1
    v = y.narrow(0, 0, 2)
    v.mul_(2)
    v.add_(s * s)
    (y * y).sum().backward()
    return {"y": y, "x.grad": x.grad, "s.grad": s.grad}


@case
def view_used_after_its_inplace():
    x = x3()
    y = x * 1
    v = y.narrow(0, 1, 2)
    v.mul_(3)
    ((v * v).sum() + y.sum()).backward()
    return {"y": y, "x.grad": x.grad}


@case
def expanded_view_after_base_mul():
    x = x3()
    y = x.reshape(3, 1) * 1
    e = y.expand(3, 4)
    y.mul_(2)
    (e * torch.arange(12, dtype=D).reshape(3, 4)).sum().backward()
    return {"e": e, "x.grad": x.grad}


@case
def permute_strided_slice_div():
    x = leaf([float(i) - 7.5 for i in range(24)], (2, 3, 4))
    d = leaf([2.0, 4.0, -0.5], (1, 3))
    y = x * 1
    y.permute(2, 0, 1)[0:4:2].div_(d)
    (y * y).sum().backward()
    return {"y": y, "x.grad": x.grad, "d.grad": d.grad}


@case
def unsqueeze_squeeze_sub():
    x = x3()
    s = leaf([4.0])
    y = x * 1
    y.unsqueeze(0).squeeze(0).view(3, 1).select(1, 0).narrow(0, 2, 1).sub_(s, alpha=2)
    (y * y).sum().backward()
    return {"y": y, "x.grad": x.grad, "s.grad": s.grad}


@case
def copy_into_view_then_base_inplace():
    x = x3()
    s = leaf([7.0])
    y = x * 1
    y.narrow(0, 2, 1).copy_(s)
    y.mul_(y.detach() + 1)
    (y * y).sum().backward()
    return {"y": y, "x.grad": x.grad, "s.grad": s.grad}


@case
def view_inplace_under_no_grad_then_use():
    x = x3()
    y = x * 1
    v = y.narrow(0, 0, 2)
    with torch.no_grad():
        v.mul_(10)
    (y * y).sum().backward()
    return {"y": y, "x.grad": x.grad}


# ---- refused programs -----------------------------------------------------------------------
@case
def leaf_view_inplace_refused():
    x = x3()
    x.narrow(0, 0, 1).mul_(2)
    return {}


@case
def expanded_inplace_refused():
    torch.zeros(3, 1, dtype=D).expand(3, 4).add_(1)
    return {}


@case
def no_grad_view_modified_with_grad_refused():
    x = x3()
    y = x * 1
    with torch.no_grad():
        v = y.narrow(0, 0, 2)
    v.mul_(2)
    return {}


@case
def saved_tensor_modified_through_view_refused():
    x = x3()
    y = x * 1
    z = y * y
    y.narrow(0, 0, 1).mul_(2)
    z.sum().backward()
    return {}


# ---- view bounds ----------------------------------------------------------------------------
def m34():
    return torch.arange(12, dtype=D).reshape(3, 4)


@case
def narrow_negative_start():
    return {"out": m34().narrow(1, -2, 2)}


@case
def narrow_empty_at_end():
    return {"out": m34().narrow(1, 4, 0)}


@case
def narrow_past_end_refused():
    m34().narrow(1, 2, 5)
    return {}


@case
def narrow_negative_length_refused():
    m34().narrow(1, 1, -1)
    return {}


@case
def narrow_start_out_of_range_refused():
    m34().narrow(1, 5, 0)
    return {}


@case
def narrow_start_below_range_refused():
    m34().narrow(1, -5, 1)
    return {}


@case
def slice_clamps_like_python():
    return {"out": m34()[:, -7:9:2]}


@case
def select_negative_index():
    return {"out": m34().select(1, -1)}


@case
def select_out_of_range_refused():
    m34().select(0, 3)
    return {}


@case
def squeeze_non_singleton_is_noop():
    return {"out": m34().squeeze(1)}


@case
def transpose_dim_out_of_range_refused():
    m34().transpose(0, 2)
    return {}


@case
def unsqueeze_dim_out_of_range_refused():
    m34().unsqueeze(3)
    return {}


@case
def expand_wrong_size_refused():
    m34().expand(3, 5)
    return {}


@case
def permute_repeated_dim_refused():
    m34().permute(0, 0)
    return {}


@case
def view_incompatible_refused():
    m34().t().view(12)
    return {}


# ---- tensor hooks -----------------------------------------------------------------------------
@case
def hook_replaces_a_non_leaf_gradient():
    x = x3()
    y = x * 2
    y.register_hook(lambda g: g * 3)
    y.retain_grad()
    (y * y).sum().backward()
    return {"x.grad": x.grad, "y.grad": y.grad}


@case
def hooks_chain_in_registration_order():
    x = x3()
    y = x * 2
    seen = []
    y.register_hook(lambda g: g * 2)
    y.register_hook(lambda g: seen.append(g.clone()))  # returns None: leaves the gradient
    y.register_hook(lambda g: g + 1)
    (y * y).sum().backward()
    return {"x.grad": x.grad, "seen": seen[0]}


@case
def leaf_hook_replaces_what_is_accumulated():
    x = x3()
    x.register_hook(lambda g: g + 1)
    (x * x).sum().backward()
    (x * 2).sum().backward()
    return {"x.grad": x.grad}


def main():
    write_cases(OUT, CASES)


if __name__ == "__main__":
    main()
