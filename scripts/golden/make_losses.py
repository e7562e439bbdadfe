#!/usr/bin/env python3
"""Writes tests/golden/losses.txt: PyTorch's values and input gradients for the losses with their
options (class weights, ignore_index, label_smoothing, pos_weight, beta, delta, log_target) and
every reduction, in float64. tests/test_losses_golden.cpp runs each case by name on the same
inputs and must match.

Run with Debian's PyTorch:  /usr/bin/python3 scripts/golden/make_losses.py

File format, one record per line:
  case NAME
  tensor NAME DTYPE d0,d1,... v0 v1 ...   (DTYPE float64 or int64; values %.17g; 0-d: dims "-")
  end
Inputs are x (the loss input), t (target), w (weight), pw (pos_weight) and g (the gradient fed
to backward when the loss is not reduced to a scalar). Results are loss, x.grad and t.grad (the
target's gradient, present when the target is differentiable).
"""
import os
import warnings

import torch
import torch.nn.functional as F

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "golden", "losses.txt")
D = torch.float64
REDUCTIONS = ["none", "mean", "sum"]

gen = torch.Generator().manual_seed(20261124)


def randn(*shape):
    return torch.randn(*shape, dtype=D, generator=gen)


def rand(*shape, lo=0.0, hi=1.0):
    return lo + (hi - lo) * torch.rand(*shape, dtype=D, generator=gen)


CASES = []


def case(name, fn, x, t, w=None, pw=None, target_grad=False):
    x = x.clone().requires_grad_()
    if target_grad:
        t = t.clone().requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loss = fn(x, t, w, pw)
    g = None
    if loss.dim() > 0:
        g = randn(*loss.shape)
        loss.backward(g)
    else:
        loss.backward()
    rec = [("x", x.detach()), ("t", t.detach())]
    if w is not None:
        rec.append(("w", w))
    if pw is not None:
        rec.append(("pw", pw))
    if g is not None:
        rec.append(("g", g))
    rec.append(("loss", loss.detach()))
    rec.append(("x.grad", x.grad))
    if target_grad:
        rec.append(("t.grad", t.grad))
    CASES.append((name, rec))


# ---- class losses: weight, ignore_index, label_smoothing ----------------------------------------
logits = randn(6, 5)
labels = torch.tensor([1, 4, -100, 0, 3, 1])
cls_w = rand(5, lo=0.2, hi=2.0)
logits3 = randn(3, 4, 2)
labels3 = torch.tensor([[0, 2], [1, 1], [3, 0]])
cls_w4 = rand(4, lo=0.2, hi=2.0)
for r in REDUCTIONS:
    case(f"nll_loss_weight_{r}", lambda x, t, w, pw: F.nll_loss(x, t, weight=w, reduction=r),
         torch.log_softmax(logits, 1), labels, cls_w)
    case(f"nll_loss_weight_3d_ignore1_{r}",
         lambda x, t, w, pw: F.nll_loss(x, t, weight=w, ignore_index=1, reduction=r),
         torch.log_softmax(logits3, 1), labels3, cls_w4)
    case(f"nll_loss_weight_unbatched_{r}",
         lambda x, t, w, pw: F.nll_loss(x, t, weight=w, reduction=r),
         torch.log_softmax(logits[0], 0), torch.tensor(3), cls_w)
    for ls in (0.0, 0.2):
        tag = f"ls{int(ls * 10)}"
        case(f"cross_entropy_weight_{tag}_{r}",
             lambda x, t, w, pw: F.cross_entropy(x, t, weight=w, label_smoothing=ls, reduction=r),
             logits, labels, cls_w)
        case(f"cross_entropy_weight_3d_ignore1_{tag}_{r}",
             lambda x, t, w, pw: F.cross_entropy(x, t, weight=w, ignore_index=1,
                                                 label_smoothing=ls, reduction=r),
             logits3, labels3, cls_w4)
        case(f"cross_entropy_weight_probs_{tag}_{r}",
             lambda x, t, w, pw: F.cross_entropy(x, t, weight=w, label_smoothing=ls, reduction=r),
             logits, torch.softmax(randn(6, 5), 1), cls_w, target_grad=True)

# ---- binary losses: weight, pos_weight ------------------------------------------------------------
bx = randn(4, 3) * 2
bt = rand(4, 3)
bw_col = rand(3, lo=0.2, hi=2.0)
bw_row = rand(4, 1, lo=0.2, hi=2.0)
bpw = rand(3, lo=0.5, hi=3.0)
for r in REDUCTIONS:
    bcel = lambda x, t, w, pw: F.binary_cross_entropy_with_logits(x, t, weight=w, pos_weight=pw,
                                                                  reduction=r)
    case(f"bce_with_logits_weight_{r}", bcel, bx, bt, bw_col, target_grad=True)
    case(f"bce_with_logits_row_weight_pos_weight_{r}", bcel, bx, bt, bw_row, bpw, target_grad=True)
    case(f"bce_with_logits_pos_weight_{r}", bcel, bx, bt, None, bpw, target_grad=True)
    bce = lambda x, t, w, pw: F.binary_cross_entropy(x, t, weight=w, reduction=r)
    case(f"bce_{r}", bce, torch.sigmoid(bx), bt, target_grad=True)
    case(f"bce_weight_{r}", bce, torch.sigmoid(bx), bt, bw_row, target_grad=True)
    # log(0) and log1p(-1) clamp at -100: the loss is finite at probabilities 0 and 1.
    case(f"bce_clamped_{r}", bce, torch.tensor([0.0, 1.0, 1.0, 0.0, 0.5, 1e-50], dtype=D),
         torch.tensor([0.0, 1.0, 0.0, 0.25, 1.0, 1.0], dtype=D))

# ---- regression losses: beta, delta ---------------------------------------------------------------
rx = randn(5, 4)
rt = randn(5, 4)
for r in REDUCTIONS:
    for beta in (1.0, 0.5, 0.0):
        case(f"smooth_l1_loss_beta{str(beta).replace('.', 'p')}_{r}",
             lambda x, t, w, pw: F.smooth_l1_loss(x, t, beta=beta, reduction=r), rx, rt,
             target_grad=True)
    for delta in (1.0, 0.3, 2.5):
        case(f"huber_loss_delta{str(delta).replace('.', 'p')}_{r}",
             lambda x, t, w, pw: F.huber_loss(x, t, delta=delta, reduction=r), rx, rt,
             target_grad=True)

# ---- kl_div: log_target, batchmean ----------------------------------------------------------------
kx = torch.log_softmax(randn(3, 4), 1)
kt = torch.softmax(randn(3, 4), 1)
kt0 = kt.clone()
kt0[1, 2] = 0.0  # xlogy(0, 0) = 0; the target's gradient there is NaN, as PyTorch's
for r in REDUCTIONS + ["batchmean"]:
    kl = lambda x, t, w, pw: F.kl_div(x, t, reduction=r)
    case(f"kl_div_{r}", kl, kx, kt, target_grad=True)
    case(f"kl_div_zero_target_{r}", kl, kx, kt0, target_grad=True)
    case(f"kl_div_log_target_{r}",
         lambda x, t, w, pw: F.kl_div(x, t, reduction=r, log_target=True), kx, torch.log(kt),
         target_grad=True)


def fmt(name, t):
    dims = ",".join(str(d) for d in t.shape) if t.dim() > 0 else "-"
    if t.dtype == torch.int64:
        vals = " ".join(str(int(v)) for v in t.flatten().tolist())
        return f"tensor {name} int64 {dims} {vals}"
    vals = " ".join("%.17g" % v for v in t.flatten().tolist())
    return f"tensor {name} float64 {dims} {vals}"


with open(OUT, "w") as f:
    f.write(f"# written by scripts/golden/make_losses.py with torch {torch.__version__}\n")
    for name, rec in CASES:
        f.write(f"case {name}\n")
        for tname, t in rec:
            f.write(fmt(tname, t) + "\n")
        f.write("end\n")
print(f"{len(CASES)} cases -> {os.path.normpath(OUT)}")
