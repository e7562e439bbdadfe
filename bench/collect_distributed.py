#!/usr/bin/env python3
"""Runs mantissa_dist_bench and bench/peers/torch_distributed.py interleaved and prints one table
of ratios (bench/run_distributed.sh calls this after building; see there). Each configuration
runs once per program per round, the two programs taking turns (which goes first alternates
between rounds), so machine load hits them alike. A round's number is the best of --reps
repetitions; the table shows the median over --rounds rounds."""
import argparse
import datetime
import statistics
import subprocess
import sys

from collect import machine_line, parse_kv

# (label, mode, nproc, ddp, unfused). The unfused rows build mantissa's MLP from separate
# Linear/ReLU modules, as the PyTorch peer always does; PyTorch runs its usual model there.
DDP_CONFIGS = [("1 rank, no DDP", "ddp", 1, False, False), ("1 rank, DDP", "ddp", 1, True, False),
               ("2 ranks, DDP", "ddp", 2, True, False),
               ("1 rank, no DDP, unfused", "ddp", 1, False, True),
               ("2 ranks, DDP, unfused", "ddp", 2, True, True)]


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        err = (p.stderr.strip().splitlines() or ["failed"])[-1]
        print(f"error: {' '.join(cmd)}: {err}", file=sys.stderr)
        return []
    return [parse_kv(l) for l in p.stdout.splitlines() if "=" in l]


def fmt_size(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"


def median(values):
    return statistics.median(values) if values else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dist-bench", required=True)
    ap.add_argument("--python", required=True)
    ap.add_argument("--peer", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--min-time", type=float, default=0.2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--sizes", default="")
    ap.add_argument("--commit", default="?")
    ap.add_argument("--markdown", default="")
    args = ap.parse_args()

    common = ["--threads", str(args.threads), "--min-time", str(args.min_time), "--reps",
              str(args.reps)]
    sizes = ["--sizes", args.sizes] if args.sizes else []
    configs = [("allreduce", "allreduce", 2, True, False)] + DDP_CONFIGS

    def commands(mode, nproc, ddp, unfused):
        extra = [mode, "--nproc", str(nproc)] + common + (sizes if mode == "allreduce" else [])
        extra += [] if ddp else ["--no-ddp"]
        return {"mantissa": [args.dist_bench] + extra + (["--unfused"] if unfused else []),
                "PyTorch": [args.python, args.peer] + extra}

    machine = machine_line()
    # results[label][who] -> list of rounds, each a list of parsed lines
    results = {c[0]: {"mantissa": [], "PyTorch": []} for c in configs}
    for r in range(args.rounds):
        for label, mode, nproc, ddp, unfused in configs:
            print(f"round {r + 1}/{args.rounds}: {label}", file=sys.stderr, flush=True)
            cmds = commands(mode, nproc, ddp, unfused)
            order = ["mantissa", "PyTorch"] if r % 2 == 0 else ["PyTorch", "mantissa"]
            if unfused:  # the peer's model is the same as in the fused row
                order = ["mantissa"]
            for who in order:
                results[label][who].append(run(cmds[who]))

    lines = [f"mantissa data-parallel benchmarks, "
             f"{datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}, "
             f"commit {args.commit}",
             f"machine: {machine}",
             f"median of {args.rounds} interleaved rounds, each the best of {args.reps} "
             f"repetitions of >= {args.min_time} s; {args.threads} thread(s) per rank; Gloo over "
             "loopback TCP on both sides; mantissa/PyTorch > 1 means mantissa is faster", ""]

    # Allreduce: per size, median over rounds of each side's time.
    def per_size(who):
        out = {}
        for rnd in results["allreduce"][who]:
            for kv in rnd:
                out.setdefault(int(kv["bytes"]), []).append(float(kv["us"]))
        return {b: median(v) for b, v in out.items()}

    m_ar, p_ar = per_size("mantissa"), per_size("PyTorch")

    def ratio_range(pairs):
        """min-max over rounds of the per-round ratio (the rounds ran side by side)."""
        r = [p / m for m, p in pairs if m and p]
        return f" ({min(r):.2f}-{max(r):.2f})" if len(r) > 1 else ""

    def round_us(label, who, key, pick=lambda kv: True):
        out = []
        for rnd in results[label][who]:
            vals = [float(kv[key]) for kv in rnd if pick(kv)]
            out.append(vals[0] if vals else None)
        return out
    lines += ["Allreduce (sum, float32, 2 ranks): busbw = size x 2(n-1)/n / time", "",
              "| size | mantissa µs | mantissa busbw GB/s | PyTorch µs | PyTorch busbw GB/s | "
              "mantissa/PyTorch (range over rounds) |", "|---|---|---|---|---|---|"]
    bus = lambda b, us: b / (us * 1e-6) / 1e9  # 2(n-1)/n = 1 at n = 2
    for b in sorted(set(m_ar) | set(p_ar)):
        m, p = m_ar.get(b), p_ar.get(b)
        cells = [fmt_size(b)]
        for us in (m, p):
            cells += [f"{us:,.1f}", f"{bus(b, us):.2f}"] if us else ["n/a", "n/a"]
        pick = lambda kv, b=b: int(kv["bytes"]) == b
        spread = ratio_range(zip(round_us("allreduce", "mantissa", "us", pick),
                                 round_us("allreduce", "PyTorch", "us", pick)))
        cells.append(f"{p / m:.2f}x{spread}" if m and p else "-")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")

    # DDP: median step time per configuration.
    def step_us(label, who):
        return median([float(rnd[0]["us_per_step"]) for rnd in results[label][who] if rnd])

    batch = 256
    lines += ["MLP 512-512-512 SGD step, float32, batch 256 per rank (samples/s: all ranks)", "",
              "| configuration | mantissa µs/step | mantissa samples/s | PyTorch µs/step | "
              "PyTorch samples/s | mantissa/PyTorch (range over rounds) |",
              "|---|---|---|---|---|---|"]
    sps = {}
    for label, _, nproc, _, unfused in DDP_CONFIGS:
        cells = [label]
        peer_label = label.replace(", unfused", "")
        for who in ("mantissa", "PyTorch"):
            us = step_us(label if who == "mantissa" else peer_label, who)
            sps[(label, who)] = nproc * batch / (us * 1e-6) if us else None
            cells += [f"{us:,.0f}", f"{sps[(label, who)]:,.0f}"] if us else ["n/a", "n/a"]
            if unfused and who == "PyTorch":
                cells[-2:] = [f"({cells[-2]})", f"({cells[-1]})"]  # the row above's, repeated
        m, p = sps[(label, "mantissa")], sps[(label, "PyTorch")]
        spread = "" if unfused else ratio_range(zip(round_us(label, "mantissa", "us_per_step"),
                                                    round_us(label, "PyTorch", "us_per_step")))
        cells.append(f"{m / p:.2f}x{spread}" if m and p else "-")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")

    def rel(a, b, who):
        x, y = sps[(a, who)], sps[(b, who)]
        return f"{x / y:.3f}" if x and y else "n/a"

    lines.append("Derived (samples/s ratios; mantissa | PyTorch):")
    lines.append(f"- DDP at world size 1 vs no DDP: {rel('1 rank, DDP', '1 rank, no DDP', 'mantissa')}"
                 f" | {rel('1 rank, DDP', '1 rank, no DDP', 'PyTorch')}")
    lines.append(f"- 2 ranks DDP vs 1 rank no DDP (scaling, 2.0 is perfect): "
                 f"{rel('2 ranks, DDP', '1 rank, no DDP', 'mantissa')}"
                 f" | {rel('2 ranks, DDP', '1 rank, no DDP', 'PyTorch')}")
    lines.append(f"- the same with mantissa's MLP unfused: "
                 f"{rel('2 ranks, DDP, unfused', '1 rank, no DDP, unfused', 'mantissa')}")
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
