#!/usr/bin/env python3
"""Writes tests/golden/attention.txt: scaled_dot_product_attention's output and its gradients
for q, k and v (and a float mask), in float32. PyTorch 1.13 has no
F.scaled_dot_product_attention, so the reference is the math PyTorch 2.x documents for it:
an additive bias (-inf where a bool mask is false or the causal mask hides a key, else the float
mask), softmax(q k^T * scale + bias) v. A query that may attend to no key gives NaN, and so do
the gradients that pass through its row. tests/test_attention.cpp runs each case and must match.

Run with Debian's PyTorch:  /usr/bin/python3 scripts/golden/make_attention.py

Per case: the inputs (q, k, v, mask when there is one, the output gradient dout), then out and
the gradients, and one line "params CAUSAL SCALE MASK" (SCALE nan: the default 1/sqrt(E); MASK 0
none, 1 bool (0/1 values), 2 float).
"""
import math
import os

import torch



def tensor_record(name, t):
    """A tensor record of tests/golden_file.h's format, float32 values as %.9g (exact)."""
    t = t.detach()
    dims = ",".join(str(d) for d in t.shape)
    return "tensor %s %s %s" % (name, dims, " ".join("%.9g" % x for x in t.reshape(-1).tolist()))

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "golden", "attention.txt")
F32 = torch.float32


def reference(q, k, v, mask, causal, scale):
    L, S = q.shape[-2], k.shape[-2]
    bias = torch.zeros(L, S, dtype=q.dtype)
    if causal:
        bias = bias.masked_fill(torch.ones(L, S, dtype=torch.bool).tril().logical_not(), -math.inf)
    if mask is not None:
        if mask.dtype == torch.bool:
            bias = torch.zeros(mask.shape, dtype=q.dtype).masked_fill(mask.logical_not(), -math.inf)
        else:
            bias = mask + bias
    s = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(q.shape[-1]) if scale is None else scale)
    return torch.softmax(s + bias, dim=-1) @ v


def make(gen, qs, ks, vs, causal=False, scale=None, mask=None):
    q, k, v = (torch.randn(s, generator=gen, dtype=F32).requires_grad_() for s in (qs, ks, vs))
    out = reference(q, k, v, mask, causal, scale)
    dout = torch.randn(out.shape, generator=gen, dtype=F32)
    out.backward(dout)
    rec = {"q": q, "k": k, "v": v, "dout": dout, "out": out, "dq": q.grad, "dk": k.grad,
           "dv": v.grad}
    kind = 0
    if mask is not None:
        rec["mask"] = mask.to(F32) if mask.dtype == torch.bool else mask
        kind = 1 if mask.dtype == torch.bool else 2
        if mask.requires_grad:
            rec["dmask"] = mask.grad
    params = "params %d %s %d" % (int(causal), "nan" if scale is None else "%.17g" % scale, kind)
    return rec, params


def cases():
    g = torch.Generator().manual_seed(19)
    c = {}
    c["plain_heads"] = make(g, (2, 3, 7, 8), (2, 3, 7, 8), (2, 3, 7, 8))
    c["causal_33_d64"] = make(g, (1, 1, 33, 64), (1, 1, 33, 64), (1, 1, 33, 64), causal=True)
    c["causal_L7_S33"] = make(g, (2, 7, 8), (2, 33, 8), (2, 33, 8), causal=True)
    c["causal_L33_S7"] = make(g, (2, 33, 8), (2, 7, 8), (2, 7, 8), causal=True)
    c["causal_blocks_70_130"] = make(g, (2, 70, 8), (2, 130, 8), (2, 130, 6), causal=True)
    bool_mask = torch.rand(5, 9, generator=g) > 0.4
    bool_mask[:, 0] = True
    c["bool_mask_scale"] = make(g, (2, 2, 5, 8), (2, 2, 9, 8), (2, 2, 9, 8), scale=0.3,
                                mask=bool_mask)
    float_mask = torch.randn(2, 1, 33, 7, generator=g, dtype=F32).requires_grad_()
    c["float_mask_heads_ev12"] = make(g, (2, 2, 33, 16), (2, 2, 7, 16), (2, 2, 7, 12),
                                      mask=float_mask)
    # the first key block (64 keys) hidden from query 0: the running max starts on a later block
    late = torch.zeros(3, 130, dtype=F32)
    late[0, :70] = -math.inf
    c["float_mask_late_block"] = make(g, (3, 8), (130, 8), (130, 8), mask=late)
    full = torch.ones(2, 4, 6, dtype=torch.bool)
    full[1, 2, :] = False
    c["fully_masked_row"] = make(g, (2, 4, 8), (2, 6, 8), (2, 6, 8), mask=full)
    c["broadcast_batch"] = make(g, (2, 3, 5, 8), (3, 6, 8), (3, 6, 8))
    return c


def main():
    lines = []
    for name, (rec, params) in cases().items():
        lines.append("case " + name)
        for key, t in rec.items():
            lines.append(tensor_record(key, t))
        lines.append(params)
        lines.append("end")
    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote %d cases to %s" % (len(cases()), os.path.normpath(OUT)))


if __name__ == "__main__":
    main()
