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

#define MT_REGISTER_UNARY(name, functor) \
  MT_REGISTER_KERNEL(name##_kernel, kCUDA, &unary_kernel<functors::functor>);
MT_FORALL_UNARY_OPS(MT_REGISTER_UNARY)
#undef MT_REGISTER_UNARY

}  // namespace mantissa::cuda
