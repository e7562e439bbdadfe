#!/usr/bin/env python3
"""Writes tests/golden/optim_torch2.txt: float64 parameter trajectories where PyTorch 2 differs
from the 1.13 of make_optim.py: NAdam (1.13 multiplied mu_product_next by mu twice) and the
decoupled_weight_decay option it added to Adam, NAdam and RAdam; in the format and on the
parameter and gradients of make_optim.py. tests/test_adaptive_optim.cpp builds the
same cases by name and must match.

Run with PyTorch 2 (the benchmark environment's):
  build-bench-venv/bin/python scripts/golden/make_optim_torch2.py
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from make_optim import optimizer_case  # noqa: E402  the same parameter, gradients and format

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "golden", "optim_torch2.txt")

# Single-tensor form (foreach=False), as make_optim.py's cases on the CPU.
OPTIMIZERS = {
    "nadam_plain": lambda p: torch.optim.NAdam([p], lr=0.01, foreach=False),
    "nadam_options": lambda p: torch.optim.NAdam(
        [p], lr=0.05, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1, momentum_decay=0.01,
        foreach=False),
    "adam_decoupled": lambda p: torch.optim.Adam(
        [p], lr=0.05, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.1, decoupled_weight_decay=True,
        foreach=False),
    "nadam_decoupled": lambda p: torch.optim.NAdam(
        [p], lr=0.05, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1, momentum_decay=0.01,
        decoupled_weight_decay=True, foreach=False),
    "radam_decoupled": lambda p: torch.optim.RAdam(
        [p], lr=0.05, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.1, decoupled_weight_decay=True,
        foreach=False),
}


def main():
    assert int(torch.__version__.split(".")[0]) >= 2, "needs PyTorch 2: " + torch.__version__
    lines = ["# PyTorch " + torch.__version__]
    for name, make in OPTIMIZERS.items():
        lines += optimizer_case(name, make)
    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
