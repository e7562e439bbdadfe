#!/usr/bin/env python3
"""The PyTorch peer of bench/linear_cross_entropy_bench.cpp: forward and backward of
cross_entropy(linear(x, w), t) from hidden states [N, C] and a weight [V, C], in float32 and under
bfloat16 autocast on the CPU; best ms of `reps`. PyTorch has no fused linear + cross-entropy, so
this is what its users run (its peak memory holds the [N, V] logits and their gradient).

    pytorch_linear_cross_entropy.py [N V C reps]
"""
import sys
import time

import torch
import torch.nn.functional as F


def main():
    a = [int(v) for v in sys.argv[1:]] + [8192, 50304, 768, 2][len(sys.argv) - 1:]
    n, v, c, reps = a[:4]
    torch.manual_seed(0)
    x = torch.randn(n, c, requires_grad=True)
    w = (torch.randn(v, c) * 0.02).requires_grad_()
    t = torch.randint(0, v, (n,))
    print(f"PyTorch {torch.__version__}, {torch.get_num_threads()} threads: hidden [{n}, {c}], "
          f"weight [{v}, {c}]; best of {reps}")
    for bf16 in (False, True):
        best = float("inf")
        for _ in range(reps):
            x.grad = None
            w.grad = None
            t0 = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = F.cross_entropy(F.linear(x, w), t)
            loss.backward()
            best = min(best, (time.perf_counter() - t0) * 1e3)
        print(f"| {'bfloat16 autocast' if bf16 else 'float32'} | PyTorch linear + cross_entropy "
              f"| {best:.1f} ms |")


if __name__ == "__main__":
    main()
