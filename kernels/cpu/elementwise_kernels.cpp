// CPU kernels for the elementwise ops: unary math, binary math, comparisons, add, where, clamp
// and the activation backwards. The math is in kernels/functors.h, shared with CUDA.
#include <algorithm>
#include <type_traits>
#include <utility>

#include "engine/factory.h"
#include "engine/kernel_tables.h"
#include "kernels/cpu/convert_dense.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/worker_pool.h"
#include "kernels/functors.h"

namespace mantissa::cpu {
namespace {

// Elements [b, e) of dense 16-bit operands of out's shape, a block at a time: the inputs are
// widened to float with the vectorised conversions (F16C when the CPU has it; exact),
// block(in, res, m) computes the block's float results from in[k] (input k), and they are rounded
// to T once on store, which is what the per-element conversions compute, without their branchy
// software rounding. `out` may alias an input: a block is read completely before it is written.
// An input that is one value (one_value(): a scalar operand broadcast to out's shape) is widened
// once and repeated.
bool one_value(const Tensor& t) {
  if (t.numel() == 1) return true;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.size(d) > 1 && t.stride(d) != 0) return false;
  return true;
}

template <typename T, typename Block, typename... Ts>
void widened_blocks(const Tensor& out, int64_t b, int64_t e, const Block& block, const Ts&... ins) {
  constexpr int64_t kBlock = 256;
  float in_buf[sizeof...(Ts)][kBlock];
  const float* in[sizeof...(Ts)];
  float res[kBlock];
  const T* src[] = {static_cast<const T*>(ins.data_ptr())...};
  const bool one[] = {one_value(ins)...};
  for (size_t k = 0; k < sizeof...(Ts); ++k) {
    in[k] = in_buf[k];
    if (one[k]) std::fill_n(in_buf[k], kBlock, static_cast<float>(src[k][0]));
  }
  T* dst = static_cast<T*>(out.data_ptr());
  for (int64_t i = b; i < e; i += kBlock) {
    const int64_t m = std::min(kBlock, e - i);
    for (size_t k = 0; k < sizeof...(Ts); ++k)
      if (!one[k]) convert_dense(src[k] + i, in_buf[k], m);
    block(in, res, m);
    convert_dense(res, dst + i, m);
  }
}

// float16 and bfloat16 math on dense, same-shape operands (or one value) through widened_blocks
// (bitwise the per-element conversions' results: convert_dense rounds as Half(float) and
// BFloat16(float) do, NaN included). Tensors big enough to split across threads keep the generic
// engine. Returns false (nothing done) when the operands do not qualify.
template <typename T, typename F, typename... Ts, size_t... I>
bool dense_16bit_impl(const Tensor& out, const F& f, std::index_sequence<I...>, const Ts&... ins) {
  const int64_t n = out.numel();
  if (n == 0 || n >= kParallelGrain || !out.is_contiguous() ||
      !(((ins.is_contiguous() && ins.shape() == out.shape()) || one_value(ins)) && ...)) {
    return false;
  }
  widened_blocks<T>(
      out, 0, n,
      [&](const float* const* in, float* res, int64_t m) {
        for (int64_t i = 0; i < m; ++i) res[i] = f(in[I][i]...);
      },
      ins...);
  return true;
}

template <typename T, typename F, typename... Ts>
bool dense_16bit(const Tensor& out, const F& f, const Ts&... ins) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return dense_16bit_impl<T>(out, f, std::index_sequence_for<Ts...>{}, ins...);
  } else {
    return false;
  }
}

// The generic kernels of the elementwise lists (engine/kernel_tables.h): any layout, any dtype
// the functor supports, half types widened to float. An op with a faster CPU path specializes
// unary_kernel/binary_kernel below and falls back to these loops.
template <typename Op>
void unary_loop(const Tensor& out, const Tensor& in) {
  dispatch_dtype<Op::dtypes>(out.dtype(), Op::name, out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    if (dense_16bit<T>(
            out, [](auto x) { return float(Op{}(x)); }, in))
      return;
    elementwise<T, T>(
        out, [](T x) { return T(Op{}(M(x))); }, in);
  });
}

template <typename Op>
void binary_loop(const Tensor& out, const Tensor& a, const Tensor& b) {
  dispatch_dtype<Op::dtypes>(out.dtype(), Op::name, out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    if (dense_16bit<T>(
            out, [](auto x, auto y) { return float(Op{}(x, y)); }, a, b))
      return;
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
      if (dense_16bit<T>(
              out, [al](auto x, auto y) { return float(x + al * y); }, a, b))
        return;
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

// GELU's math (kernels/vectorizable_math.h) is long enough for the CPU's widest vectors to pay:
// float operands run a loop compiled for each instruction set, whose AVX2 and AVX-512 copies
// contract multiply-adds into FMAs (the file is built with -ffp-contract=fast; the baseline
// x86-64 build has no FMA, so nothing else in the file changes): 40% fewer instructions than
// separate multiplies and adds. Operands of every layout go through these loops
// (run_float_loop_any_layout), so a machine gives the same bits for any layout; across machines
// the last bit may differ, as it does for attention. float64 keeps the generic loop.
MT_CPU_ISA_CLONES void gelu_dense(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = functors::Gelu{}(x[i]);
}
MT_CPU_ISA_CLONES void gelu_backward_dense(const float* g, const float* s, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = functors::GeluBackward{}(g[i], s[i]);
}

// Runs dense(inputs..., output, n) over dense operands of one floating dtype and out's shape, on
// float values: float32 in place, float16/bfloat16 through widened_blocks. Split across the
// worker pool by element range when large. Returns false (nothing done) when the operands do not
// qualify.
template <typename Dense, typename... Ts>
bool run_dense_float(const Tensor& out, Dense dense, const Ts&... ins) {
  const DType dt = out.dtype();
  if ((dt != kFloat32 && dt != kFloat16 && dt != kBFloat16) || !out.is_contiguous() ||
      !((ins.dtype() == dt && ins.is_contiguous() && ins.shape() == out.shape()) && ...)) {
    return false;
  }
  const int64_t n = out.numel();
  if (dt == kFloat32) {
    parallel_ranges(n, [&](int64_t b, int64_t e) {
      dense((static_cast<const float*>(ins.data_ptr()) + b)...,
            static_cast<float*>(out.data_ptr()) + b, e - b);
    });
    return true;
  }
  auto blocks = [&](auto tag) {
    using T = typename decltype(tag)::type;
    parallel_ranges(n, [&](int64_t b, int64_t e) {
      widened_blocks<T>(
          out, b, e,
          [&](const float* const* in, float* res, int64_t m) {
            [&]<size_t... I>(std::index_sequence<I...>) { dense(in[I]..., res, m); }
            (std::index_sequence_for<Ts...>{});
          },
          ins...);
    });
  };
  if (dt == kFloat16) {
    blocks(TypeTag<Half>{});
  } else {
    blocks(TypeTag<BFloat16>{});
  }
  return true;
}

// run_dense_float for operands of out's dtype and shape in any layout: strided ones (and a
// strided out) go through dense copies (dense operands are used as they are), so that every
// layout runs the same per-instruction-set loop and gets the same bits. Returns false (nothing
// done) for other dtypes or shapes.
template <typename Dense, typename... Ts>
bool run_float_loop_any_layout(const Tensor& out, Dense dense, const Ts&... ins) {
  const DType dt = out.dtype();
  if ((dt != kFloat32 && dt != kFloat16 && dt != kBFloat16) ||
      !((ins.dtype() == dt && ins.shape() == out.shape()) && ...)) {
    return false;
  }
  bool ran = false;
  mantissa::detail::with_dense_out(out, [&](const Tensor& o) {
    ran = run_dense_float(o, dense, mantissa::detail::dense(ins)...);
  });
  return ran;
}

template <typename Op>
void unary_kernel(const Tensor& out, const Tensor& in) {
  unary_loop<Op>(out, in);
}
template <typename Op>
void binary_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  binary_loop<Op>(out, a, b);
}
// GELU's float loops, one per instruction set.
template <>
void unary_kernel<functors::Gelu>(const Tensor& out, const Tensor& in) {
  if (!run_float_loop_any_layout(out, &gelu_dense, in)) unary_loop<functors::Gelu>(out, in);
}
template <>
void binary_kernel<functors::GeluBackward>(const Tensor& out, const Tensor& grad, const Tensor& s) {
  if (!run_float_loop_any_layout(out, &gelu_backward_dense, grad, s))
    binary_loop<functors::GeluBackward>(out, grad, s);
}

}  // namespace

#define MT_REGISTER_UNARY(name, functor) \
  MT_REGISTER_KERNEL(name##_kernel, kCPU, &unary_kernel<functors::functor>);
#define MT_REGISTER_BINARY(name, functor) \
  MT_REGISTER_KERNEL(name##_kernel, kCPU, &binary_kernel<functors::functor>);
#define MT_REGISTER_COMPARISON(name, functor) \
  MT_REGISTER_KERNEL(name##_kernel, kCPU, &comparison_kernel<functors::functor>);
MT_FORALL_UNARY_OPS(MT_REGISTER_UNARY)
MT_FORALL_BINARY_OPS(MT_REGISTER_BINARY)
MT_FORALL_ACTIVATION_BACKWARD_OPS(MT_REGISTER_BINARY)
MT_FORALL_COMPARISON_OPS(MT_REGISTER_COMPARISON)
#undef MT_REGISTER_UNARY
#undef MT_REGISTER_BINARY
#undef MT_REGISTER_COMPARISON

MT_REGISTER_KERNEL(add_kernel, kCPU, &add_kernel_cpu);
MT_REGISTER_KERNEL(where_kernel, kCPU, &where_kernel_cpu);
MT_REGISTER_KERNEL(clamp_kernel, kCPU, &clamp_kernel_cpu);

}  // namespace mantissa::cpu
