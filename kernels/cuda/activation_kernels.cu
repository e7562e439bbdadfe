// CUDA kernels of the listed activations (engine/activations.def), the counterparts of
// kernels/cpu/activation_kernels.cpp: the same formulas (engine/activation_formulas.h) evaluated
// in OpMath, half types rounded once on store.
#include "engine/activation_formulas.h"
#include "engine/activation_kernel_tables.h"
#include "engine/kernel_tables.h"
#include "kernels/cuda/loops.cuh"

namespace mantissa::cuda {
namespace {

template <typename T, typename Math>
struct ActivationFn {
  formulas::Params<opmath_t<T>> p;
  MT_HOST_DEVICE T operator()(T x) const {
    return T(Math::forward(static_cast<opmath_t<T>>(x), p));
  }
};

// grad_out * f'(input), 0 where f' is 0 (as the CPU's).
template <typename T, typename Math>
struct ActivationBackwardFn {
  formulas::Params<opmath_t<T>> p;
  MT_HOST_DEVICE T operator()(T g, T x) const {
    using M = opmath_t<T>;
    const M d = Math::template derivative<M>(static_cast<M>(x), p);
    return d == M(0) ? T(M(0)) : T(static_cast<M>(g) * d);
  }
};

template <typename Op>
void activation_kernel(const Tensor& out, const Tensor& in, double p0, double p1) {
  dispatch_dtype<kFloatingTypes>(out.dtype(), Op::name, out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    gpu_elementwise<T, T>(
        out, ActivationFn<T, typename Op::Math>{{static_cast<M>(p0), static_cast<M>(p1)}}, in);
  });
}

template <typename Op>
void activation_backward_kernel(const Tensor& grad_in, const Tensor& grad_out, const Tensor& input,
                                double p0, double p1) {
  dispatch_dtype<kFloatingTypes>(grad_in.dtype(), Op::name, grad_in.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    gpu_elementwise<T, T, T>(
        grad_in,
        ActivationBackwardFn<T, typename Op::Math>{{static_cast<M>(p0), static_cast<M>(p1)}},
        grad_out, input);
  });
}

// Each entry's kernels, over its struct of engine/activation_formulas.h.
#define MT_ACTIVATION_ENTRY(op, Module, Formulas)                                  \
  MT_REGISTER_KERNEL(op##_kernel, kCUDA, &activation_kernel<formulas::entry::op>); \
  MT_REGISTER_KERNEL(op##_backward_kernel, kCUDA, &activation_backward_kernel<formulas::entry::op>);
#include "engine/activations.def"

}  // namespace
}  // namespace mantissa::cuda
