#!/usr/bin/env python3
"""The PyTorch peer for bench/run.sh: the workloads of bench/workloads.h in PyTorch eager (and,
on CUDA, captured in a CUDA graph where PyTorch can), timed like the libtorch peer. A device
spelled cpu+compile or cuda+compile runs the forward and the loss through torch.compile
(inductor; backward and optimizer as inductor leaves them, the optimizer step eager), PyTorch 2.x.

    pytorch_eager.py <workload> <cpu|cuda|cuda_graph|cpu+compile|cuda+compile>
                     <float32|bfloat16|float16|float8_<recipe>> [min_s] [reps]

float8_<recipe> (tensorwise, rowwise, rowwise_with_gw_hp): bfloat16 autocast with the Linear
layers in float8 by torchao (convert_to_float8_training, Float8LinearConfig.from_recipe_name;
the GPT's tied output projection stays in bfloat16, as mantissa's). torchao 0.18 follows only the
CUDA autocast scope: on the CPU its layers take the float32 input as it comes (what a user gets;
rowwise_with_gw_hp then fails, and the row says so).

prints "us_per_step=<best repetition> peak_rss_mib=<..> base_rss_mib=<..>", or
"unsupported=<reason>".
"""
import math
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
# name: (vocab_size, n_layer, n_head, n_embd, block_size, batch, lr, weight_decay) -- the GPT
# workloads of bench/workloads.h
GPT_WORKLOADS = {
    "gpt_tiny": (256, 4, 4, 128, 128, 16, 6e-4, 0.1),
    "gpt2_124m": (50304, 12, 12, 768, 1024, 8, 6e-4, 0.1),
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def split_precision(precision):
    """("bfloat16", recipe) for float8_<recipe>, else (precision, None)."""
    if precision.startswith("float8_"):
        return "bfloat16", precision[len("float8_"):]
    return precision, None


def to_float8(model, recipe):
    """torchao's float8 training on the model's Linear layers, the bench's workloads all have
    dims that are multiples of 16."""
    if recipe is None:
        return
    try:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    except ImportError as e:
        raise NotImplementedError(f"float8 needs torchao ({e})")
    convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name(recipe))


def max_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class Block(torch.nn.Module):
    """nanoGPT's Block: F.scaled_dot_product_attention where PyTorch has it (2.x), else its
    composed attention (PyTorch 1.13)."""

    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = torch.nn.LayerNorm(n_embd)
        self.c_attn = torch.nn.Linear(n_embd, 3 * n_embd)
        self.attn_proj = torch.nn.Linear(n_embd, n_embd)
        self.ln_2 = torch.nn.LayerNorm(n_embd)
        self.c_fc = torch.nn.Linear(n_embd, 4 * n_embd)
        self.mlp_proj = torch.nn.Linear(4 * n_embd, n_embd)
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size))
                             .view(1, 1, block_size, block_size))

    def attn(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if hasattr(torch.nn.functional, "scaled_dot_product_attention"):
            # PyTorch 2.x: what a user writes (flash or memory-efficient kernels where they apply).
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.attn_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = torch.nn.functional.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.attn_proj(y)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp_proj(torch.nn.functional.gelu(self.c_fc(self.ln_2(x))))


class GPT(torch.nn.Module):
    def __init__(self, vocab_size, n_layer, n_head, n_embd, block_size):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab_size, n_embd)
        self.wpe = torch.nn.Embedding(block_size, n_embd)
        self.h = torch.nn.ModuleList(Block(n_embd, n_head, block_size) for _ in range(n_layer))
        self.ln_f = torch.nn.LayerNorm(n_embd)
        for pn, p in self.named_parameters():
            if pn.endswith("bias"):
                torch.nn.init.zeros_(p)
            elif "ln_" not in pn:
                std = 0.02 / math.sqrt(2 * n_layer) if pn.endswith("_proj.weight") else 0.02
                torch.nn.init.normal_(p, 0.0, std)

    def forward(self, idx):
        pos = torch.arange(0, idx.size(1), dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return torch.nn.functional.linear(self.ln_f(x), self.wte.weight)  # lm_head tied to wte


def compile_if(fn, compiled):
    if not compiled:
        return fn
    if not hasattr(torch, "compile"):
        raise NotImplementedError(f"torch.compile needs PyTorch 2.x, not {torch.__version__}")
    return torch.compile(fn)


def make_gpt_step(name, dev, precision, compiled=False):
    vocab, n_layer, n_head, n_embd, block, batch, lr, wd = GPT_WORKLOADS[name]
    precision, recipe = split_precision(precision)
    dtype = DTYPES[precision]
    amp = precision != "float32"
    if amp and dev.type == "cpu" and dtype != torch.bfloat16:
        raise NotImplementedError(f"CPU autocast has no {precision} in PyTorch {torch.__version__}")
    model = GPT(vocab, n_layer, n_head, n_embd, block).to(dev)
    model.train()
    to_float8(model, recipe)  # the blocks' Linear layers: lm_head is F.linear on wte
    idx = torch.randint(0, vocab, (batch, block), device=dev)
    targets = torch.randint(0, vocab, (batch * block,), device=dev)
    params = list(model.parameters())
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": wd},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95))
    autocast_default = torch.bfloat16 if dev.type == "cpu" else torch.float16

    def forward_loss():
        with torch.autocast(dev.type, dtype=dtype if amp else autocast_default, enabled=amp):
            logits = model(idx)
            return torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), targets)

    forward_loss = compile_if(forward_loss, compiled)

    def step():
        opt.zero_grad(set_to_none=True)
        forward_loss().backward()
        opt.step()

    return step


def make_step(name, device, precision, graphed, compiled=False):
    if name in GPT_WORKLOADS:
        if graphed:
            raise NotImplementedError("the GPT workloads run eagerly only")
        return make_gpt_step(name, torch.device("cuda" if device.startswith("cuda") else "cpu"),
                             precision, compiled)
    layers, batch, lr, momentum, train = WORKLOADS[name]
    dev = torch.device("cuda" if device.startswith("cuda") else "cpu")
    precision, recipe = split_precision(precision)
    if recipe is not None and name not in ("mlp512", "mlp4096"):
        raise NotImplementedError("float8 rows are the MLP and GPT workloads")
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
    to_float8(model, recipe)
    x = torch.randn(batch, layers[0], device=dev)
    target = torch.randn(batch, layers[-1], device=dev)
    params = list(model.parameters())
    # torch.autocast checks the dtype even when disabled; give it one it accepts.
    autocast_default = torch.bfloat16 if dev.type == "cpu" else torch.float16
    opt = torch.optim.SGD(params, lr=lr, momentum=momentum) if train else None

    def forward_loss():
        with torch.autocast(dev.type, dtype=dtype if amp else autocast_default, enabled=amp):
            out = model(x)
            return torch.nn.functional.mse_loss(out, target) if train else out.sum()

    forward_loss = compile_if(forward_loss, compiled)

    def step():
        if train:
            opt.zero_grad(set_to_none=not graphed)
        else:
            for p in params:
                p.grad = None
        forward_loss().backward()
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
    compiled = device.endswith("+compile")
    device = device.split("+")[0]
    min_time = float(sys.argv[4]) if len(sys.argv) > 4 else 0.2
    reps = int(sys.argv[5]) if len(sys.argv) > 5 else 3
    if device.startswith("cuda") and not torch.cuda.is_available():
        print("unsupported=no CUDA device")
        return
    torch.manual_seed(0)
    try:
        step = make_step(name, device, precision, device == "cuda_graph", compiled)
    except (NotImplementedError, RuntimeError) as e:
        print(f"unsupported={str(e).splitlines()[0]}")
        return
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    try:
        step()  # the first step, where a program PyTorch cannot run fails
    except (NotImplementedError, RuntimeError) as e:
        print(f"unsupported={str(e).splitlines()[0]}")
        return
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
