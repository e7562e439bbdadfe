// CPU kernels for the activations with parameters (autograd/ops/activations.cpp): leaky_relu,
// elu and softplus, with their backwards. The activations without parameters (relu, gelu, silu,
// mish, hardswish, ...) are rows of the unary op table (kernels/functors.h), run by the generic
// unary kernels. The math is in kernels/functors.h, shared with CUDA; half types compute in float
// and round once on store.
#include "engine/kernel_tables.h"
#include "kernels/cpu/loops.h"
#include "kernels/functors.h"

namespace mantissa::cpu {
namespace {

template <typename Op>
void activation_kernel(const Tensor& out, const Tensor& in, double p0, double p1) {
  dispatch_dtype<kFloatingTypes>(out.dtype(), Op::name, out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    const M a = static_cast<M>(p0), b = static_cast<M>(p1);
    elementwise<T, T>(
        out, [a, b](T x) { return T(Op{}(M(x), a, b)); }, in);
  });
}

template <typename Op>
void activation_backward_kernel(const Tensor& grad_in, const Tensor& grad_out, const Tensor& input,
                                double p0, double p1) {
  dispatch_dtype<kFloatingTypes>(grad_in.dtype(), Op::name, grad_in.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    const M a = static_cast<M>(p0), b = static_cast<M>(p1);
    elementwise<T, T, T>(
        grad_in, [a, b](T g, T x) { return T(Op{}(M(g), M(x), a, b)); }, grad_out, input);
  });
}

}  // namespace

MT_REGISTER_KERNEL(leaky_relu_kernel, kCPU, &activation_kernel<functors::LeakyRelu>);
MT_REGISTER_KERNEL(elu_kernel, kCPU, &activation_kernel<functors::Elu>);
MT_REGISTER_KERNEL(softplus_kernel, kCPU, &activation_kernel<functors::Softplus>);
MT_REGISTER_KERNEL(leaky_relu_backward_kernel, kCPU,
                   &activation_backward_kernel<functors::LeakyReluBackward>);
MT_REGISTER_KERNEL(elu_backward_kernel, kCPU, &activation_backward_kernel<functors::EluBackward>);
MT_REGISTER_KERNEL(softplus_backward_kernel, kCPU,
                   &activation_backward_kernel<functors::SoftplusBackward>);

}  // namespace mantissa::cpu
