#!/usr/bin/env python3
"""The PyTorch peer for bench/run.sh: the workloads of bench/workloads.h in PyTorch eager (and,
on CUDA, captured in a CUDA graph where PyTorch can), timed like the libtorch peer.

    pytorch_eager.py <workload> <cpu|cuda|cuda_graph> <float32|bfloat16|float16> [min_s] [reps]

prints "us_per_step=<best repetition> peak_rss_mib=<..> base_rss_mib=<..>", or
"unsupported=<reason>".
"""
import resource
import sys
import time

import torch

# name: (layers, batch, lr, momentum, train) -- keep in step with bench/workloads.h
WORKLOADS = {
    "add": ([], 16, 0.0, 0.0, False),
    "linear_fb": ([16, 16], 4, 0.0, 0.0, False),
    "toy": ([10, 10, 5], 20, 1e-3, 0.0, True),
    "mlp512": ([512, 512, 512], 256, 1e-3, 0.9, True),
    "mlp4096": ([1024, 4096, 1024], 512, 1e-3, 0.9, True),
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def max_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def make_step(name, device, precision, graphed):
    layers, batch, lr, momentum, train = WORKLOADS[name]
    dev = torch.device("cuda" if device.startswith("cuda") else "cpu")
    dtype = DTYPES[precision]
    amp = precision != "float32"
    if name == "add":
        a = torch.randn(batch, device=dev, dtype=dtype)
        b = torch.randn(batch, device=dev, dtype=dtype)
        return lambda: a + b
    if amp and dev.type == "cpu" and dtype != torch.bfloat16:
        raise NotImplementedError(f"CPU autocast has no {precision} in PyTorch {torch.__version__}")
    mods = []
    for i in range(len(layers) - 1):
        if i > 0:
            mods.append(torch.nn.ReLU())
        mods.append(torch.nn.Linear(layers[i], layers[i + 1]))
    model = torch.nn.Sequential(*mods).to(dev)
    x = torch.randn(batch, layers[0], device=dev)
    target = torch.randn(batch, layers[-1], device=dev)
    params = list(model.parameters())
    # torch.autocast checks the dtype even when disabled; give it one it accepts.
    autocast_default = torch.bfloat16 if dev.type == "cpu" else torch.float16
    opt = torch.optim.SGD(params, lr=lr, momentum=momentum) if train else None

    def step():
        if train:
            opt.zero_grad(set_to_none=not graphed)
        else:
            for p in params:
                p.grad = None
        with torch.autocast(dev.type, dtype=dtype if amp else autocast_default, enabled=amp):
            out = model(x)
            loss = torch.nn.functional.mse_loss(out, target) if train else out.sum()
        loss.backward()
        if train:
            opt.step()

    if not graphed:
        return step
    # Whole-step capture (forward, backward, optimizer), as in PyTorch's CUDA graphs recipe.
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay


def main():
    base_rss = max_rss_mib()
    name, device, precision = sys.argv[1], sys.argv[2], sys.argv[3]
    min_time = float(sys.argv[4]) if len(sys.argv) > 4 else 0.2
    reps = int(sys.argv[5]) if len(sys.argv) > 5 else 3
    if device.startswith("cuda") and not torch.cuda.is_available():
        print("unsupported=no CUDA device")
        return
    torch.manual_seed(0)
    try:
        step = make_step(name, device, precision, device == "cuda_graph")
    except (NotImplementedError, RuntimeError) as e:
        print(f"unsupported={str(e).splitlines()[0]}")
        return
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    iters = 1
    while True:  # warm up, then find an iteration count that takes at least min_time
        t0 = time.perf_counter()
        for _ in range(iters):
            step()
        sync()
        s = time.perf_counter() - t0
        if s >= min_time:
            break
        iters = iters * 10 if s <= 0 else max(iters * 2, int(iters * 1.2 * min_time / s))
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(iters):
            step()
        sync()
        best = min(best, (time.perf_counter() - t0) / iters)
    print(f"us_per_step={best * 1e6:.4f} peak_rss_mib={max_rss_mib():.2f} base_rss_mib={base_rss:.2f}")


if __name__ == "__main__":
    main()
