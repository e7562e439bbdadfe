// CPU kernels for the fused optimizer steps (SGD, Adam/AdamW), per parameter and multi-tensor.
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
//
// The multi-tensor kernels run the same per-parameter loops (sgd_range, adam_range) over a list,
// so they equal the per-parameter kernels bit for bit. On the CPU found_inf and the step counts
// are host memory, so reading them costs nothing; under master weights the rounded parameter is
// written in the same pass, with the rounding of a float32 -> half copy.
//
// Adam's state may be bfloat16 for a float32 parameter (Optimizer::set_state_dtype), and stores
// into bfloat16 (state, or a bfloat16 parameter without master weights) may round stochastically
// (set_stochastic_rounding; kernels/optimizer_math.h). Either way the element's values stay in
// opmath between stores instead of taking PyTorch's intermediate roundings.
#include <cmath>
#include <type_traits>

#include "engine/kernel_tables.h"
#include "engine/philox.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/worker_pool.h"
#include "kernels/optimizer_math.h"

namespace mantissa::cpu {
namespace {

using optim_math::with_state_type;
using optim_math::with_static_bool;

inline constexpr uint32_t kModelTypes = dtype_bit(DType::Float16) | dtype_bit(DType::BFloat16);

// Calls f(i) for i in [0, n), split across the worker pool for large tensors (elementwise, so the
// result does not depend on the split). The pool's threads do not spin once done, which matters
// here: the update sits between the backward's GEMMs and the next forward's.
template <typename F>
void parallel_range(int64_t n, const F& f) {
  parallel_ranges(n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) f(i);
  });
}

// Stands for "no lower-precision model copy to write" in the loops below, so that the store is
// compiled out rather than tested per element (a conditional store keeps a loop scalar).
struct NoModel {};

// Calls f(model_ptr) with the model parameter's typed pointer, or with a null NoModel* when there
// is none.
template <typename F>
void with_model(const Tensor& model, const F& f) {
  if (!model.defined()) {
    f(static_cast<NoModel*>(nullptr));
    return;
  }
  dispatch_dtype<kModelTypes>(model.dtype(), "optimizer_step (master weights)", model.device(),
                              [&](auto tag) { f(model.data<typename decltype(tag)::type>()); });
}

template <typename Md, typename T>
inline void store_model(Md* model, int64_t i, T value) {
  if constexpr (!std::is_same_v<Md, NoModel>) model[i] = static_cast<Md>(value);
}

template <typename T, typename Md>
void sgd_range(T* p, const T* g, T* buf, Md* model, int64_t n, const SgdStepParams& hp,
               bool first) {
  using M = opmath_t<T>;
  const bool use_wd = hp.weight_decay != 0.0, maximize = hp.maximize, nesterov = hp.nesterov;
  const M wd = static_cast<M>(hp.weight_decay), mom = static_cast<M>(hp.momentum);
  const M keep = static_cast<M>(1.0 - hp.dampening);
  const M neg_lr = static_cast<M>(-hp.lr);
  // The momentum buffer's stores are in the loop only when there is one; the other options are
  // selects, which the compiler turns into blends, so every variant vectorises.
  with_static_bool(hp.momentum != 0.0, [&](auto use_momentum) {
    parallel_range(n, [=](int64_t i) {
      const M pv = static_cast<M>(p[i]);
      M d = static_cast<M>(g[i]);
      d = maximize ? -d : d;
      d = use_wd ? d + wd * pv : d;  // grad.add(param, alpha=weight_decay)
      if constexpr (decltype(use_momentum)::value) {
        // buf = clone(d) on the first step, else buf.mul_(momentum).add_(d, alpha=1-dampening)
        const M old = static_cast<M>(static_cast<T>(static_cast<M>(buf[i]) * mom));
        const T b = static_cast<T>(first ? d : old + keep * d);
        buf[i] = b;
        d = nesterov ? d + mom * static_cast<M>(b) : static_cast<M>(b);
      }
      p[i] = static_cast<T>(pv + neg_lr * d);  // param.add_(d, alpha=-lr)
      store_model(model, i, p[i]);
    });
  });
}

template <typename T, typename S, typename Md>
void adam_range(T* p, const T* g, S* m1, S* m2, S* mx, Md* model, int64_t n,
                const AdamStepParams& hp, int64_t param_index) {
  using M = opmath_t<T>;
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
  const uint64_t key = hp.stochastic_rounding
                           ? optim_math::stochastic_rounding_key(hp.sr_seed, param_index, hp.step)
                           : 0;
  // As in sgd_range: only the max_exp_avg_sq store depends on an option at compile time, and
  // stochastic rounding, which draws random bits per element.
  with_static_bool(amsgrad, [&](auto use_amsgrad) {
    with_static_bool(hp.stochastic_rounding, [&](auto stochastic) {
      constexpr bool kSr = decltype(stochastic)::value;
      // PyTorch's intermediate roundings (to the parameter's dtype, where its separate tensor ops
      // round) hold when the state has that dtype and stores round to nearest; otherwise every
      // value stays in opmath and rounds once, on its store.
      constexpr bool kExact = std::is_same_v<S, T> && !kSr;
      parallel_range(n, [=](int64_t i) {
        Philox4 r{};
        if constexpr (kSr) r = philox4x32(key, static_cast<uint64_t>(i));
        M pv = static_cast<M>(p[i]);
        M gv = static_cast<M>(g[i]);
        if (maximize) gv = -gv;
        if (coupled_wd) gv = gv + wd * pv;  // grad.add(param, alpha=wd)
        if (decoupled_wd) {
          pv = kExact ? static_cast<M>(static_cast<T>(pv * decay)) : pv * decay;  // mul_(1-lr*wd)
        }
        const M a = static_cast<M>(m1[i]);
        m1[i] = optim_math::store_as<S>(
            lerp_small ? a + w1 * (gv - a) : gv - (gv - a) * one_minus_w1, kSr, r.v[1]);
        // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        const M old_v = static_cast<M>(m2[i]) * beta2;
        const M v = kExact ? static_cast<M>(static_cast<T>(old_v)) : old_v;
        m2[i] = optim_math::store_as<S>(v + w2 * gv * gv, kSr, r.v[2]);
        M second = static_cast<M>(m2[i]);
        if constexpr (decltype(use_amsgrad)::value) {
          const M old = static_cast<M>(mx[i]);
          // torch.maximum propagates NaN from either side
          const M best = (std::isnan(old) || old > second) && !std::isnan(second) ? old : second;
          mx[i] = optim_math::store_as<S>(best, kSr, r.v[3]);
          second = static_cast<M>(mx[i]);
        }
        const M denom = std::sqrt(second) / bc2_sqrt + eps;
        p[i] = optim_math::store_as<T>(pv + neg_step_size * static_cast<M>(m1[i]) / denom, kSr,
                                       r.v[0]);  // addcdiv_
        store_model(model, i, p[i]);
      });
    });
  });
}

void sgd_step_cpu(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
                  const SgdStepParams& hp) {
  dispatch_dtype<kFloatingTypes>(param.dtype(), "sgd_step", param.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    sgd_range(param.data<T>(), grad.data<T>(), maybe_data<T>(momentum_buffer),
              static_cast<NoModel*>(nullptr), param.numel(), hp, hp.first_step);
  });
}

void adam_step_cpu(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                   const Tensor& exp_avg_sq, const Tensor& max_exp_avg_sq,
                   const AdamStepParams& hp) {
  dispatch_dtype<kFloatingTypes>(param.dtype(), "adam_step", param.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_state_type<T>(exp_avg.dtype(), "adam_step", [&](auto* state_tag) {
      using S = std::remove_pointer_t<decltype(state_tag)>;
      adam_range(param.data<T>(), grad.data<T>(), exp_avg.data<S>(), exp_avg_sq.data<S>(),
                 maybe_data<S>(max_exp_avg_sq), static_cast<NoModel*>(nullptr), param.numel(), hp,
                 hp.param_index);
    });
  });
}

bool skip_step(const Tensor& found_inf) {
  return found_inf.defined() && *found_inf.data<float>() != 0.0f;
}

Tensor model_at(const OptimizerTensorLists& l, size_t i) {
  return l.model.empty() ? Tensor() : l.model[i];
}

void sgd_multi_step_cpu(const OptimizerTensorLists& l, const Tensor& found_inf,
                        const SgdStepParams& hp) {
  if (skip_step(found_inf)) return;
  const bool use_momentum = hp.momentum != 0.0;
  for (size_t i = 0; i < l.param.size(); ++i) {
    const Tensor& param = l.param[i];
    int64_t& count = *l.step[i].data<int64_t>();
    dispatch_dtype<kFloatingTypes>(param.dtype(), "sgd_multi_step", param.device(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      with_model(model_at(l, i), [&](auto* model) {
        sgd_range(param.data<T>(), l.grad[i].data<T>(), maybe_data<T>(l.state[0][i]), model,
                  param.numel(), hp, count == 0);
      });
    });
    if (use_momentum) ++count;
  }
}

void adam_multi_step_cpu(const OptimizerTensorLists& l, const Tensor& found_inf,
                         const AdamStepParams& hp) {
  if (skip_step(found_inf)) return;
  for (size_t i = 0; i < l.param.size(); ++i) {
    const Tensor& param = l.param[i];
    int64_t& count = *l.step[i].data<int64_t>();
    AdamStepParams p = hp;
    p.step = count + 1;
    if (hp.lr_device != nullptr) p.lr = *hp.lr_device;
    dispatch_dtype<kFloatingTypes>(param.dtype(), "adam_multi_step", param.device(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      with_model(model_at(l, i), [&](auto* model) {
        with_state_type<T>(l.state[0][i].dtype(), "adam_multi_step", [&](auto* state_tag) {
          using S = std::remove_pointer_t<decltype(state_tag)>;
          adam_range(param.data<T>(), l.grad[i].data<T>(), l.state[0][i].data<S>(),
                     l.state[1][i].data<S>(), maybe_data<S>(l.state[2][i]), model, param.numel(), p,
                     l.index.empty() ? static_cast<int64_t>(i) : l.index[i]);
        });
      });
    });
    count = p.step;
  }
}

}  // namespace

MT_REGISTER_KERNEL(sgd_step_kernel, kCPU, &sgd_step_cpu);
MT_REGISTER_KERNEL(adam_step_kernel, kCPU, &adam_step_cpu);
MT_REGISTER_KERNEL(sgd_multi_step_kernel, kCPU, &sgd_multi_step_cpu);
MT_REGISTER_KERNEL(adam_multi_step_kernel, kCPU, &adam_multi_step_cpu);

}  // namespace mantissa::cpu
