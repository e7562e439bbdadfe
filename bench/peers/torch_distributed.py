#!/usr/bin/env python3
"""The PyTorch peer of bench/distributed_bench.cpp (bench/run_distributed.sh runs both): the same
allreduce sizes with torch.distributed on Gloo, and the same MLP 512 SGD step (bench/workloads.h)
with and without torch.nn.parallel.DistributedDataParallel, timed the same way.

    torch_distributed.py allreduce [--nproc N] [--sizes B,B,...] [options]
    torch_distributed.py ddp [--nproc N] [--no-ddp] [options]
    options: --threads T (per rank, default 1), --min-time S (default 0.2), --reps R (default 3)

Ranks are started with torch.multiprocessing (spawn) and meet in a file store in a fresh
temporary directory. Each rank runs with T intra-op threads (OMP_NUM_THREADS and
torch.set_num_threads). Rank 0 prints the lines mantissa_dist_bench prints.
"""
import argparse
import math
import os
import shutil
import sys
import tempfile
import time

# name: (layers, batch, lr, momentum) -- keep in step with bench/workloads.h
MLP512 = ([512, 512, 512], 256, 1e-3, 0.9)
DEFAULT_SIZES = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]


def max_over_ranks(dist, torch, value):
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def time_per_call(dist, torch, args, fn):
    """Seconds per call: the slowest rank's time, best of args.reps repetitions of at least
    args.min_time (as time_per_call in bench/distributed_bench.cpp)."""

    def timed(calls):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        return max_over_ranks(dist, torch, time.perf_counter() - t0)

    fn()
    fn()
    once = timed(1)
    calls = max(1, math.ceil(args.min_time / max(once, 1e-9)))
    return min(timed(calls) / calls for _ in range(args.reps))


def bench_allreduce(dist, torch, args):
    n = dist.get_world_size()
    for nbytes in args.sizes:
        t = torch.zeros(nbytes // 4)
        s = time_per_call(dist, torch, args, lambda: dist.all_reduce(t))
        algbw = nbytes / s / 1e9
        busbw = algbw * 2 * (n - 1) / n
        if dist.get_rank() == 0:
            print(f"allreduce world={n} bytes={nbytes} us={s * 1e6:.4f} algbw_gbs={algbw:.4f} "
                  f"busbw_gbs={busbw:.4f}", flush=True)


def bench_ddp(dist, torch, args):
    layers, batch, lr, momentum = MLP512
    torch.manual_seed(0)
    mods = []
    for i in range(len(layers) - 1):
        if i > 0:
            mods.append(torch.nn.ReLU())
        mods.append(torch.nn.Linear(layers[i], layers[i + 1]))
    model = torch.nn.Sequential(*mods)
    torch.manual_seed(1 + dist.get_rank())
    x = torch.randn(batch, layers[0])
    target = torch.randn(batch, layers[-1])
    net = torch.nn.parallel.DistributedDataParallel(model) if args.ddp else model
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)

    def step():
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(net(x), target).backward()
        opt.step()

    s = time_per_call(dist, torch, args, step)
    n = dist.get_world_size()
    if dist.get_rank() == 0:
        print(f"ddp world={n} ddp={int(args.ddp)} batch={batch} us_per_step={s * 1e6:.4f} "
              f"samples_per_s={n * batch / s:.2f}", flush=True)


def worker(rank, args, store):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank,
                            world_size=args.nproc)
    if args.mode == "allreduce":
        bench_allreduce(dist, torch, args)
    else:
        bench_ddp(dist, torch, args)
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=["allreduce", "ddp"])
    ap.add_argument("--nproc", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--min-time", type=float, default=0.2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)))
    ap.add_argument("--no-ddp", dest="ddp", action="store_false")
    args = ap.parse_args()
    args.sizes = [int(s) for s in args.sizes.split(",") if s]
    # Read when the spawned interpreters load torch's OpenMP runtime.
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # every rank is on this host
    import torch.multiprocessing as mp

    tmp = tempfile.mkdtemp(prefix="torch-dist-bench-")
    try:
        mp.spawn(worker, args=(args, os.path.join(tmp, "store")), nprocs=args.nproc)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
