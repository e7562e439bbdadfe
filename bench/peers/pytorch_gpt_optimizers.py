#!/usr/bin/env python3
"""The PyTorch peer of bench/gpt_tiny_optimizers.py: configs/gpt_tiny.yaml (AdamW) and
configs/gpt_tiny_muon.yaml (torch.optim.Muon for the hidden matrices, AdamW for the rest) trained
in PyTorch 2.x eager on the CPU, with the configs' model, data order, schedule and clipping.

    pytorch_gpt_optimizers.py <adamw|muon> <path of input.txt> <eval_every>

prints one JSON object per line: {"eval": step, "loss": ...} at every eval and at the end, then
{"step_ms": [...]} (each step's wall time). The data are mantissa's `text` data set with
shuffle false: the bytes, the last 10% for validation (its first 64 blocks), blocks of 128 + 1
tokens at multiples of 128, batches of 16 consecutive blocks, epochs in order.
"""
import json
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_eager import GPT  # noqa: E402

BLOCK, BATCH, VAL_BLOCKS = 128, 16, 64
# name: (steps, warmup, min_lr, the AdamW group(s), Muon's options or None) -- the configs'
RECIPES = {
    "adamw": (500, 50, 2e-4, {"lr": 2e-3, "betas": (0.9, 0.95), "weight_decay": 0.1}, None),
    "muon": (375, 50, 2e-4, {"lr": 4e-3, "betas": (0.9, 0.95), "weight_decay": 0.0},
             {"lr": 0.02, "momentum": 0.95, "weight_decay": 0.01}),
}


def blocks(data, begin, end, limit=None):
    n = (end - begin - 1) // BLOCK
    if limit is not None:
        n = min(n, limit)
    return [data[begin + i * BLOCK: begin + i * BLOCK + BLOCK + 1] for i in range(n)]


def main():
    name, path, eval_every = sys.argv[1], sys.argv[2], int(sys.argv[3])
    steps, warmup, min_lr, adamw, muon = RECIPES[name]
    torch.manual_seed(1337)
    torch.set_num_threads(os.cpu_count() or 1)
    raw = torch.tensor(list(open(path, "rb").read()), dtype=torch.long)
    n_val = round(0.1 * len(raw))
    train = torch.stack(blocks(raw, 0, len(raw) - n_val))
    val = torch.stack(blocks(raw, len(raw) - n_val, len(raw), VAL_BLOCKS))
    model = GPT(256, 4, 4, 128, BLOCK)
    named = list(model.named_parameters())
    if muon is None:  # nanoGPT's groups: decay on matrices and embeddings
        opts = [torch.optim.AdamW(
            [{"params": [p for _, p in named if p.dim() >= 2]},
             {"params": [p for _, p in named if p.dim() < 2], "weight_decay": 0.0}], **adamw)]
    else:  # the rule of runner/training/build_from_config.cpp: hidden 2-D weights, not the embeddings
        hidden = [p for n, p in named if p.dim() == 2 and n.startswith("h.")]
        rest = [p for n, p in named if not (p.dim() == 2 and n.startswith("h."))]
        opts = [torch.optim.Muon(hidden, **muon), torch.optim.AdamW(rest, **adamw)]

    def lr_factor(t, base):
        if t < warmup:
            return (t + 1) / warmup
        if t >= steps:
            return min_lr / base
        progress = (t - warmup) / (steps - warmup)
        return (min_lr + (base - min_lr) * 0.5 * (1 + math.cos(math.pi * progress))) / base

    def evaluate(step):
        model.eval()
        with torch.no_grad():
            total = 0.0
            for i in range(0, len(val), BATCH):
                b = val[i:i + BATCH]
                logits = model(b[:, :-1])
                total += torch.nn.functional.cross_entropy(
                    logits.reshape(-1, 256), b[:, 1:].reshape(-1), reduction="sum").item()
        model.train()
        print(json.dumps({"eval": step, "loss": total / (len(val) * BLOCK)}), flush=True)

    step_ms = []
    per_epoch = len(train) // BATCH
    for t in range(steps):
        for opt in opts:
            for g in opt.param_groups:
                g.setdefault("initial_lr", g["lr"])
                g["lr"] = g["initial_lr"] * lr_factor(t, g["initial_lr"])
        b = train[(t % per_epoch) * BATCH:(t % per_epoch + 1) * BATCH]
        start = time.perf_counter()
        for opt in opts:
            opt.zero_grad(set_to_none=True)
        logits = model(b[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 256), b[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for opt in opts:
            opt.step()
        step_ms.append((time.perf_counter() - start) * 1e3)
        if eval_every > 0 and ((t + 1) % eval_every == 0 or t + 1 == steps):
            evaluate(t + 1)
    print(json.dumps({"step_ms": step_ms}), flush=True)


if __name__ == "__main__":
    main()
