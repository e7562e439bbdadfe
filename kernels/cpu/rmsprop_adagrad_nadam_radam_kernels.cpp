// CPU kernels for the RMSprop, Adagrad, NAdam and RAdam steps. The per-element math is shared
// with CUDA (kernels/optimizer_math.h); here each parameter's loop is split across the worker
// pool (elementwise, so the result does not depend on the split). found_inf and the step counts
// are host memory on the CPU, so reading them costs nothing. Under master weights the rounded
// parameter is written in the same pass.
#include <type_traits>

#include "engine/dispatch.h"
#include "engine/kernel_tables.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/worker_pool.h"
#include "kernels/optimizer_math.h"

namespace mantissa::cpu {
namespace {

namespace om = optim_math;

// Runs `update(i)` for every element of parameter e, then writes the rounded copy into the
// float16/bfloat16 model parameter when there is one.
template <typename T, typename F>
void for_elements(const OptimizerTensorLists& l, size_t e, const F& update) {
  const Tensor& param = l.param[e];
  const Tensor model = l.model.empty() ? Tensor() : l.model[e];
  const int64_t n = param.numel();
  T* p = param.data<T>();
  if (!model.defined()) {
    parallel_ranges(n, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) update(i);
    });
    return;
  }
  constexpr uint32_t kModelTypes = dtype_bit(DType::Float16) | dtype_bit(DType::BFloat16);
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
  if (found_inf.defined() && *found_inf.data<float>() != 0.0f) return;
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

MT_REGISTER_KERNEL(rmsprop_multi_step_kernel, kCPU, &rmsprop_multi_step_cpu);
MT_REGISTER_KERNEL(adagrad_multi_step_kernel, kCPU, &adagrad_multi_step_cpu);
MT_REGISTER_KERNEL(nadam_multi_step_kernel, kCPU, &nadam_multi_step_cpu);
MT_REGISTER_KERNEL(radam_multi_step_kernel, kCPU, &radam_multi_step_cpu);

}  // namespace mantissa::cpu
