#!/usr/bin/env python3
"""Writes tests/golden/gpt_trajectory.txt: a tiny GPT (nanoGPT's model, scripts/golden/
gpt_reference.py) trained 40 steps in float32 with AdamW as nanoGPT configures it (betas 0.9 and
0.95, weight decay on the parameters with two or more dimensions only), which tests/test_gpt.cpp
follows within 1e-5 relative per step.

Run with Debian's PyTorch:  /usr/bin/python3 scripts/golden/make_gpt_trajectory.py

Format (tests/golden_file.h): one run
  run gpt block_size=.. vocab_size=.. n_layer=.. n_head=.. n_embd=.. lr=.. weight_decay=.. steps=N
  tensor param:<name> d0,d1,... v...   initial weights (named_parameters: the tied one once)
  tensor x:<k> B,T v...                token ids of batch k (batches used in order, cycling)
  tensor y:<k> B,T v...                next-token targets of batch k
  losses v0 ... vN-1                   the loss before each step
  end
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
from gpt_reference import GPT, Config  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "golden", "gpt_trajectory.txt")
CONFIG = dict(block_size=16, vocab_size=64, n_layer=2, n_head=2, n_embd=32, dropout=0.0, bias=True)
STEPS, BATCHES, B = 40, 4, 4
LR, WD = 3e-3, 0.1


def fmt(t):
    return " ".join("%.9g" % v for v in t.detach().to(torch.float64).reshape(-1).tolist())


def shape(t):
    return ",".join(map(str, t.shape))


def main():
    torch.set_num_threads(1)
    torch.manual_seed(1234)
    model = GPT(Config(**CONFIG))
    # A learnable stream: each token a fixed function of the previous one plus a little noise.
    T, V = CONFIG["block_size"], CONFIG["vocab_size"]
    n = BATCHES * B * (T + 1)
    noise = torch.randint(0, 3, (n,))
    stream = [5]
    for i in range(1, n):
        stream.append((stream[-1] * 7 + 3 + int(noise[i])) % V)
    data = torch.tensor(stream).view(BATCHES, B, T + 1)
    xs, ys = data[:, :, :T], data[:, :, 1:]

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                             {"params": no_decay, "weight_decay": 0.0}], lr=LR, betas=(0.9, 0.95))
    lines = ["run gpt " + " ".join("%s=%s" % (k, int(v) if isinstance(v, bool) else v)
                                   for k, v in CONFIG.items())
             + " lr=%r weight_decay=%r steps=%d" % (LR, WD, STEPS)]
    for name, p in model.named_parameters():
        lines.append("tensor param:%s %s %s" % (name, shape(p), fmt(p)))
    for k in range(BATCHES):
        lines.append("tensor x:%d %s %s" % (k, shape(xs[k]), fmt(xs[k])))
        lines.append("tensor y:%d %s %s" % (k, shape(ys[k]), fmt(ys[k])))
    losses = []
    for step in range(STEPS):
        x, y = xs[step % BATCHES], ys[step % BATCHES]
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, V), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    lines.append("losses " + " ".join("%.9g" % v for v in losses))
    lines.append("end")
    with open(OUT, "w") as f:
        f.write("# written by scripts/golden/make_gpt_trajectory.py (PyTorch %s)\n" % torch.__version__)
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
