#!/usr/bin/env python3
"""Muon against AdamW on configs/gpt_tiny.yaml's model and data: the whole runs of
configs/gpt_tiny.yaml (AdamW, 500 steps) and configs/gpt_tiny_muon.yaml (Muon + AdamW, 375
steps) with mantissa, and the same recipes with torch.optim.AdamW / torch.optim.Muon (PyTorch 2.x
eager, bench/peers/pytorch_gpt_optimizers.py), interleaved: mantissa AdamW, PyTorch AdamW,
mantissa Muon, PyTorch Muon, `--rounds` times.

    python3 bench/gpt_tiny_optimizers.py --mantissa build/bin/mantissa \\
        --torch-python build-bench/torch-venv/bin/python --out build/bench-out/optimizers

Writes <out>/curves.csv (validation loss every --eval-every steps), <out>/curves.svg (the curves
side by side) and prints a Markdown table: the step at which each run first reaches the AdamW
config's final validation loss, its final loss, and the median step time. bench/run.sh makes the
PyTorch virtual environment (build-bench/torch-venv).
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = {"adamw": "configs/gpt_tiny.yaml", "muon": "configs/gpt_tiny_muon.yaml"}


def run_mantissa(exe, name, out, eval_every):
    run_dir = os.path.join(out, f"mantissa-{name}")
    subprocess.run([exe, "train", os.path.join(ROOT, CONFIGS[name]), "--run-dir", run_dir,
                    "--set", f"eval_every={eval_every}", "--set", "checkpoint_every=0",
                    "--set", "data.path=" + os.path.join(ROOT, "data/shakespeare/input.txt"),
                    "--set", "log_every=25", "-q"], check=True, timeout=1800)
    curve, step_ms = [], []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            if "eval" in m:
                curve.append((m["eval"]["step"], m["eval"]["loss"]))
            elif "step_time_ms" in m and m["step"] > 25:  # the first window pays warm-up
                step_ms.append(m["step_time_ms"])
    return curve, step_ms


def run_pytorch(python, name, eval_every):
    peer = os.path.join(ROOT, "bench/peers/pytorch_gpt_optimizers.py")
    text = subprocess.run([python, peer, name, os.path.join(ROOT, "data/shakespeare/input.txt"),
                           str(eval_every)], check=True, capture_output=True, text=True,
                          timeout=1800).stdout
    curve, step_ms = [], []
    for line in text.splitlines():
        m = json.loads(line)
        if "eval" in m:
            curve.append((m["eval"], m["loss"]))
        else:
            step_ms = m["step_ms"][25:]
    return curve, step_ms


def first_reaching(curve, target):
    return next((step for step, loss in curve if loss <= target), None)


def svg(curves, path):
    """The validation curves as an SVG line chart (no plotting library needed)."""
    w, h, pad = 640, 400, 50
    max_step = max(s for c in curves.values() for s, _ in c)
    losses = [v for c in curves.values() for _, v in c]
    lo, hi = min(losses), max(losses)
    x = lambda s: pad + (w - 2 * pad) * s / max_step  # noqa: E731
    y = lambda v: h - pad - (h - 2 * pad) * (v - lo) / (hi - lo)  # noqa: E731
    colours = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
             'font-family="sans-serif" font-size="12">',
             f'<rect width="{w}" height="{h}" fill="white"/>',
             f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="black"/>',
             f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="black"/>',
             f'<text x="{w / 2}" y="{h - 12}" text-anchor="middle">step</text>',
             f'<text x="14" y="{h / 2}" transform="rotate(-90 14 {h / 2})" '
             'text-anchor="middle">validation loss (nats)</text>']
    for s in range(0, max_step + 1, 100):
        parts.append(f'<text x="{x(s):.1f}" y="{h - pad + 16}" text-anchor="middle">{s}</text>')
    for i in range(5):
        v = lo + (hi - lo) * i / 4
        parts.append(f'<text x="{pad - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.2f}</text>')
    for i, (label, curve) in enumerate(curves.items()):
        c = colours[i % len(colours)]
        dash = ' stroke-dasharray="6 4"' if label.startswith("PyTorch") else ""
        points = " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in curve)
        parts.append(f'<polyline points="{points}" fill="none" stroke="{c}" stroke-width="2"'
                     f'{dash}/>')
        parts.append(f'<text x="{w - pad - 150}" y="{pad + 16 * i}" fill="{c}">{label}</text>')
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mantissa", default=os.path.join(ROOT, "build/bin/mantissa"))
    ap.add_argument("--torch-python", default=os.path.join(ROOT, "build-bench/torch-venv/bin/python"))
    ap.add_argument("--out", default=os.path.join(ROOT, "build/bench-out/optimizers"))
    ap.add_argument("--eval-every", type=int, default=25)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--no-pytorch", action="store_true", help="mantissa's runs only")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    curves, times = {}, {}
    for r in range(args.rounds):
        for name in ["adamw", "muon"]:
            runs = [("mantissa", lambda: run_mantissa(args.mantissa, name, args.out,
                                                      args.eval_every))]
            if not args.no_pytorch:
                runs.append(("PyTorch", lambda: run_pytorch(args.torch_python, name,
                                                            args.eval_every)))
            for who, fn in runs:
                label = f"{who} {'AdamW' if name == 'adamw' else 'Muon + AdamW'}"
                print(f"round {r + 1}/{args.rounds}: {label}", file=sys.stderr, flush=True)
                curve, ms = fn()
                curves[label] = curve  # the last round's (the runs are deterministic)
                times.setdefault(label, []).extend(ms)
    with open(os.path.join(args.out, "curves.csv"), "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["run", "step", "val_loss"])
        for label, curve in curves.items():
            wr.writerows([label, s, f"{v:.5f}"] for s, v in curve)
    svg(curves, os.path.join(args.out, "curves.svg"))
    print("| run | final val loss | steps to AdamW's final | ratio | median step (ms) | "
          "step vs AdamW |")
    print("|---|---|---|---|---|---|")
    for who in ["mantissa", "PyTorch"]:
        base = f"{who} AdamW"
        if base not in curves:
            continue
        target, total = curves[base][-1][1], curves[base][-1][0]
        base_ms = statistics.median(times[base])
        for label in [base, f"{who} Muon + AdamW"]:
            reach = first_reaching(curves[label], target)
            ms = statistics.median(times[label])
            ratio = f"{reach / total:.2f}x" if reach else "not reached"
            print(f"| {label} | {curves[label][-1][1]:.4f} | {reach} | {ratio} | {ms:.1f} | "
                  f"{ms / base_ms:.2f}x |")


if __name__ == "__main__":
    main()
