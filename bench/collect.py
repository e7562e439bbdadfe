#!/usr/bin/env python3
"""Runs mantissa's benchmarks and the peers interleaved and prints one table (bench/run.sh calls
this after building; see there). Each (workload, device, precision) runs in its own process per
program, so peak RSS belongs to that workload; the programs take turns within each round, so
machine load hits them alike. A round's number is the best of --reps timed repetitions; the table
shows the median over --rounds rounds."""
import argparse
import datetime
import functools
import json
import os
import platform
import statistics
import subprocess
import sys

WORKLOADS = {  # name: (description, batch) -- keep in step with bench/workloads.h
    "add": ("add, 16 elements", None),
    "linear_fb": ("Linear 16-16 fwd+bwd, batch 4", 4),
    "toy": ("ToyModel 10-10-5 SGD step, batch 20", 20),
    "mlp512": ("MLP 512-512-512 SGD step, batch 256", 256),
    "mlp4096": ("MLP 1024-4096-1024 SGD step, batch 512", 512),
}
PRECISIONS = ["float32", "bfloat16", "float16"]
# The Linear layers in float8 under bfloat16 autocast (mantissa's nn/float8.h, the PyTorch peer's
# torchao): the MLPs and the GPTs, compared with their own bfloat16 step. torchao has no delayed
# scaling; libtorch (1.13) no float8.
FLOAT8 = ["float8_tensorwise", "float8_rowwise", "float8_delayed"]
FLOAT8_WORKLOADS = ("mlp512", "mlp4096", "gpt_tiny", "gpt2_124m")
# name: (description, vocab_size, n_layer, n_head, n_embd, block_size, batch, device,
# precisions) -- the GPT workloads of bench/workloads.h (gpt_workloads()).
GPT_WORKLOADS = {
    "gpt_tiny": ("GPT tiny (byte vocab, 4L 4H 128 wide, block 128), batch 16", 256, 4, 4, 128,
                 128, 16, "cpu", ["float32", "bfloat16"]),
    "gpt2_124m": ("GPT-2 124M (50304 vocab, 12L 12H 768 wide, block 1024), batch 8", 50304, 12,
                  12, 768, 1024, 8, "cuda", ["bfloat16"]),
}
# Dense bfloat16 tensor-core peaks (TFLOP/s) for MFU, by a substring of the GPU's name.
GPU_PEAK_TFLOPS = {"H200": 989.0, "H100 SXM": 989.0, "H100 PCIe": 756.0, "H100": 989.0,
                   "A100": 312.0, "L40S": 362.0, "A10G": 70.0, "RTX 4090": 165.0}


# The CPU paths mantissa_bench reports in its JSON context (engine/cpu_matmul_paths.h).
CPU_PATHS = {}


def gpt_flops_per_token(w):
    """gpt_flops_per_token() in bench/workloads.h: nanoGPT's 6 N + 12 L C T."""
    _, vocab, n_layer, _, c, t, _, _, _ = GPT_WORKLOADS[w]
    per_layer = 2 * c + 3 * c * c + 3 * c + c * c + c + 2 * c + 4 * c * c + 4 * c + 4 * c * c + c
    n = vocab * c + n_layer * per_layer + 2 * c
    return 6 * n + 12 * n_layer * c * t


def gpt_tokens_per_step(w):
    return GPT_WORKLOADS[w][5] * GPT_WORKLOADS[w][6]


@functools.lru_cache(maxsize=None)
def gpu_peak_tflops():
    try:
        name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i",
                               "0"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return None, None
    for key, peak in GPU_PEAK_TFLOPS.items():
        if key in name:
            return name, peak
    return name or None, None


def parse_kv(line):
    out = {}
    for tok in line.split():
        if "=" in tok:
            k, v = tok.split("=", 1)
            out[k] = v
    return out


def run_mantissa(args, name):
    cmd = [args.mantissa_bench, f"--benchmark_filter=^{name}/", "--benchmark_format=json",
           f"--benchmark_min_time={args.min_time}", f"--benchmark_repetitions={args.reps}"]
    timeout = args.mantissa_timeout or args.peer_timeout
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:g} s"}
    if p.returncode != 0:
        return {"error": p.stderr.strip().splitlines()[-1] if p.stderr.strip() else "failed"}
    doc = json.loads(p.stdout)
    for key in ("cpu_bf16_matmul", "cpu_float32_gemm"):
        if key in doc.get("context", {}):
            CPU_PATHS[key] = doc["context"][key]
    runs = [b for b in doc["benchmarks"] if b.get("run_type") == "iteration"]
    if not runs:
        return {"error": "not run"}
    scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
    us = min(b["real_time"] * scale[b["time_unit"]] for b in runs)
    out = {"us": us, "peak": max(b["peak_rss_mib"] for b in runs), "base": runs[0]["base_rss_mib"]}
    if "bytes_per_param" in runs[0]:
        out["bytes_per_param"] = runs[0]["bytes_per_param"]
    return out


def run_peer(cmd, timeout=None):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:g} s"}
    lines = [l for l in p.stdout.splitlines() if "=" in l]
    if p.returncode != 0 or not lines:
        err = (p.stderr.strip().splitlines() or ["failed"])[-1]
        return {"error": err}
    kv = parse_kv(lines[-1])
    if "unsupported" in kv:
        return {"unsupported": lines[-1].split("=", 1)[1]}
    return {"us": float(kv["us_per_step"]), "peak": float(kv["peak_rss_mib"]),
            "base": float(kv["base_rss_mib"])}


def median_result(results):
    ok = [r for r in results if "us" in r]
    if not ok:
        return results[0] if results else {"error": "not run"}
    out = {"us": statistics.median(r["us"] for r in ok), "peak": max(r["peak"] for r in ok),
           "base": min(r["base"] for r in ok), "all": [r["us"] for r in ok]}
    if "bytes_per_param" in ok[0]:
        out["bytes_per_param"] = ok[0]["bytes_per_param"]
    return out


def fmt_us(r):
    if "us" not in r:
        return "n/a"
    us = r["us"]
    return f"{us:.3g}" if us < 100 else f"{us:,.0f}"


def fmt_mem(r):
    return f"{r['peak'] - r['base']:.0f}" if "us" in r else "-"


def own_reference(precision):
    """The row of mantissa's own that a precision's time is compared with."""
    return "bfloat16" if precision in FLOAT8 else "float32"


def ratio(peer, ours):
    if "us" not in peer or "us" not in ours:
        return "-"
    return f"{peer['us'] / ours['us']:.2f}x"


def machine_line():
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        fields = dict(l.split(":", 1) for l in lscpu.splitlines() if ":" in l)
        model = fields.get("Model name", "?").strip()
        cores = int(fields.get("Core(s) per socket", "1")) * int(fields.get("Socket(s)", "1"))
    except (OSError, ValueError):
        model, cores = platform.processor(), os.cpu_count()
    mhz = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for l in f:
                if l.startswith("cpu MHz"):
                    mhz = f"{float(l.split(':')[1]) / 1000:.2f} GHz"
                    break
    except OSError:
        pass
    return f"{model}, {cores} cores, {mhz}, load average {os.getloadavg()[0]:.2f} at start"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mantissa-bench", required=True)
    ap.add_argument("--libtorch-peer", default="")
    ap.add_argument("--python", default="")
    ap.add_argument("--pytorch-peer", default="")
    ap.add_argument("--peer-timeout", type=float, default=None,
                    help="seconds for one peer process (default: no limit)")
    ap.add_argument("--compile-peer", action="store_true",
                    help="also run the PyTorch peer under torch.compile (PyTorch 2.x)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--min-time", type=float, default=0.2)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--devices", default="cpu")
    ap.add_argument("--commit", default="?")
    ap.add_argument("--peer-versions", default="",
                    help="one line naming the peers' versions, printed with the table")
    ap.add_argument("--markdown", default="",
                    help="the table as markdown, rewritten as each measurement arrives")
    ap.add_argument("--rows-out", default="",
                    help="append each measurement as one JSON line the moment it is taken")
    ap.add_argument("--precisions", default=",".join(PRECISIONS + FLOAT8))
    ap.add_argument("--mantissa-timeout", type=float, default=None,
                    help="seconds for one mantissa_bench process (default: --peer-timeout)")
    ap.add_argument("--no-graphed-peer", action="store_true",
                    help="PyTorch eager only: no CUDA-graphed PyTorch peer")
    args = ap.parse_args()
    precisions = [p for p in args.precisions.split(",") if p]

    workloads = [w for w in args.workloads.split(",") if w]
    devices = [d for d in args.devices.split(",") if d]
    # cuda_graph: the training workloads captured once as a CUDA graph and replayed (mantissa's
    # cuda::GraphedStep, PyTorch's torch.cuda.graph); added whenever cuda is.
    if "cuda" in devices and "cuda_graph" not in devices:
        devices.append("cuda_graph")
    configs = [(w, d, p) for w in workloads if w not in GPT_WORKLOADS for d in devices
               for p in PRECISIONS if p in precisions
               and (d != "cuda_graph" or w in ("toy", "mlp512", "mlp4096"))]
    configs += [(w, d, p) for w in workloads if w in FLOAT8_WORKLOADS and w not in GPT_WORKLOADS
                for d in devices if d != "cuda_graph" for p in FLOAT8 if p in precisions]
    # A GPT workload runs on its one device (the GPU one only when a GPU is present), and there
    # also as one captured CUDA graph.
    for w in workloads:
        if w not in GPT_WORKLOADS or GPT_WORKLOADS[w][7] not in devices:
            continue
        gpt_devices = [GPT_WORKLOADS[w][7]]
        if gpt_devices[0] == "cuda" and "cuda_graph" in devices:
            gpt_devices.append("cuda_graph")
        configs += [(w, d, p) for d in gpt_devices for p in GPT_WORKLOADS[w][8] if p in precisions]
        configs += [(w, gpt_devices[0], p) for p in FLOAT8 if p in precisions]
    peers = []
    if args.libtorch_peer:
        peers.append(("libtorch", lambda w, d, p: [args.libtorch_peer, w, d, p, str(args.min_time),
                                                     str(args.reps)]))
    if args.python and args.pytorch_peer:
        peers.append(("PyTorch", lambda w, d, p: [args.python, args.pytorch_peer, w, d, p,
                                                    str(args.min_time), str(args.reps)]))
        if args.compile_peer:
            peers.append(("PyTorch compile", lambda w, d, p: [
                args.python, args.pytorch_peer, w, d + "+compile", p, str(args.min_time),
                str(args.reps)]))
        if "cuda" in devices and not args.no_graphed_peer:
            peers.append(("PyTorch graphed", lambda w, d, p: [
                args.python, args.pytorch_peer, w, "cuda_graph" if d == "cuda" else d, p,
                str(args.min_time), str(args.reps)]))
    machine = machine_line()
    results = {c: {"mantissa": []} | {n: [] for n, _ in peers} for c in configs}
    rows_out = open(args.rows_out, "a") if args.rows_out else None

    def record(r, c, who, result):
        results[c][who].append(result)
        if rows_out:
            rows_out.write(json.dumps({"round": r + 1, "workload": c[0], "device": c[1],
                                       "precision": c[2], "who": who} | result) + "\n")
            rows_out.flush()

    for r in range(args.rounds):
        for c in configs:
            print(f"round {r + 1}/{args.rounds}: {'/'.join(c)}", file=sys.stderr, flush=True)
            record(r, c, "mantissa", run_mantissa(args, "/".join(c)))
            for name, cmd in peers:
                if name == "PyTorch graphed" and (c[1] != "cuda" or c[0] in GPT_WORKLOADS):
                    continue
                if name in ("libtorch", "PyTorch compile") and c[1] == "cuda_graph":
                    continue  # these peers run eagerly (compile: as inductor does) only
                if c[1] == "cuda_graph" and (c[0] in GPT_WORKLOADS or args.no_graphed_peer):
                    continue  # the GPT's PyTorch peer runs eagerly, on the cuda row
                if c[2] in FLOAT8 and (name == "libtorch" or c[2] == "float8_delayed"):
                    continue  # no float8 in libtorch 1.13, no delayed scaling in torchao
                record(r, c, name, run_peer(cmd(*c), args.peer_timeout))
            if args.markdown:  # what is measured so far, in case the run is cut short
                with open(args.markdown, "w") as f:
                    f.write(render(args, configs, results, peers, devices, machine) + "\n")
    if rows_out:
        rows_out.close()
    text = render(args, configs, results, peers, devices, machine)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
    errors = [f"{'/'.join(c)} {k}: {r['error']}" for c in configs for k, v in results[c].items()
              for r in v if "error" in r]
    for e in sorted(set(errors)):
        print("error:", e, file=sys.stderr)


def render(args, configs, results, peers, devices, machine):
    """The tables of what `results` holds so far (a row not yet measured shows n/a)."""
    med = {c: {k: median_result(v) for k, v in results[c].items()} for c in configs}

    peer_names = [n for n, _ in peers]
    head = ["workload", "device", "precision", "mantissa µs/step", "samples/s", "GFLOP/s",
            "vs own fp32 (float8: bf16)"]
    for n in peer_names:
        head += [f"{n} µs/step", f"{n}/mantissa"]
    head += ["peak MiB (" + " / ".join(["mantissa"] + peer_names) + ")"]
    rows = []
    for (w, d, p) in configs:
        if w in GPT_WORKLOADS:
            continue
        m = med[(w, d, p)]
        ours = m["mantissa"]
        desc, batch = WORKLOADS[w]
        row = [desc, d, p, fmt_us(ours)]
        if "us" in ours:
            row.append(f"{batch * 1e6 / ours['us']:,.0f}" if batch else "-")
            sys.path.insert(0, os.path.dirname(__file__))
            row.append(f"{flops(w) / ours['us'] / 1e3:.2f}")
        else:
            row += ["-", "-"]
        f32 = med.get((w, d, own_reference(p)), {}).get("mantissa", {})
        row.append("-" if p == "float32" else (f"{ours['us'] / f32['us']:.2f}x"
                                               if "us" in ours and "us" in f32 else "-"))
        for n in peer_names:
            pr = m.get(n, {"error": "not run"})
            row += [fmt_us(pr), ratio(pr, ours)]
        row.append(" / ".join(fmt_mem(m.get(n, {})) for n in ["mantissa"] + peer_names))
        rows.append(row)

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    paths = ""
    if CPU_PATHS:
        paths = (f"; mantissa's CPU GEMMs: float32 on {CPU_PATHS.get('cpu_float32_gemm', '?')}, "
                 f"bfloat16 on {CPU_PATHS.get('cpu_bf16_matmul', '?')}")
    lines = [f"mantissa benchmarks, {now}, commit {args.commit}",
             f"machine: {machine}{paths}",
             f"peers: {args.peer_versions}" if args.peer_versions else "peers: none",
             f"median of {args.rounds} interleaved rounds, each the best of {args.reps} "
             f"repetitions of >= {args.min_time} s; peer/mantissa > 1 means mantissa is faster; "
             "peak MiB is the process's max RSS above its baseline after start-up", ""]
    if rows:
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "|".join("---" for _ in head) + "|")
        for row in rows:
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    gpt = [c for c in configs if c[0] in GPT_WORKLOADS]
    if gpt:
        lines += gpt_table(gpt, med, peer_names)
    lines += bar_lines(med, devices)
    return "\n".join(lines)


def flops(w):
    """Matmul FLOPs per step, as step_flops() in bench/workloads.h."""
    layers = {"add": [], "linear_fb": [16, 16], "toy": [10, 10, 5], "mlp512": [512, 512, 512],
              "mlp4096": [1024, 4096, 1024]}[w]
    batch = {"add": 16, "linear_fb": 4, "toy": 20, "mlp512": 256, "mlp4096": 512}[w]
    if len(layers) < 2:
        return batch
    return sum(2 * batch * layers[i] * layers[i + 1] * (2 if i == 0 else 3)
               for i in range(len(layers) - 1))


def gpt_table(configs, med, peer_names):
    """The GPT training steps: tokens/s, model FLOP/s (nanoGPT's FLOPs per token) and, on a GPU
    whose peak is known, MFU."""
    gpu_name, peak = (gpu_peak_tflops() if any(d in ("cuda", "cuda_graph") for _, d, _ in configs)
                      else (None, None))
    head = ["workload", "device", "precision", "mantissa ms/step", "tokens/s", "model GFLOP/s",
            "MFU", "vs own fp32 (float8: bf16)"]
    for n in peer_names:
        head += [f"{n} tokens/s", f"{n}/mantissa"]
    head += ["peak MiB (" + " / ".join(["mantissa"] + peer_names) + ")", "mantissa bytes/param"]
    lines = ["GPT training step (forward, cross_entropy, backward, AdamW); MFU = model FLOP/s / "
             "the device's dense bf16 peak" + (f" ({gpu_name}: {peak:g} TFLOP/s)" if peak else "") +
             "; on the CPU the peak is not known, so no MFU", "",
             "| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for (w, d, p) in configs:
        m = med[(w, d, p)]
        ours = m["mantissa"]
        tokens, fpt = gpt_tokens_per_step(w), gpt_flops_per_token(w)
        row = [GPT_WORKLOADS[w][0], d, p]
        if "us" in ours:
            tps = tokens * 1e6 / ours["us"]
            row += [f"{ours['us'] / 1e3:.1f}", f"{tps:,.0f}", f"{tps * fpt / 1e9:,.1f}",
                    f"{100 * tps * fpt / (peak * 1e12):.1f}%" if peak and d != "cpu" else "-"]
        else:
            row += ["n/a", "-", "-", "-"]
        f32 = med.get((w, d, own_reference(p)), {}).get("mantissa", {})
        row.append("-" if p == "float32" else (f"{ours['us'] / f32['us']:.2f}x"
                                               if "us" in ours and "us" in f32 else "-"))
        for n in peer_names:
            pr = m.get(n, {"error": "not run"})
            row += [f"{tokens * 1e6 / pr['us']:,.0f}" if "us" in pr else "n/a", ratio(pr, ours)]
        row.append(" / ".join(fmt_mem(m.get(n, {})) for n in ["mantissa"] + peer_names))
        # Weights + gradients + optimizer state per parameter (summary.json's training_memory).
        row.append(f"{ours['bytes_per_param']:g}" if "bytes_per_param" in ours else "-")
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    return lines


def bar_lines(med, devices):
    """mantissa's CPU performance targets, checked on this run's numbers."""
    if "cpu" not in devices:
        return []
    out = ["CPU bar (this run):"]

    def get(w, p, who):
        return med.get((w, "cpu", p), {}).get(who, {})

    def check(label, value, ok):
        out.append(f"- {label}: {value} -> {'PASS' if ok else 'FAIL'}")

    toy, toy_lt = get("toy", "float32", "mantissa"), get("toy", "float32", "libtorch")
    if "us" in toy and "us" in toy_lt:
        r = toy_lt["us"] / toy["us"]
        check("ToyModel (custom module) float32 SGD step >= 10x faster than libtorch", f"{r:.1f}x",
              r >= 10)
    for w in ["mlp512", "mlp4096"]:
        ours, lt = get(w, "float32", "mantissa"), get(w, "float32", "libtorch")
        if "us" in ours and "us" in lt:
            r = lt["us"] / ours["us"]
            check(f"{w} float32 throughput >= 1.0x libtorch", f"{r:.2f}x", r >= 1.0)
    # Mixed precision must pay on the CPU: the bf16 autocast step against mantissa's own float32.
    for w, target in [("mlp4096", 0.6), ("mlp512", 0.8), ("gpt_tiny", 0.8)]:
        f32, bf16 = get(w, "float32", "mantissa"), get(w, "bfloat16", "mantissa")
        if "us" in f32 and "us" in bf16:
            r = bf16["us"] / f32["us"]
            check(f"{w} bfloat16 autocast step <= {target}x own float32", f"{r:.2f}x", r <= target)
    ours, lt = get("gpt_tiny", "float32", "mantissa"), get("gpt_tiny", "float32", "libtorch")
    if "us" in ours and "us" in lt:
        r = lt["us"] / ours["us"]
        check("gpt_tiny float32 training step >= 1.0x libtorch", f"{r:.2f}x", r >= 1.0)
    # Every CPU row at least as fast as today's PyTorch, eager and compiled.
    for w in ["mlp512", "mlp4096", "gpt_tiny"]:
        for p in ["float32", "bfloat16"]:
            ours = get(w, p, "mantissa")
            for peer in ["PyTorch", "PyTorch compile"]:
                pr = get(w, p, peer)
                if "us" in ours and "us" in pr:
                    r = pr["us"] / ours["us"]
                    check(f"{w} {p} >= 1.0x {peer}", f"{r:.2f}x", r >= 1.0)
    out += gpu_bar_lines(med, devices)
    return out


def gpu_bar_lines(med, devices):
    """mantissa's GPU targets that this table measures (the cuBLAS-throughput
    target needs a raw GEMM row and is not checked here)."""
    if "cuda" not in devices:
        return []
    out = ["GPU targets (this run):"]

    def get(w, d, p, who):
        return med.get((w, d, p), {}).get(who, {})

    for p in ["float16", "bfloat16"]:
        ours, pt = get("mlp4096", "cuda", p, "mantissa"), get("mlp4096", "cuda", p, "PyTorch")
        if "us" in ours and "us" in pt:
            r = pt["us"] / ours["us"]
            out.append(f"- mlp4096 {p} autocast >= 1.0x PyTorch eager: {r:.2f}x -> "
                       f"{'PASS' if r >= 1.0 else 'FAIL'}")
    toy, pt = get("toy", "cuda", "float32", "mantissa"), get("toy", "cuda", "float32", "PyTorch")
    if "us" in toy and "us" in pt:
        r = toy["us"] / pt["us"]
        out.append(f"- ToyModel step <= 1/3 of PyTorch eager: {r:.2f} of it -> "
                   f"{'PASS' if r <= 1 / 3 else 'FAIL'}")
    graphed = get("toy", "cuda_graph", "float32", "mantissa")
    if "us" in graphed:
        out.append(f"- ToyModel step with a captured CUDA graph <= 15 us: {graphed['us']:.1f} us -> "
                   f"{'PASS' if graphed['us'] <= 15 else 'FAIL'}")
    return out


if __name__ == "__main__":
    main()
