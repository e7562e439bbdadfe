// CPU kernels for the elementwise ops: unary math, binary math, comparisons, add, where, clamp
// and the activation backwards. The math is in kernels/functors.h, shared with CUDA.
#include "engine/kernel_tables.h"
#include "kernels/cpu/loops.h"
#include "kernels/functors.h"

namespace mantissa::cpu {
namespace {

template <typename Op>
void unary_kernel(const Tensor& out, const Tensor& in) {
  dispatch_dtype<Op::dtypes>(out.dtype(), Op::name, out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    elementwise<T, T>(
        out, [](T x) { return T(Op{}(M(x))); }, in);
  });
}

template <typename Op>
void binary_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  dispatch_dtype<Op::dtypes>(out.dtype(), Op::name, out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    elementwise<T, T, T>(
        out, [](T x, T y) { return T(Op{}(M(x), M(y))); }, a, b);
  });
}

template <typename Op>
void comparison_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  dispatch_dtype<Op::dtypes>(a.dtype(), Op::name, a.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    elementwise<bool, T, T>(
        out, [](T x, T y) { return Op{}(M(x), M(y)); }, a, b);
  });
}

void add_kernel_cpu(const Tensor& out, const Tensor& a, const Tensor& b, const Scalar& alpha) {
  dispatch_dtype<kAllTypesAndBool>(out.dtype(), "add", out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    if constexpr (std::is_same_v<T, bool>) {
      elementwise<T, T, T>(
          out, [](T x, T y) { return x || y; }, a, b);
    } else {
      const M al = alpha.to<M>();
      if (al == M(1)) {
        elementwise<T, T, T>(
            out, [](T x, T y) { return T(M(x) + M(y)); }, a, b);
      } else {
        elementwise<T, T, T>(
            out, [al](T x, T y) { return T(M(x) + al * M(y)); }, a, b);
      }
    }
  });
}

void where_kernel_cpu(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  dispatch_dtype<kAllTypesAndBool>(out.dtype(), "where", out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    elementwise<T, bool, T, T>(
        out, [](bool c, T x, T y) { return c ? x : y; }, cond, a, b);
  });
}

void clamp_kernel_cpu(const Tensor& out, const Tensor& in, const Scalar* lo, const Scalar* hi) {
  dispatch_dtype<kAllTypes>(out.dtype(), "clamp", out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    const bool has_lo = lo != nullptr, has_hi = hi != nullptr;
    const M l = has_lo ? lo->to<M>() : M(0), h = has_hi ? hi->to<M>() : M(0);
    elementwise<T, T>(
        out,
        [=](T x) {
          M v = M(x);
          if (functors::is_nan_value(v)) return x;
          if (has_lo && v < l) v = l;
          if (has_hi && v > h) v = h;
          return T(v);
        },
        in);
  });
}

}  // namespace

#define MT_REGISTER_UNARY(name, Functor) \
  MT_REGISTER_KERNEL(name##_kernel, kCPU, &unary_kernel<functors::Functor>);
MT_FORALL_UNARY_FUNCTORS(MT_REGISTER_UNARY)
#undef MT_REGISTER_UNARY

#define MT_REGISTER_BINARY(name, Functor) \
  MT_REGISTER_KERNEL(name##_kernel, kCPU, &binary_kernel<functors::Functor>);
MT_FORALL_BINARY_FUNCTORS(MT_REGISTER_BINARY)
#undef MT_REGISTER_BINARY

#define MT_REGISTER_COMPARISON(name, Functor) \
  MT_REGISTER_KERNEL(name##_kernel, kCPU, &comparison_kernel<functors::Functor>);
MT_FORALL_COMPARISON_FUNCTORS(MT_REGISTER_COMPARISON)
#undef MT_REGISTER_COMPARISON

MT_REGISTER_KERNEL(add_kernel, kCPU, &add_kernel_cpu);
MT_REGISTER_KERNEL(where_kernel, kCPU, &where_kernel_cpu);
MT_REGISTER_KERNEL(clamp_kernel, kCPU, &clamp_kernel_cpu);

}  // namespace mantissa::cpu
