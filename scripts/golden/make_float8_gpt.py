#!/usr/bin/env python3
"""Writes tests/golden/float8_gpt.txt: the 2-layer GPT of tests/golden/gpt_trajectory.txt (its
initial weights and batches, read from that file) trained 20 steps with AdamW as
make_gpt_trajectory.py trains it, with torchao 0.18's float8 training on the Linear layers of its
blocks (convert_to_float8_training, Float8LinearConfig.from_recipe_name), for the recipes
tensorwise, rowwise and rowwise_with_gw_hp, and with none of them ("none": the same run in
PyTorch 2.x alone), in float32 and under bfloat16 autocast: the loss before each step, and in
float32 the first step's gradients of two float8 layers' weights of the first block (their
backward runs through both blocks' float8 products). tests/test_gpt.cpp follows them.

The tied lm_head stays in high precision, as mantissa's GPT keeps it (its weight is the token
embedding's; convert_to_float8_training would otherwise swap it for a Float8Linear too).
Under autocast the input of each float8 layer is cast to bfloat16 first, as on CUDA
(make_float8_linear.py's cpu_autocast_as_cuda says why).

Run with PyTorch 2.x and torchao 0.18 (pip install torch torchao):
  python scripts/golden/make_float8_gpt.py
"""
import os
import sys

import torch
import torch.nn.functional as F
from torchao.float8 import Float8LinearConfig, convert_to_float8_training
from torchao.float8.float8_linear import Float8Linear

sys.path.insert(0, os.path.dirname(__file__))
import golden_cases  # noqa: E402
from gpt_reference import GPT, CausalSelfAttention, Config  # noqa: E402
from make_float8_linear import RECIPES, cpu_autocast_as_cuda  # noqa: E402

HERE = os.path.dirname(__file__)
TRAJECTORY = os.path.join(HERE, "..", "..", "tests", "golden", "gpt_trajectory.txt")
OUT = os.path.join(HERE, "..", "..", "tests", "golden", "float8_gpt.txt")
STEPS = 20
GRADS = ("transformer.h.0.attn.c_attn.weight", "transformer.h.0.mlp.c_proj.weight")


def sdpa_attention(self, x):
    """gpt_reference's attention through F.scaled_dot_product_attention, as mantissa's GPT runs
    it (under bfloat16 autocast the scores then stay in float32 inside the kernel, where the
    written-out attention rounds them to bfloat16)."""
    B, T, C = x.shape
    q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
    heads = lambda t: t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
    y = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
    return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


def read_trajectory():
    """The run's options, and its tensors (param:<name>, x:<k>, y:<k>) as float32 / int64."""
    options, tensors = {}, {}
    with open(TRAJECTORY) as f:
        for line in f:
            words = line.split()
            if not words:
                continue
            if words[0] == "run":
                options = dict(w.split("=") for w in words[2:])
            elif words[0] == "tensor":
                name, dims = words[1], [int(d) for d in words[2].split(",")]
                values = torch.tensor([float(v) for v in words[3:]], dtype=torch.float64)
                dtype = torch.float32 if name.startswith("param:") else torch.int64
                tensors[name] = values.to(dtype).reshape(dims)
    return options, tensors


def train(recipe, precision):
    options, tensors = read_trajectory()
    keys = ("block_size", "vocab_size", "n_layer", "n_head", "n_embd")
    model = GPT(Config(**{k: int(options[k]) for k in keys}, dropout=0.0,
                       bias=options["bias"] == "1"))
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(tensors["param:" + name])
    if recipe != "none":
        convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name(recipe),
                                   module_filter_fn=lambda m, fqn: fqn != "lm_head")
        converted = [n for n, m in model.named_modules() if type(m) is Float8Linear]
        assert len(converted) == 4 * int(options["n_layer"]), converted
    assert model.lm_head.weight is model.transformer.wte.weight
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    wd = float(options["weight_decay"])
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=float(options["lr"]), betas=(0.9, 0.95))
    batches = sum(1 for k in tensors if k.startswith("x:"))
    V = int(options["vocab_size"])
    losses, out = [], {}
    for step in range(STEPS):
        x, y = tensors["x:%d" % (step % batches)], tensors["y:%d" % (step % batches)]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bfloat16"):
            logits = model(x)
            loss = F.cross_entropy(logits.view(-1, V).float(), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if step == 0 and precision == "float32":
            params = dict(model.named_parameters())
            out.update({"grad:" + n: params[n].grad for n in GRADS})
        opt.step()
        losses.append(loss.detach())
    out["losses"] = torch.stack(losses)
    return out


def main():
    torch.set_num_threads(1)
    cpu_autocast_as_cuda()
    CausalSelfAttention.forward = sdpa_attention
    cases = {}
    for recipe in RECIPES + ["none"]:
        for precision in ("float32", "bfloat16"):
            cases["gpt_%s_%s" % (recipe, precision)] = lambda r=recipe, p=precision: train(r, p)
    golden_cases.write_cases(OUT, cases, digits=9)  # float32 values


if __name__ == "__main__":
    main()
