// CPU kernels for the fused optimizer steps (SGD, Adam/AdamW).
//
// Each kernel is one pass over a parameter's elements that reads the gradient and state and
// writes the parameter and state back. The per-element arithmetic follows PyTorch's
// single-tensor CPU implementations op by op (torch.optim.sgd._single_tensor_sgd,
// torch.optim.adam._single_tensor_adam): for float32 and float64 every intermediate is rounded
// exactly where PyTorch's separate tensor ops round it, so trajectories agree to the last bits
// (up to FMA contraction in PyTorch's vectorised loops). Half types compute in float and round
// only what is stored (state and parameter), reading stored state back rounded as PyTorch would.
// Scalar factors (bias corrections, step size) are computed in double, as Python does, and
// cast to opmath once.
#include <cmath>

#include "engine/kernel_tables.h"
#include "kernels/cpu/loops.h"

namespace mantissa::cpu {
namespace {

// Calls f(i) for i in [0, n), split across threads for large tensors (elementwise, so the result
// does not depend on the split).
template <typename F>
void parallel_range(int64_t n, const F& f) {
#if defined(_OPENMP)
  if (n >= kParallelGrain && omp_get_max_threads() > 1 && !omp_in_parallel()) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) f(i);
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) f(i);
}

template <typename T>
T* maybe_data(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

void sgd_step_cpu(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
                  const SgdStepParams& hp) {
  dispatch_dtype<kFloatingTypes>(param.dtype(), "sgd_step", param.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    T* p = param.data<T>();
    const T* g = grad.data<T>();
    T* buf = maybe_data<T>(momentum_buffer);
    const bool use_wd = hp.weight_decay != 0.0, use_momentum = hp.momentum != 0.0;
    const bool maximize = hp.maximize, nesterov = hp.nesterov, first = hp.first_step;
    const M wd = static_cast<M>(hp.weight_decay), mom = static_cast<M>(hp.momentum);
    const M keep = static_cast<M>(1.0 - hp.dampening);
    const M neg_lr = static_cast<M>(-hp.lr);
    parallel_range(param.numel(), [=](int64_t i) {
      const M pv = static_cast<M>(p[i]);
      M d = static_cast<M>(g[i]);
      if (maximize) d = -d;
      if (use_wd) d = d + wd * pv;  // grad.add(param, alpha=weight_decay)
      if (use_momentum) {
        // buf = clone(d) on the first step, else buf.mul_(momentum).add_(d, alpha=1-dampening)
        M b = first ? d : static_cast<M>(static_cast<T>(static_cast<M>(buf[i]) * mom)) + keep * d;
        buf[i] = static_cast<T>(b);
        b = static_cast<M>(buf[i]);
        d = nesterov ? d + mom * b : b;
      }
      p[i] = static_cast<T>(pv + neg_lr * d);  // param.add_(d, alpha=-lr)
    });
  });
}

void adam_step_cpu(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                   const Tensor& exp_avg_sq, const Tensor& max_exp_avg_sq,
                   const AdamStepParams& hp) {
  dispatch_dtype<kFloatingTypes>(param.dtype(), "adam_step", param.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    T* p = param.data<T>();
    const T* g = grad.data<T>();
    T* m1 = exp_avg.data<T>();
    T* m2 = exp_avg_sq.data<T>();
    T* mx = maybe_data<T>(max_exp_avg_sq);
    const bool maximize = hp.maximize, amsgrad = hp.amsgrad;
    const bool coupled_wd = hp.weight_decay != 0.0 && !hp.decoupled_weight_decay;
    const bool decoupled_wd = hp.weight_decay != 0.0 && hp.decoupled_weight_decay;
    const double step = static_cast<double>(hp.step);
    const double bias_correction1 = 1.0 - std::pow(hp.beta1, step);
    const double bias_correction2 = 1.0 - std::pow(hp.beta2, step);
    const M wd = static_cast<M>(hp.weight_decay);
    const M decay = static_cast<M>(1.0 - hp.lr * hp.weight_decay);
    // exp_avg.lerp_(grad, 1 - beta1), with lerp's two-sided formula for accuracy near 1.
    const M w1 = static_cast<M>(1.0 - hp.beta1);
    const bool lerp_small = std::abs(w1) < M(0.5);
    const M one_minus_w1 = M(1) - w1;
    const M beta2 = static_cast<M>(hp.beta2), w2 = static_cast<M>(1.0 - hp.beta2);
    const M neg_step_size = static_cast<M>(-(hp.lr / bias_correction1));
    const M bc2_sqrt = static_cast<M>(std::sqrt(bias_correction2));
    const M eps = static_cast<M>(hp.eps);
    parallel_range(param.numel(), [=](int64_t i) {
      M pv = static_cast<M>(p[i]);
      M gv = static_cast<M>(g[i]);
      if (maximize) gv = -gv;
      if (coupled_wd) gv = gv + wd * pv;  // grad.add(param, alpha=wd)
      if (decoupled_wd) pv = static_cast<M>(static_cast<T>(pv * decay));  // param.mul_(1 - lr*wd)
      const M a = static_cast<M>(m1[i]);
      m1[i] = static_cast<T>(lerp_small ? a + w1 * (gv - a) : gv - (gv - a) * one_minus_w1);
      // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
      const M v = static_cast<M>(static_cast<T>(static_cast<M>(m2[i]) * beta2));
      m2[i] = static_cast<T>(v + w2 * gv * gv);
      M second = static_cast<M>(m2[i]);
      if (amsgrad) {
        const M old = static_cast<M>(mx[i]);
        // torch.maximum propagates NaN from either side
        const M best = (std::isnan(old) || old > second) && !std::isnan(second) ? old : second;
        mx[i] = static_cast<T>(best);
        second = static_cast<M>(mx[i]);
      }
      const M denom = std::sqrt(second) / bc2_sqrt + eps;
      p[i] = static_cast<T>(pv + neg_step_size * static_cast<M>(m1[i]) / denom);  // addcdiv_
    });
  });
}

}  // namespace

MT_REGISTER_KERNEL(sgd_step_kernel, kCPU, &sgd_step_cpu);
MT_REGISTER_KERNEL(adam_step_kernel, kCPU, &adam_step_cpu);

}  // namespace mantissa::cpu
