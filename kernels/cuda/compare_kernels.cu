// CUDA kernels for the comparisons (MT_FORALL_COMPARISON_OPS), where and clamp. Comparisons
// and clamp evaluate in opmath, as on the CPU (kernels/cpu/elementwise_kernels.cpp).
#include "engine/kernel_tables.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/functors.h"

namespace mantissa::cuda {
namespace {

template <typename T, typename Op>
struct ComparisonFn {
  MT_HOST_DEVICE bool operator()(T a, T b) const {
    using M = opmath_t<T>;
    return Op{}(static_cast<M>(a), static_cast<M>(b));
  }
};

template <typename T>
struct WhereFn {
  MT_HOST_DEVICE T operator()(bool c, T a, T b) const { return c ? a : b; }
};

template <typename T>
struct ClampFn {
  using M = opmath_t<T>;
  M lo, hi;
  bool has_lo, has_hi;
  MT_HOST_DEVICE T operator()(T x) const {
    M v = static_cast<M>(x);
    if (functors::is_nan_value(v)) return x;
    if (has_lo && v < lo) v = lo;
    if (has_hi && v > hi) v = hi;
    return T(v);
  }
};

template <typename Op>
void comparison_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  dispatch_dtype<Op::dtypes>(a.dtype(), Op::name, a.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    gpu_elementwise<bool, T, T>(out, ComparisonFn<T, Op>{}, a, b);
  });
}

void where_kernel_cuda(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  dispatch_dtype<kAllTypesAndBool>(out.dtype(), "where", out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    gpu_elementwise<T, bool, T, T>(out, WhereFn<T>{}, cond, a, b);
  });
}

void clamp_kernel_cuda(const Tensor& out, const Tensor& in, const Scalar* lo, const Scalar* hi) {
  dispatch_dtype<kAllTypes>(out.dtype(), "clamp", out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    const ClampFn<T> fn{lo ? lo->to<M>() : M(0), hi ? hi->to<M>() : M(0), lo != nullptr,
                        hi != nullptr};
    gpu_elementwise<T, T>(out, fn, in);
  });
}

}  // namespace

#define MT_REGISTER_COMPARISON(name, functor) \
  MT_REGISTER_KERNEL(name##_kernel, kCUDA, &comparison_kernel<functors::functor>);
MT_FORALL_COMPARISON_OPS(MT_REGISTER_COMPARISON)
#undef MT_REGISTER_COMPARISON

MT_REGISTER_KERNEL(where_kernel, kCUDA, &where_kernel_cuda);
MT_REGISTER_KERNEL(clamp_kernel, kCUDA, &clamp_kernel_cuda);

}  // namespace mantissa::cuda
