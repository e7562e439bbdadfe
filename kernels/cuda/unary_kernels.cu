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

#define MT_REGISTER_UNARY(name, Functor) \
  MT_REGISTER_KERNEL(name##_kernel, kCUDA, &unary_kernel<functors::Functor>);
MT_REGISTER_UNARY(neg, Neg)
MT_REGISTER_UNARY(abs, Abs)
MT_REGISTER_UNARY(exp, Exp)
MT_REGISTER_UNARY(log, Log)
MT_REGISTER_UNARY(sqrt, Sqrt)
MT_REGISTER_UNARY(rsqrt, Rsqrt)
MT_REGISTER_UNARY(relu, Relu)
MT_REGISTER_UNARY(sigmoid, Sigmoid)
MT_REGISTER_UNARY(tanh, Tanh)
MT_REGISTER_UNARY(silu, Silu)
MT_REGISTER_UNARY(gelu, Gelu)
MT_REGISTER_UNARY(gelu_tanh, GeluTanh)
MT_REGISTER_UNARY(sign, Sign)
MT_REGISTER_UNARY(reciprocal, Reciprocal)
MT_REGISTER_UNARY(sin, Sin)
MT_REGISTER_UNARY(cos, Cos)
MT_REGISTER_UNARY(log1p, Log1p)
MT_REGISTER_UNARY(expm1, Expm1)
MT_REGISTER_UNARY(square, Square)
#undef MT_REGISTER_UNARY

}  // namespace mantissa::cuda
