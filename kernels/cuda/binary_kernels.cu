// CUDA kernels for the binary arithmetic ops (MT_FORALL_BINARY_OPS), add with alpha and the
// activation backwards. The math is kernels/functors.h, shared with the CPU kernels; half types
// compute in float and round once on store. Comparisons, where and clamp are in
// compare_kernels.cu (split only so that the two files compile in parallel).
#include <type_traits>

#include "engine/kernel_tables.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/functors.h"

namespace mantissa::cuda {
namespace {

template <typename T, typename Op>
struct BinaryFn {
  MT_HOST_DEVICE T operator()(T a, T b) const {
    using M = opmath_t<T>;
    return T(Op{}(static_cast<M>(a), static_cast<M>(b)));
  }
};

template <typename T>
struct AddFn {
  MT_HOST_DEVICE T operator()(T a, T b) const {
    if constexpr (std::is_same_v<T, bool>) {
      return a || b;
    } else {
      using M = opmath_t<T>;
      return T(static_cast<M>(a) + static_cast<M>(b));
    }
  }
};

template <typename T>
struct AddAlphaFn {
  opmath_t<T> alpha;
  MT_HOST_DEVICE T operator()(T a, T b) const {
    using M = opmath_t<T>;
    return T(static_cast<M>(a) + alpha * static_cast<M>(b));
  }
};

template <typename Op>
void binary_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  dispatch_dtype<Op::dtypes>(out.dtype(), Op::name, out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    gpu_elementwise<T, T, T>(out, BinaryFn<T, Op>{}, a, b);
  });
}

void add_kernel_cuda(const Tensor& out, const Tensor& a, const Tensor& b, const Scalar& alpha) {
  dispatch_dtype<kAllTypesAndBool>(out.dtype(), "add", out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    if constexpr (std::is_same_v<T, bool>) {
      gpu_elementwise<T, T, T>(out, AddFn<T>{}, a, b);
    } else {
      const M al = alpha.to<M>();
      if (al == M(1)) {
        gpu_elementwise<T, T, T>(out, AddFn<T>{}, a, b);
      } else {
        gpu_elementwise<T, T, T>(out, AddAlphaFn<T>{al}, a, b);
      }
    }
  });
}

}  // namespace

#define MT_REGISTER_BINARY(name, functor) \
  MT_REGISTER_KERNEL(name##_kernel, kCUDA, &binary_kernel<functors::functor>);
MT_FORALL_BINARY_OPS(MT_REGISTER_BINARY)
MT_FORALL_ACTIVATION_BACKWARD_OPS(MT_REGISTER_BINARY)
#undef MT_REGISTER_BINARY

MT_REGISTER_KERNEL(add_kernel, kCUDA, &add_kernel_cuda);

}  // namespace mantissa::cuda
