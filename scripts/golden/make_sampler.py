#!/usr/bin/env python3
"""Writes tests/golden/sampler.txt: the index lists torch.utils.data.DistributedSampler gives each
rank, for dataset sizes that do and do not divide by the number of ranks, with and without
drop_last. tests/test_runner_data.cpp shards the same epoch order with runner::DistributedSampler
and must give the same lists.

Run with Debian's PyTorch:  /usr/bin/python3 scripts/golden/make_sampler.py

mantissa's shuffled order is not torch.randperm's, so the shuffled cases record the order torch
drew (the sampler's own permutation of the epoch, recovered with num_replicas=1) and the test
shards that order: what is compared is the sharding, padding and drop_last rule.

File format, one record per line:
  case NAME n num_replicas drop_last(0/1)
  order i0 i1 ...           the epoch's order over the whole dataset
  rank<r> i0 i1 ...         DistributedSampler(rank=r)'s indices (an empty rank is written "rank<r>")
  end
"""
import os

import torch
from torch.utils.data import DistributedSampler

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "golden", "sampler.txt")


def indices(n, world, rank, drop_last, shuffle, seed=0, epoch=0):
    s = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=shuffle, seed=seed,
                           drop_last=drop_last)
    s.set_epoch(epoch)
    return list(s)


def main():
    lines = []
    # (n, world): divisible, a short tail, padding that needs the order more than once (n < world).
    sizes = [(12, 3), (10, 3), (10, 4), (7, 2), (5, 8), (1, 2), (9, 1)]
    for n, world in sizes:
        for drop_last in (False, True):
            for shuffle, seed, epoch in ((False, 0, 0), (True, 3, 0), (True, 3, 1)):
                name = "n%d_w%d_%s_%s" % (n, world, "drop" if drop_last else "pad",
                                          "seq" if not shuffle else "seed%d_epoch%d" % (seed, epoch))
                order = indices(n, 1, 0, False, shuffle, seed, epoch)
                lines.append("case %s %d %d %d" % (name, n, world, int(drop_last)))
                lines.append(("order " + " ".join(map(str, order))).rstrip())
                for r in range(world):
                    got = indices(n, world, r, drop_last, shuffle, seed, epoch)
                    lines.append(("rank%d " % r + " ".join(map(str, got))).rstrip())
                lines.append("end")
    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote %s" % os.path.normpath(OUT))


if __name__ == "__main__":
    main()
