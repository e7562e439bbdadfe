#!/usr/bin/env python3
"""Writes tests/golden/norms.txt: BatchNorm1d/2d, GroupNorm and RMS norm as PyTorch computes
them, in float64. tests/test_norms.cpp runs the same programs on the recorded inputs and must
match.

Run with Debian's PyTorch:  /usr/bin/python3 scripts/golden/make_norms.py

Batch norm programs run two training steps (a forward, then backward of sum(y * gy)) and one
forward in eval mode, and record both outputs, the input gradients, the parameter gradients
(summed over the two steps), the buffers after them and the eval output. PyTorch 1.13 has no
RMSNorm: its programs are PyTorch 2.4's definition written with explicit ops,
y = x * rsqrt(mean(x^2) + eps) * weight, eps defaulting to finfo(float64).eps.

File format, one record per line:
  case NAME
  in NAME d0,d1,... v0 v1 ...    (an input; float64 values, %.17g; a 0-d tensor has dims "-")
  out NAME d0,d1,... v0 v1 ...   (a result the program must reproduce)
  end
"""
import os
import torch

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "golden", "norms.txt")
D = torch.float64
CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def rand(*shape, scale=1.0, shift=0.0):
    return torch.randn(*shape, dtype=D) * scale + shift


def batch_norm_program(module, x_shape, affine=True):
    """Two training steps and an eval forward of `module`."""
    ins = {}
    if affine:
        with torch.no_grad():
            module.weight.copy_(rand(module.num_features, scale=0.5, shift=1.0))
            module.bias.copy_(rand(module.num_features, scale=0.5))
        ins["weight"] = module.weight.detach().clone()
        ins["bias"] = module.bias.detach().clone()
    outs = {}
    module.train()
    for step in (1, 2):
        x = rand(*x_shape, scale=2.0, shift=0.5).requires_grad_()
        gy = rand(*x_shape)
        ins[f"x{step}"] = x.detach().clone()
        ins[f"gy{step}"] = gy
        y = module(x)
        (y * gy).sum().backward()
        outs[f"y{step}"] = y
        outs[f"x{step}.grad"] = x.grad
    if affine:
        outs["weight.grad"] = module.weight.grad
        outs["bias.grad"] = module.bias.grad
    for name, buf in module.named_buffers():
        outs[name] = buf
    module.eval()
    xe = rand(*x_shape, scale=2.0, shift=0.5)
    ins["x_eval"] = xe
    outs["y_eval"] = module(xe)
    return ins, outs


@case
def batch_norm1d_2d_input():
    return batch_norm_program(torch.nn.BatchNorm1d(4).double(), (6, 4))


@case
def batch_norm1d_3d_input():
    return batch_norm_program(torch.nn.BatchNorm1d(3, eps=1e-3, momentum=0.3).double(), (4, 3, 5))


@case
def batch_norm2d():
    return batch_norm_program(torch.nn.BatchNorm2d(3).double(), (2, 3, 3, 4))


@case
def batch_norm2d_momentum_none():
    return batch_norm_program(torch.nn.BatchNorm2d(2, momentum=None).double(), (3, 2, 2, 3))


@case
def batch_norm2d_no_affine():
    return batch_norm_program(torch.nn.BatchNorm2d(3, affine=False).double(), (2, 3, 2, 2),
                              affine=False)


@case
def batch_norm2d_no_running_stats():
    return batch_norm_program(torch.nn.BatchNorm2d(2, track_running_stats=False).double(),
                              (3, 2, 2, 2))


def affine_program(module, x_shape, params):
    ins = {}
    with torch.no_grad():
        for name in params:
            p = getattr(module, name)
            p.copy_(rand(*p.shape, scale=0.5, shift=1.0 if name == "weight" else 0.0))
            ins[name] = p.detach().clone()
    x = rand(*x_shape, scale=2.0, shift=0.5).requires_grad_()
    gy = rand(*x_shape)
    ins["x"] = x.detach().clone()
    ins["gy"] = gy
    y = module(x)
    (y * gy).sum().backward()
    outs = {"y": y, "x.grad": x.grad}
    for name in params:
        outs[name + ".grad"] = getattr(module, name).grad
    return ins, outs


@case
def group_norm_3d():
    return affine_program(torch.nn.GroupNorm(3, 6).double(), (2, 6, 5), ["weight", "bias"])


@case
def group_norm_4d():
    return affine_program(torch.nn.GroupNorm(2, 4, eps=1e-3).double(), (3, 4, 2, 3),
                          ["weight", "bias"])


@case
def group_norm_no_affine():
    return affine_program(torch.nn.GroupNorm(1, 3, affine=False).double(), (2, 3, 4), [])


@case
def group_norm_instance_like():
    return affine_program(torch.nn.GroupNorm(4, 4).double(), (2, 4, 3), ["weight", "bias"])


class RMSNorm(torch.nn.Module):
    """PyTorch 2.4's nn.RMSNorm, in explicit ops (PyTorch 1.13 has none)."""

    def __init__(self, shape, eps=None, affine=True):
        super().__init__()
        self.shape = tuple(shape)
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(self.shape, dtype=D)) if affine else None

    def forward(self, x):
        eps = torch.finfo(x.dtype).eps if self.eps is None else self.eps
        dims = tuple(range(-len(self.shape), 0))
        y = x * torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + eps)
        return y * self.weight if self.weight is not None else y


@case
def rms_norm():
    return affine_program(RMSNorm((8,), eps=1e-6), (4, 3, 8), ["weight"])


@case
def rms_norm_default_eps():
    return affine_program(RMSNorm((2, 4)), (5, 2, 4), ["weight"])


@case
def rms_norm_no_weight():
    return affine_program(RMSNorm((6,), eps=1e-5, affine=False), (3, 6), [])


def fmt(kind, name, t):
    t = t.detach().to(D)
    dims = ",".join(str(d) for d in t.shape) if t.dim() > 0 else "-"
    values = " ".join("%.17g" % v for v in t.reshape(-1).tolist())
    return f"{kind} {name} {dims} {values}".rstrip()


def main():
    torch.manual_seed(0)
    lines = []
    for name, fn in CASES.items():
        ins, outs = fn()
        lines.append(f"case {name}")
        lines += [fmt("in", k, v) for k, v in ins.items()]
        lines += [fmt("out", k, v) for k, v in outs.items()]
        lines.append("end")
    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
