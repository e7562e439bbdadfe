#!/usr/bin/env python3
"""The PyTorch peer of bench/activation_checkpointing_bench.cpp: the same GPT step (AdamW,
cross_entropy, byte vocab; pytorch_eager.py's nanoGPT blocks, which have no dropout) with no block
and with every block under torch.utils.checkpoint.checkpoint(use_reentrant=False); prints the
median ms/step of each and their ratio, interleaved as the C++ program does.

    pytorch_checkpoint.py [n_layer n_embd block_size batch steps]
"""
import os
import statistics
import sys
import time

import torch
import torch.utils.checkpoint

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_eager import GPT  # noqa: E402


def run(n_layer, n_embd, block, batch, steps, checkpointed):
    torch.manual_seed(0)
    model = GPT(256, n_layer, 8, n_embd, block)
    model.train()
    if checkpointed:
        for b in model.h:
            b.forward = (lambda f: lambda x: torch.utils.checkpoint.checkpoint(
                f, x, use_reentrant=False))(b.forward)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    idx = torch.randint(0, 256, (batch, block))
    targets = torch.randint(0, 256, (batch * block,))
    ms = []
    for s in range(steps + 1):
        opt.zero_grad(set_to_none=False)
        t0 = time.perf_counter()
        logits = model(idx)
        torch.nn.functional.cross_entropy(logits.view(-1, 256), targets).backward()
        opt.step()
        if s > 0:
            ms.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ms)


def main():
    a = [int(x) for x in sys.argv[1:]] + [8, 256, 256, 4, 3][len(sys.argv) - 1:]
    n_layer, n_embd, block, batch, steps = a[:5]
    print(f"PyTorch {torch.__version__}, {torch.get_num_threads()} threads: GPT {n_layer}L "
          f"{n_embd} wide, block {block}, batch {batch}; median of {steps} steps")
    best = [float("inf"), float("inf")]
    for _ in range(2):
        for ck in (0, 1):
            best[ck] = min(best[ck], run(n_layer, n_embd, block, batch, steps, ck == 1))
    print(f"| none | {best[0]:.1f} ms |\n| all {n_layer} | {best[1]:.1f} ms |")
    print(f"time: {best[1] / best[0]:.2f}x")


if __name__ == "__main__":
    main()
