// CUDA kernels for the pointwise ops of autograd/ops/pointwise.cpp, the counterparts of
// kernels/cpu/pointwise_kernels.cpp (the class tests, lerp, addcmul; floor_divide, remainder and
// fmod are in binary_kernels.cu): the same functors (kernels/functors.h) evaluated in opmath, half
// types rounded once on store.
#include "engine/kernel_tables.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/functors.h"

namespace mantissa::cuda {
namespace {

template <typename T, typename Op>
struct PredicateFn {
  MT_HOST_DEVICE bool operator()(T x) const { return Op{}(static_cast<opmath_t<T>>(x)); }
};

template <typename T>
struct LerpScalarFn {
  opmath_t<T> weight;
  MT_HOST_DEVICE T operator()(T s, T e) const {
    using M = opmath_t<T>;
    return T(functors::lerp_of(static_cast<M>(s), static_cast<M>(e), weight));
  }
};

template <typename T>
struct LerpFn {
  MT_HOST_DEVICE T operator()(T s, T e, T w) const {
    using M = opmath_t<T>;
    return T(functors::lerp_of(static_cast<M>(s), static_cast<M>(e), static_cast<M>(w)));
  }
};

template <typename T>
struct AddcmulFn {
  opmath_t<T> value;
  MT_HOST_DEVICE T operator()(T s, T x, T y) const {
    using M = opmath_t<T>;
    return T(static_cast<M>(s) + value * static_cast<M>(x) * static_cast<M>(y));
  }
};

template <typename Op>
void predicate_kernel(const Tensor& out, const Tensor& in) {
  dispatch_dtype<Op::dtypes>(in.dtype(), Op::name, in.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    gpu_elementwise<bool, T>(out, PredicateFn<T, Op>{}, in);
  });
}

void lerp_kernel_cuda(const Tensor& out, const Tensor& start, const Tensor& end,
                      const Tensor& weight, double scalar_weight) {
  dispatch_dtype<kFloatingTypes>(out.dtype(), "lerp", out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    if (weight.defined()) {
      gpu_elementwise<T, T, T, T>(out, LerpFn<T>{}, start, end, weight);
    } else {
      gpu_elementwise<T, T, T>(out, LerpScalarFn<T>{static_cast<M>(scalar_weight)}, start, end);
    }
  });
}

void addcmul_kernel_cuda(const Tensor& out, const Tensor& self, const Tensor& t1, const Tensor& t2,
                         const Scalar& value) {
  dispatch_dtype<kAllTypes>(out.dtype(), "addcmul", out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    gpu_elementwise<T, T, T, T>(out, AddcmulFn<T>{value.to<M>()}, self, t1, t2);
  });
}

}  // namespace

#define MT_REGISTER_PREDICATE(name, functor) \
  MT_REGISTER_KERNEL(name##_kernel, kCUDA, &predicate_kernel<functors::functor>);
MT_FORALL_PREDICATE_OPS(MT_REGISTER_PREDICATE)
#undef MT_REGISTER_PREDICATE
MT_REGISTER_KERNEL(lerp_kernel, kCUDA, &lerp_kernel_cuda);
MT_REGISTER_KERNEL(addcmul_kernel, kCUDA, &addcmul_kernel_cuda);

}  // namespace mantissa::cuda
