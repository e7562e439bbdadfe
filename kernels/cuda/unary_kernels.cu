// CUDA kernels for the unary math ops (MT_FORALL_UNARY_OPS). The math is the functors of
// kernels/functors.h, the same code the CPU runs; half types compute in float and round once.
#include "engine/kernel_tables.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/functors.h"

namespace mantissa::cuda {
namespace {

template <typename T, typename Op>
struct UnaryFn {
  MT_HOST_DEVICE T operator()(T x) const { return T(Op{}(static_cast<opmath_t<T>>(x))); }
};

template <typename Op>
void unary_kernel(const Tensor& out, const Tensor& in) {
  dispatch_dtype<Op::dtypes>(out.dtype(), Op::name, out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    gpu_elementwise<T, T>(out, UnaryFn<T, Op>{}, in);
  });
}

}  // namespace

MT_REGISTER_KERNEL(neg_kernel, kCUDA, &unary_kernel<functors::Neg>);
MT_REGISTER_KERNEL(abs_kernel, kCUDA, &unary_kernel<functors::Abs>);
MT_REGISTER_KERNEL(exp_kernel, kCUDA, &unary_kernel<functors::Exp>);
MT_REGISTER_KERNEL(log_kernel, kCUDA, &unary_kernel<functors::Log>);
MT_REGISTER_KERNEL(sqrt_kernel, kCUDA, &unary_kernel<functors::Sqrt>);
MT_REGISTER_KERNEL(rsqrt_kernel, kCUDA, &unary_kernel<functors::Rsqrt>);
MT_REGISTER_KERNEL(relu_kernel, kCUDA, &unary_kernel<functors::Relu>);
MT_REGISTER_KERNEL(sigmoid_kernel, kCUDA, &unary_kernel<functors::Sigmoid>);
MT_REGISTER_KERNEL(tanh_kernel, kCUDA, &unary_kernel<functors::Tanh>);
MT_REGISTER_KERNEL(silu_kernel, kCUDA, &unary_kernel<functors::Silu>);
MT_REGISTER_KERNEL(gelu_kernel, kCUDA, &unary_kernel<functors::Gelu>);
MT_REGISTER_KERNEL(gelu_tanh_kernel, kCUDA, &unary_kernel<functors::GeluTanh>);
MT_REGISTER_KERNEL(sign_kernel, kCUDA, &unary_kernel<functors::Sign>);
MT_REGISTER_KERNEL(reciprocal_kernel, kCUDA, &unary_kernel<functors::Reciprocal>);
MT_REGISTER_KERNEL(sin_kernel, kCUDA, &unary_kernel<functors::Sin>);
MT_REGISTER_KERNEL(cos_kernel, kCUDA, &unary_kernel<functors::Cos>);
MT_REGISTER_KERNEL(log1p_kernel, kCUDA, &unary_kernel<functors::Log1p>);
MT_REGISTER_KERNEL(expm1_kernel, kCUDA, &unary_kernel<functors::Expm1>);
MT_REGISTER_KERNEL(square_kernel, kCUDA, &unary_kernel<functors::Square>);

}  // namespace mantissa::cuda
