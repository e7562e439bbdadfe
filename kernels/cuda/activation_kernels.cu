// CUDA kernels for the activations with parameters (autograd/ops/activations.cpp), the
// counterparts of kernels/cpu/activation_kernels.cpp: the same functors (kernels/functors.h)
// evaluated in opmath, half types rounded once on store.
#include "engine/kernel_tables.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/functors.h"

namespace mantissa::cuda {
namespace {

template <typename T, typename Op>
struct ActivationFn {
  opmath_t<T> p0, p1;
  MT_HOST_DEVICE T operator()(T x) const { return T(Op{}(static_cast<opmath_t<T>>(x), p0, p1)); }
};

template <typename T, typename Op>
struct ActivationBackwardFn {
  opmath_t<T> p0, p1;
  MT_HOST_DEVICE T operator()(T g, T x) const {
    using M = opmath_t<T>;
    return T(Op{}(static_cast<M>(g), static_cast<M>(x), p0, p1));
  }
};

template <typename Op>
void activation_kernel(const Tensor& out, const Tensor& in, double p0, double p1) {
  dispatch_dtype<kFloatingTypes>(out.dtype(), Op::name, out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    gpu_elementwise<T, T>(out, ActivationFn<T, Op>{static_cast<M>(p0), static_cast<M>(p1)}, in);
  });
}

template <typename Op>
void activation_backward_kernel(const Tensor& grad_in, const Tensor& grad_out, const Tensor& input,
                                double p0, double p1) {
  dispatch_dtype<kFloatingTypes>(grad_in.dtype(), Op::name, grad_in.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    gpu_elementwise<T, T, T>(grad_in,
                             ActivationBackwardFn<T, Op>{static_cast<M>(p0), static_cast<M>(p1)},
                             grad_out, input);
  });
}

}  // namespace

MT_REGISTER_KERNEL(leaky_relu_kernel, kCUDA, &activation_kernel<functors::LeakyRelu>);
MT_REGISTER_KERNEL(elu_kernel, kCUDA, &activation_kernel<functors::Elu>);
MT_REGISTER_KERNEL(softplus_kernel, kCUDA, &activation_kernel<functors::Softplus>);
MT_REGISTER_KERNEL(leaky_relu_backward_kernel, kCUDA,
                   &activation_backward_kernel<functors::LeakyReluBackward>);
MT_REGISTER_KERNEL(elu_backward_kernel, kCUDA, &activation_backward_kernel<functors::EluBackward>);
MT_REGISTER_KERNEL(softplus_backward_kernel, kCUDA,
                   &activation_backward_kernel<functors::SoftplusBackward>);

}  // namespace mantissa::cuda
