#!/usr/bin/env python3
"""Writes tests/golden/float8_delayed.txt: float8 linear layers with Transformer Engine's delayed
scaling (DelayedScaling, HYBRID format: e4m3 input and weight, e5m2 output gradient), written
here in PyTorch on the CPU because Transformer Engine itself needs an FP8 GPU. The semantics are
TE's (transformer_engine/common/recipe/delayed_scaling.cu and its PyTorch scale rule):

  - each layer keeps an amax history [len, 3] (input, weight, grad_output; zeros at first) and
    scales [3] (ones at first);
  - each operand is cast with its current scale (saturated, torch's float8 casts) and its
    absolute maximum goes into row 0 of the history;
  - the products are torch._scaled_mm with the inverted scales, in the input's dtype;
  - after each optimizer step: amax = the history's max over steps ("max") or row 0
    ("most_recent"); scale = (fp8_max * 2^-margin) / amax where amax is finite and > 0, else the
    old scale, and float32's max where that overflows; the history rolled by -1 and row 0 zeroed.

Cases (inputs from make_float8_linear.py, tests/golden/float8_linear.txt's "inputs"):
  - mlp_<name>: the 32-64-64-16 MLP of make_float8_linear.py trained 20 steps (SGD lr 0.05,
    momentum 0.9, MSE) with delayed layers: the loss before each step, and each layer's scales
    and the newest 24 rows of its history (the last rows: rolled by -1 each step) after the
    last update. Names: default_float32, default_bfloat16 (TE's defaults:
    history 1024, max, margin 0; bfloat16: the input cast to bfloat16 as autocast does) and
    short_float32 (history 4, most_recent, margin 1).

Run with PyTorch 2.x and torchao 0.18 (pip install torch torchao):
  python scripts/golden/make_float8_delayed.py
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
import golden_cases  # noqa: E402
from make_float8_linear import IN  # noqa: E402
from torchao.float8.float8_utils import to_fp8_saturated  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "golden", "float8_delayed.txt")
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
MAX = {E4M3: 448.0, E5M2: 57344.0}


class State:
    def __init__(self, length):
        self.history = torch.zeros(length, 3)
        self.scale = torch.ones(3)

    def record(self, role, t):
        a = t.detach().abs().max().float()
        if not torch.isnan(a):
            self.history[0, role] = torch.maximum(self.history[0, role], a)

    def update(self, algo, margin):
        h = self.history
        amax = h.max(0).values if algo == "max" else h[0].clone()
        shrink = torch.tensor(2.0, dtype=torch.float32) ** -margin
        scaled_max = torch.tensor([MAX[E4M3], MAX[E4M3], MAX[E5M2]]) * shrink
        sf = scaled_max / amax
        sf = torch.where((amax > 0) & torch.isfinite(amax), sf, self.scale)
        sf = torch.where(torch.isinf(sf), torch.finfo(torch.float32).max, sf)
        self.scale.copy_(sf)
        h.copy_(torch.roll(h, -1, 0))
        h[0] = 0


def cast(t, scale, dtype):
    return to_fp8_saturated(t.float() * scale, dtype)


def col_major(t):
    return t.t().contiguous().t()


class DelayedLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, state):
        state.record(0, x)
        state.record(1, w)
        sx, sw = state.scale[0].clone(), state.scale[1].clone()
        x8, w8 = cast(x, sx, E4M3), cast(w, sw, E4M3)
        out = torch._scaled_mm(x8, col_major(w8.t()), scale_a=sx.reciprocal(),
                               scale_b=sw.reciprocal(), out_dtype=x.dtype, use_fast_accum=True)
        ctx.save_for_backward(x8, w8, sx, sw)
        ctx.state = state
        ctx.w_dtype = w.dtype
        return out

    @staticmethod
    def backward(ctx, g):
        x8, w8, sx, sw = ctx.saved_tensors
        state = ctx.state
        state.record(2, g)
        sg = state.scale[2].clone()
        g8 = cast(g, sg, E5M2)
        gx = torch._scaled_mm(g8, col_major(w8), scale_a=sg.reciprocal(),
                              scale_b=sw.reciprocal(), out_dtype=g.dtype)
        gw = torch._scaled_mm(g8.t().contiguous(), col_major(x8), scale_a=sg.reciprocal(),
                              scale_b=sx.reciprocal(), out_dtype=g.dtype)
        return gx, gw.to(ctx.w_dtype), None


def layer(x, w, b, state, bf16):
    if bf16:
        x = x.to(torch.bfloat16)
    y = DelayedLinear.apply(x, w, state)
    return y + b.to(y.dtype)


def mlp(length, algo, margin, bf16):
    params = []
    for i in (1, 2, 3):
        params += [IN["mlp_w%d" % i].clone().requires_grad_(),
                   IN["mlp_b%d" % i].clone().requires_grad_()]
    states = [State(length) for _ in range(3)]
    opt = torch.optim.SGD(params, lr=0.05, momentum=0.9)
    losses = []
    for _ in range(20):
        opt.zero_grad()
        h = F.relu(layer(IN["mlp_x"], params[0], params[1], states[0], bf16))
        h = F.relu(layer(h, params[2], params[3], states[1], bf16))
        out = layer(h, params[4], params[5], states[2], bf16)
        loss = F.mse_loss(out.float(), IN["mlp_y"])
        loss.backward()
        opt.step()
        for s in states:
            s.update(algo, margin)
        losses.append(loss.detach())
    out = {"losses": torch.stack(losses)}
    for i, s in enumerate(states):
        out["scale%d" % i] = s.scale.clone()
        out["history%d" % i] = s.history[-min(length, 24):].clone()  # the newest rows
    return out


def main():
    cases = {
        "mlp_default_float32": lambda: mlp(1024, "max", 0, False),
        "mlp_default_bfloat16": lambda: mlp(1024, "max", 0, True),
        "mlp_short_float32": lambda: mlp(4, "most_recent", 1, False),
    }
    golden_cases.write_cases(OUT, cases)


if __name__ == "__main__":
    main()
