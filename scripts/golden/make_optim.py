#!/usr/bin/env python3
"""Writes tests/golden/optim.txt: parameter trajectories of RMSprop, Adagrad and RAdam
(float64, single-tensor form) and the learning-rate sequences of the schedulers, as PyTorch
computes them. tests/test_adaptive_optim.cpp and tests/test_lr_scheduler.cpp build the same cases by
name and must match.

Run with Debian's PyTorch:  /usr/bin/python3 scripts/golden/make_optim.py

File format, one record per line (values %.17g):
  case NAME
  init v0 v1 ...        (optimizer cases: the parameter's starting values)
  grad v0 v1 ...        (the gradient given to the next step)
  param v0 v1 ...       (the parameter after that step)
  lr v0 v1 ...          (scheduler cases: get_last_lr()[group] after construction and each step;
  lr1 ...                one line per group, lr, lr1, ...)
  momentum v0 v1 ...    (OneCycleLR: group 0's momentum or beta1 alongside lr)
  end
"""
import math
import os

import torch
from torch.optim import lr_scheduler as S

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "golden", "optim.txt")
D = torch.float64
N = 6  # parameter elements
STEPS = 10


def grad_at(step):
    # Mixed signs and magnitudes, fixed per step so the C++ side reads them from the file.
    return torch.tensor([math.sin(1.3 * i + 0.7 * step) * (0.5 + i) for i in range(N)], dtype=D)


def init_param():
    return torch.tensor([0.3 * i - 0.8 for i in range(N)], dtype=D)


OPTIMIZERS = {
    "rmsprop_plain": lambda p: torch.optim.RMSprop([p], lr=0.01),
    "rmsprop_centered_momentum": lambda p: torch.optim.RMSprop(
        [p], lr=0.02, alpha=0.9, eps=1e-6, weight_decay=0.1, momentum=0.8, centered=True),
    "rmsprop_maximize": lambda p: torch.optim.RMSprop(
        [p], lr=0.01, momentum=0.5, maximize=True),
    "adagrad_plain": lambda p: torch.optim.Adagrad([p], lr=0.1),
    "adagrad_options": lambda p: torch.optim.Adagrad(
        [p], lr=0.1, lr_decay=0.05, weight_decay=0.2, initial_accumulator_value=0.3, eps=1e-6,
        maximize=True),
    # NAdam's cases are make_optim_torch2.py's: PyTorch 1.13 multiplied mu_product_next by mu
    # twice, which PyTorch 2 fixed.
    "radam_plain": lambda p: torch.optim.RAdam([p], lr=0.01),
    "radam_options": lambda p: torch.optim.RAdam(
        [p], lr=0.05, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.1),
}


def fmt(values):
    return " ".join("%.17g" % float(v) for v in values)


def optimizer_case(name, make):
    p = init_param().requires_grad_()
    opt = make(p)
    lines = ["case " + name, "init " + fmt(p.detach())]
    for step in range(STEPS):
        g = grad_at(step)
        p.grad = g.clone()
        opt.step()
        lines += ["grad " + fmt(g), "param " + fmt(p.detach())]
    return lines + ["end"]


def sgd(lr=0.1, momentum=0.0, groups=1):
    params = [torch.zeros(2, dtype=D, requires_grad=True) for _ in range(groups)]
    return torch.optim.SGD([{"params": [q], "lr": lr / (10 ** k)} for k, q in enumerate(params)],
                           lr=lr, momentum=momentum)


def adam(lr=0.1):
    return torch.optim.Adam([torch.zeros(2, dtype=D, requires_grad=True)], lr=lr)


PLATEAU_METRICS = [1.0, 0.9, 0.85, 0.849, 0.86, 0.848, 0.847, 0.9, 0.7, 0.7, 0.7, 0.7, 0.69,
                   0.695, 0.71, 0.72, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.49,
                   0.49, 0.49, 0.49]


def lam(epoch):
    return 0.95 ** epoch if epoch % 4 else 1.0 / (1 + epoch)


# Each returns (optimizer, step function, momentum reader or None).
def sched_cases():
    c = {}

    def simple(make, opt_fn=sgd, momentum=None):
        def build():
            opt = opt_fn()
            sch = make(opt)
            return opt, [sch.step], momentum
        return build

    c["multistep"] = simple(lambda o: S.MultiStepLR(o, milestones=[3, 7, 7, 12], gamma=0.5))
    c["exponential"] = simple(lambda o: S.ExponentialLR(o, gamma=0.9))
    c["exponential_two_groups"] = simple(lambda o: S.ExponentialLR(o, gamma=0.8),
                                         opt_fn=lambda: sgd(groups=2))
    c["cosine_annealing"] = simple(lambda o: S.CosineAnnealingLR(o, T_max=10, eta_min=0.001))
    c["cosine_annealing_short"] = simple(lambda o: S.CosineAnnealingLR(o, T_max=3))
    c["linear"] = simple(lambda o: S.LinearLR(o, start_factor=0.25, end_factor=0.9,
                                              total_iters=8))
    c["linear_decay"] = simple(lambda o: S.LinearLR(o, start_factor=1.0, end_factor=0.1,
                                                    total_iters=12))
    c["lambda"] = simple(lambda o: S.LambdaLR(o, lam))
    c["onecycle_cos"] = simple(
        lambda o: S.OneCycleLR(o, max_lr=0.5, total_steps=30),
        opt_fn=lambda: sgd(momentum=0.9), momentum=lambda o: o.param_groups[0]["momentum"])
    c["onecycle_linear_three_phase"] = simple(
        lambda o: S.OneCycleLR(o, max_lr=0.3, total_steps=30, pct_start=0.25,
                               anneal_strategy="linear", three_phase=True, div_factor=10.0,
                               final_div_factor=100.0, base_momentum=0.8, max_momentum=0.9),
        opt_fn=adam, momentum=lambda o: o.param_groups[0]["betas"][0])
    c["onecycle_no_momentum"] = simple(
        lambda o: S.OneCycleLR(o, max_lr=[0.4, 0.04], total_steps=30, cycle_momentum=False),
        opt_fn=lambda: sgd(groups=2))

    def sequential_two():
        opt = sgd()
        a = S.LinearLR(opt, start_factor=0.1, total_iters=5)
        b = S.ExponentialLR(opt, gamma=0.9)
        seq = S.SequentialLR(opt, schedulers=[a, b], milestones=[5])
        return opt, [seq.step], None
    c["sequential_linear_exponential"] = sequential_two

    def sequential_three():
        opt = sgd()
        a = S.ExponentialLR(opt, gamma=0.7)
        b = S.CosineAnnealingLR(opt, T_max=8, eta_min=0.01)
        d = S.MultiStepLR(opt, milestones=[3, 6], gamma=0.3)
        seq = S.SequentialLR(opt, schedulers=[a, b, d], milestones=[4, 14])
        return opt, [seq.step], None
    c["sequential_three"] = sequential_three

    def chained():
        # Chainable schedulers compose by stepping both on one optimizer.
        opt = sgd()
        a = S.MultiStepLR(opt, milestones=[4, 9], gamma=0.5)
        b = S.ExponentialLR(opt, gamma=0.95)
        return opt, [a.step, b.step], None
    c["chained_multistep_exponential"] = chained

    def plateau(**kw):
        def build():
            opt = sgd()
            sch = S.ReduceLROnPlateau(opt, **kw)
            it = iter(PLATEAU_METRICS)
            return opt, [lambda: sch.step(next(it))], None
        return build
    c["plateau_min_rel"] = plateau(mode="min", factor=0.5, patience=2, threshold=0.01,
                                   cooldown=1, min_lr=0.02)
    c["plateau_max_abs"] = plateau(mode="max", factor=0.3, patience=1, threshold=0.05,
                                   threshold_mode="abs", eps=1e-3)
    c["plateau_default"] = plateau()
    return c


def sched_case(name, build, steps=29):
    opt, stepper, momentum = build()
    groups = len(opt.param_groups)
    lrs = [[g["lr"]] for g in opt.param_groups]
    moms = [momentum(opt)] if momentum else []
    for _ in range(steps):
        opt.step()
        for f in stepper:
            f()
        for k in range(groups):
            lrs[k].append(opt.param_groups[k]["lr"])
        if momentum:
            moms.append(momentum(opt))
    lines = ["case " + name]
    for k in range(groups):
        lines.append(("lr" if k == 0 else "lr%d" % k) + " " + fmt(lrs[k]))
    if momentum:
        lines.append("momentum " + fmt(moms))
    return lines + ["end"]


def main():
    lines = []
    for name, make in OPTIMIZERS.items():
        lines += optimizer_case(name, make)
    for name, build in sched_cases().items():
        lines += sched_case(name, build)
    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
