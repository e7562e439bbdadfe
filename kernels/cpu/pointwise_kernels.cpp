// CPU kernels for the pointwise ops of autograd/ops/pointwise.cpp: the floating-point class tests
// (MT_FORALL_PREDICATE_OPS), lerp and addcmul; floor_divide, remainder and fmod are binary ops of
// MT_FORALL_BINARY_OPS (elementwise_kernels.cpp). The math is in kernels/functors.h, shared with
// CUDA; half types compute in float and round once on store.
#include "engine/kernel_tables.h"
#include "kernels/cpu/loops.h"
#include "kernels/functors.h"

namespace mantissa::cpu {
namespace {

template <typename Op>
void predicate_kernel(const Tensor& out, const Tensor& in) {
  dispatch_dtype<Op::dtypes>(in.dtype(), Op::name, in.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    elementwise<bool, T>(
        out, [](T x) { return Op{}(M(x)); }, in);
  });
}

void lerp_kernel_cpu(const Tensor& out, const Tensor& start, const Tensor& end,
                     const Tensor& weight, double scalar_weight) {
  dispatch_dtype<kFloatingTypes>(out.dtype(), "lerp", out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    if (weight.defined()) {
      elementwise<T, T, T, T>(
          out, [](T s, T e, T w) { return T(functors::lerp_of(M(s), M(e), M(w))); }, start, end,
          weight);
    } else {
      const M w = static_cast<M>(scalar_weight);
      elementwise<T, T, T>(
          out, [w](T s, T e) { return T(functors::lerp_of(M(s), M(e), w)); }, start, end);
    }
  });
}

void addcmul_kernel_cpu(const Tensor& out, const Tensor& self, const Tensor& t1, const Tensor& t2,
                        const Scalar& value) {
  dispatch_dtype<kAllTypes>(out.dtype(), "addcmul", out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    const M v = value.to<M>();
    elementwise<T, T, T, T>(
        out, [v](T s, T x, T y) { return T(M(s) + v * M(x) * M(y)); }, self, t1, t2);
  });
}

}  // namespace

#define MT_REGISTER_PREDICATE(name, functor) \
  MT_REGISTER_KERNEL(name##_kernel, kCPU, &predicate_kernel<functors::functor>);
MT_FORALL_PREDICATE_OPS(MT_REGISTER_PREDICATE)
#undef MT_REGISTER_PREDICATE
MT_REGISTER_KERNEL(lerp_kernel, kCPU, &lerp_kernel_cpu);
MT_REGISTER_KERNEL(addcmul_kernel, kCPU, &addcmul_kernel_cpu);

}  // namespace mantissa::cpu
