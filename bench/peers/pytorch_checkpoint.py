#!/usr/bin/env python3
"""The PyTorch peer of bench/activation_checkpointing_bench.cpp: the same GPT step (AdamW,
cross_entropy, byte vocab; pytorch_eager.py's nanoGPT blocks, which have no dropout) with no block
and with every block under torch.utils.checkpoint.checkpoint(use_reentrant=False); prints the
median ms/step of each and the median ratio of neighbouring steps, the two models taking turns
step by step as in the C++ program.

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


def make_arm(n_layer, n_embd, block, checkpointed):
    torch.manual_seed(0)
    model = GPT(256, n_layer, 8, n_embd, block)
    model.train()
    if checkpointed:
        for b in model.h:
            b.forward = (lambda f: lambda x: torch.utils.checkpoint.checkpoint(
                f, x, use_reentrant=False))(b.forward)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4)


def step(arm, idx, targets):
    model, opt = arm
    opt.zero_grad(set_to_none=False)
    t0 = time.perf_counter()
    logits = model(idx)
    torch.nn.functional.cross_entropy(logits.view(-1, 256), targets).backward()
    opt.step()
    return (time.perf_counter() - t0) * 1e3


def main():
    a = [int(x) for x in sys.argv[1:]] + [8, 256, 256, 4, 20][len(sys.argv) - 1:]
    n_layer, n_embd, block, batch, steps = a[:5]
    print(f"PyTorch {torch.__version__}, {torch.get_num_threads()} threads: GPT {n_layer}L "
          f"{n_embd} wide, block {block}, batch {batch}; {steps} step pairs")
    # As the C++ program: both models take turns step by step, the ratio is the median of the
    # ratios of neighbouring steps.
    arms = [make_arm(n_layer, n_embd, block, ck) for ck in (False, True)]
    idx = torch.randint(0, 256, (batch, block))
    targets = torch.randint(0, 256, (batch * block,))
    for arm in arms:
        step(arm, idx, targets)
    ms = [[], []]
    ratios = []
    for s in range(steps):
        first = s % 2
        for k in (first, 1 - first):
            ms[k].append(step(arms[k], idx, targets))
        ratios.append(ms[1][-1] / ms[0][-1])
    ratios.sort()
    print(f"| none | {statistics.median(ms[0]):.1f} ms |\n"
          f"| all {n_layer} | {statistics.median(ms[1]):.1f} ms |")
    print(f"time: {ratios[len(ratios) // 2]:.2f}x (median of {steps} step pairs; middle half "
          f"{ratios[len(ratios) // 4]:.2f}-{ratios[3 * len(ratios) // 4]:.2f})")


if __name__ == "__main__":
    main()
