// CPU kernels for the optimizer steps: SGD and Adam/AdamW first, then RMSprop, Adagrad, NAdam
// and RAdam.
//
// SGD and Adam/AdamW, per parameter and multi-tensor.
//
// Each kernel is one pass over a parameter's elements that reads the gradient and state and
// writes the parameter and state back. The per-element arithmetic (sgd_element, adam_element
// of kernels/optimizer_math.h, which the CUDA kernels share) follows PyTorch's
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
//
// RMSprop, Adagrad, NAdam and RAdam (multi-tensor only). The per-element math is shared with
// CUDA (kernels/optimizer_math.h); here each parameter's loop is split across the worker
// pool (elementwise, so the result does not depend on the split). found_inf and the step counts
// are host memory on the CPU, so reading them costs nothing. Under master weights the rounded
// parameter is written in the same pass.
#include <cmath>
#include <type_traits>

#include "engine/dispatch.h"
#include "engine/optimizer_kernel_tables.h"
#include "engine/philox.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/worker_pool.h"
#include "kernels/optimizer_math.h"

namespace mantissa::cpu {
namespace {

namespace om = optim_math;
using optim_math::with_state_type;
using optim_math::with_static_bool;

inline constexpr uint32_t kModelTypes = dtype_bit(DType::Float16) | dtype_bit(DType::BFloat16);

// Calls f(consts, i) for i in [0, n), split across the worker pool for large tensors
// (elementwise, so the result does not depend on the split). The pool's threads do not spin once
// done, which matters here: the update sits between the backward's GEMMs and the next forward's.
// Each range gets its own copy of the step's constant factors: stores through the parameter and
// state pointers cannot alias a local, so the factors stay in registers (read through a reference
// they are reloaded after every store, and the loop runs slower).
template <typename C, typename F>
void parallel_range(int64_t n, const C& consts, const F& f) {
  parallel_ranges(n, [&](int64_t begin, int64_t end) {
    const C c = consts;
    for (int64_t i = begin; i < end; ++i) f(c, i);
  });
}

using optim_math::NoModel;

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

template <typename T, typename Md>
void sgd_range(T* p, const T* g, T* buf, Md* model, int64_t n, const SgdStepParams& hp,
               bool first) {
  const auto c = optim_math::sgd_consts<opmath_t<T>>(hp);
  // The momentum buffer's stores are in the loop only when there is one; the other options are
  // selects, which the compiler turns into blends, so every variant vectorises.
  with_static_bool(c.use_momentum, [&](auto use_momentum) {
    parallel_range(n, c, [=](const auto& k, int64_t i) {
      optim_math::sgd_element(k, use_momentum, first, p, g, buf, model, i);
    });
  });
}

template <typename T, typename S, typename Md>
void adam_range(T* p, const T* g, S* m1, S* m2, S* mx, Md* model, int64_t n,
                const AdamStepParams& hp, int64_t param_index) {
  auto c = optim_math::adam_consts<opmath_t<T>>(hp);
  optim_math::adam_set_step(c, static_cast<double>(hp.step));
  const uint64_t key = hp.stochastic_rounding
                           ? optim_math::stochastic_rounding_key(hp.sr_seed, param_index, hp.step)
                           : 0;
  // As in sgd_range: only the max_exp_avg_sq store depends on an option at compile time, and
  // stochastic rounding, which draws random bits per element.
  with_static_bool(c.amsgrad, [&](auto use_amsgrad) {
    with_static_bool(hp.stochastic_rounding, [&](auto stochastic) {
      constexpr bool kSr = decltype(stochastic)::value;
      parallel_range(n, c, [=](const auto& k, int64_t i) {
        optim_math::adam_element<T, S, kSr>(k, use_amsgrad, key, p, g, m1, m2, mx, model, i);
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

// Runs `update(i)` for every element of parameter e, then writes the rounded copy into the
// float16/bfloat16 model parameter when there is one.
template <typename T, typename F>
void for_elements(const OptimizerTensorLists& l, size_t e, const F& update) {
  const Tensor& param = l.param[e];
  const Tensor model = model_at(l, e);
  const int64_t n = param.numel();
  T* p = param.data<T>();
  if (!model.defined()) {
    parallel_ranges(n, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) update(i);
    });
    return;
  }
  dispatch_dtype<kModelTypes>(model.dtype(), "optimizer_step (master weights)", model.device(),
                              [&](auto tag) {
                                using Md = typename decltype(tag)::type;
                                Md* m = model.data<Md>();
                                parallel_ranges(n, [&](int64_t begin, int64_t end) {
                                  for (int64_t i = begin; i < end; ++i) {
                                    update(i);
                                    m[i] = static_cast<Md>(p[i]);
                                  }
                                });
                              });
}

// The shared driver: skips everything when found_inf is set; otherwise, per parameter, advances
// the count and calls per_param(tag, e, step) with the parameter's dtype.
template <typename F>
void for_each_param(const OptimizerTensorLists& l, const Tensor& found_inf, const char* op,
                    const F& per_param) {
  if (skip_step(found_inf)) return;
  for (size_t e = 0; e < l.param.size(); ++e) {
    int64_t& count = *l.step[e].data<int64_t>();
    const int64_t step = count + 1;
    dispatch_dtype<kFloatingTypes>(l.param[e].dtype(), op, l.param[e].device(),
                                   [&](auto tag) { per_param(tag, e, static_cast<double>(step)); });
    count = step;
  }
}

void rmsprop_multi_step_cpu(const OptimizerTensorLists& l, const Tensor& found_inf,
                            const RmspropStepParams& hp) {
  for_each_param(l, found_inf, "rmsprop_multi_step", [&](auto tag, size_t e, double) {
    using T = typename decltype(tag)::type;
    const auto c = om::rmsprop_consts<opmath_t<T>>(hp);
    T* p = l.param[e].data<T>();
    const T* g = l.grad[e].data<T>();
    T* sq = l.state[0][e].data<T>();
    T* buf = maybe_data<T>(l.state[1][e]);
    T* ga = maybe_data<T>(l.state[2][e]);
    for_elements<T>(l, e, [&](int64_t i) { om::rmsprop_element(c, p, g, sq, buf, ga, i); });
  });
}

void adagrad_multi_step_cpu(const OptimizerTensorLists& l, const Tensor& found_inf,
                            const AdagradStepParams& hp) {
  for_each_param(l, found_inf, "adagrad_multi_step", [&](auto tag, size_t e, double step) {
    using T = typename decltype(tag)::type;
    auto c = om::adagrad_consts<opmath_t<T>>(hp);
    om::adagrad_set_step(c, step);
    T* p = l.param[e].data<T>();
    const T* g = l.grad[e].data<T>();
    T* sum = l.state[0][e].data<T>();
    for_elements<T>(l, e, [&](int64_t i) { om::adagrad_element(c, p, g, sum, i); });
  });
}

void nadam_multi_step_cpu(const OptimizerTensorLists& l, const Tensor& found_inf,
                          const NadamStepParams& hp) {
  for_each_param(l, found_inf, "nadam_multi_step", [&](auto tag, size_t e, double step) {
    using T = typename decltype(tag)::type;
    auto c = om::nadam_consts<opmath_t<T>>(hp);
    float* mu_product = l.state[2][e].data<float>();
    om::nadam_advance_mu_product(c, step, mu_product);
    om::nadam_set_step(c, step, *mu_product);
    T* p = l.param[e].data<T>();
    const T* g = l.grad[e].data<T>();
    T* m1 = l.state[0][e].data<T>();
    T* m2 = l.state[1][e].data<T>();
    for_elements<T>(l, e, [&](int64_t i) { om::nadam_element(c, p, g, m1, m2, i); });
  });
}

void radam_multi_step_cpu(const OptimizerTensorLists& l, const Tensor& found_inf,
                          const RadamStepParams& hp) {
  for_each_param(l, found_inf, "radam_multi_step", [&](auto tag, size_t e, double step) {
    using T = typename decltype(tag)::type;
    auto c = om::radam_consts<opmath_t<T>>(hp);
    om::radam_set_step(c, step);
    T* p = l.param[e].data<T>();
    const T* g = l.grad[e].data<T>();
    T* m1 = l.state[0][e].data<T>();
    T* m2 = l.state[1][e].data<T>();
    for_elements<T>(l, e, [&](int64_t i) { om::radam_element(c, p, g, m1, m2, i); });
  });
}

}  // namespace

MT_REGISTER_KERNEL(sgd_step_kernel, kCPU, &sgd_step_cpu);
MT_REGISTER_KERNEL(adam_step_kernel, kCPU, &adam_step_cpu);
MT_REGISTER_KERNEL(sgd_multi_step_kernel, kCPU, &sgd_multi_step_cpu);
MT_REGISTER_KERNEL(adam_multi_step_kernel, kCPU, &adam_multi_step_cpu);
MT_REGISTER_KERNEL(rmsprop_multi_step_kernel, kCPU, &rmsprop_multi_step_cpu);
MT_REGISTER_KERNEL(adagrad_multi_step_kernel, kCPU, &adagrad_multi_step_cpu);
MT_REGISTER_KERNEL(nadam_multi_step_kernel, kCPU, &nadam_multi_step_cpu);
MT_REGISTER_KERNEL(radam_multi_step_kernel, kCPU, &radam_multi_step_cpu);

}  // namespace mantissa::cpu
