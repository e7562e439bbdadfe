// CPU reductions: sum, prod, mean, amax/amin, any/all, all_finite, var, norm, and max/min
// along a dim, all on the engine of kernels/cpu/reduce.h.
//
// Accumulation: floating sums (sum, mean, var, norms) run in double, also for float32 and the
// half types, so 1e5-element float32 sums stay within float32 rounding of the exact value.
// Integer and bool sums run in int64 and write int64: the sum kernel reads in.dtype() and expects
// out.dtype() == in.dtype() for floating inputs and int64 for integral/bool ones (the op casts
// for any other requested dtype). max/min compare in opmath and propagate NaN like PyTorch.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "engine/factory.h"
#include "engine/kernel_tables.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cpu/worker_pool.h"
#include "kernels/reduce_plan.h"

namespace mantissa::cpu {
namespace {

using namespace reduce_engine;  // NOLINT: the engine and its folds, shared with norm_kernels.cpp

template <typename M>
constexpr M lowest_value() {
  if constexpr (std::numeric_limits<M>::has_infinity) return -std::numeric_limits<M>::infinity();
  return std::numeric_limits<M>::lowest();
}
template <typename M>
constexpr M highest_value() {
  if constexpr (std::numeric_limits<M>::has_infinity) return std::numeric_limits<M>::infinity();
  return std::numeric_limits<M>::max();
}
template <typename M>
inline bool is_nan(M v) {
  if constexpr (std::is_floating_point_v<M>) return std::isnan(v);
  return false;
}

// ---- the fold operations ------------------------------------------------------------------------
template <typename T, bool IsMax>
struct ExtremumOp {
  using Acc = opmath_t<T>;
  Acc init() const { return IsMax ? lowest_value<Acc>() : highest_value<Acc>(); }
  // NaN wins and then sticks: once a is NaN no comparison replaces it.
  void step(Acc& a, T x, int64_t) const { fold(a, static_cast<Acc>(x)); }
  void merge(Acc& a, const Acc& b) const { fold(a, b); }
  static void fold(Acc& a, Acc x) {
    // A select rather than a branch, so the lanes of fold_run vectorise.
    a = ((IsMax ? x > a : x < a) | is_nan(x)) ? x : a;
  }
};

// x * 0 is NaN exactly for inf and NaN, so a plain (vectorisable) sum detects both.
template <typename T>
struct NonFiniteOp {
  using Acc = opmath_t<T>;
  Acc init() const { return 0; }
  void step(Acc& a, T x, int64_t) const { a += static_cast<Acc>(x) * Acc(0); }
  void merge(Acc& a, const Acc& b) const { a += b; }
};

// Norms. Sums of |x|^p run in double; max/min |x| in opmath with NaN propagation.
template <typename T, NormKind K>
struct NormOp {
  using Acc = std::conditional_t<K == NormKind::Inf || K == NormKind::NegInf, opmath_t<T>, double>;
  double p = 2.0;
  Acc init() const { return K == NormKind::NegInf ? highest_value<Acc>() : Acc(0); }
  void step(Acc& a, T x, int64_t) const {
    const opmath_t<T> v = static_cast<opmath_t<T>>(x);
    if constexpr (K == NormKind::Zero) a += v != 0 ? 1.0 : 0.0;
    if constexpr (K == NormKind::One) a += std::fabs(double(v));
    if constexpr (K == NormKind::Two) a += double(v) * double(v);
    if constexpr (K == NormKind::General) a += std::pow(std::fabs(double(v)), p);
    if constexpr (K == NormKind::Inf || K == NormKind::NegInf) merge(a, std::fabs(v));
  }
  void merge(Acc& a, const Acc& b) const {
    if constexpr (K == NormKind::Inf) {
      ExtremumOp<Acc, true>::fold(a, b);
    } else if constexpr (K == NormKind::NegInf) {
      ExtremumOp<Acc, false>::fold(a, b);
    } else {
      a += b;
    }
  }
  double finish(Acc a) const {
    if constexpr (K == NormKind::Two) return std::sqrt(a);
    if constexpr (K == NormKind::General) return std::pow(a, 1.0 / p);
    return a;
  }
};

// Value and index of the max (min): the first index wins ties, and the first NaN beats all.
template <typename T, bool IsMax>
struct ArgExtremumOp {
  using M = opmath_t<T>;
  struct Acc {
    M v;
    int64_t i;
  };
  Acc init() const { return {M(0), -1}; }
  static bool better(M x, M v) { return (IsMax ? x > v : x < v) || (is_nan(x) && !is_nan(v)); }
  void step(Acc& a, T x, int64_t r) const {
    const M v = static_cast<M>(x);
    if (a.i < 0 || better(v, a.v)) a = {v, r};
  }
  // Lanes interleave indices, so ties are settled by index, not by merge order.
  void merge(Acc& a, const Acc& b) const {
    if (b.i < 0) return;
    const bool tie = b.v == a.v || (is_nan(b.v) && is_nan(a.v));
    if (a.i < 0 || better(b.v, a.v) || (tie && b.i < a.i)) a = b;
  }
};

// Products: floating ones in double (as the sums), integer and bool ones in int64.
template <typename T>
struct ProdOp {
  using Acc = std::conditional_t<is_float_type_v<T>, double, int64_t>;
  Acc init() const { return 1; }
  void step(Acc& a, T x, int64_t) const { a *= static_cast<Acc>(static_cast<opmath_t<T>>(x)); }
  void merge(Acc& a, const Acc& b) const { a *= b; }
};

// any (IsAll false) and all: whether some (every) element is non-zero; NaN counts as non-zero.
template <typename T, bool IsAll>
struct LogicOp {
  using Acc = bool;
  Acc init() const { return IsAll; }
  void step(Acc& a, T x, int64_t) const {
    const bool nz = static_cast<opmath_t<T>>(x) != opmath_t<T>(0);
    a = IsAll ? (a && nz) : (a || nz);
  }
  void merge(Acc& a, const Acc& b) const { a = IsAll ? (a && b) : (a || b); }
};

// ---- kernels ------------------------------------------------------------------------------------
template <typename T>
T* out_ptr(const Tensor& out) {
  return static_cast<T*>(out.data_ptr());
}

void sum_cpu(const Tensor& out, const Tensor& in) {
  dispatch_dtype<kAllTypesAndBool>(in.dtype(), "sum", in.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Out = std::conditional_t<is_float_type_v<T>, T, int64_t>;
    MT_ASSERT(out.dtype() == dtype_of_v<Out>, "sum: kernel writes ", dtype_of_v<Out>, " for ",
              in.dtype(), " input, got out ", out.dtype());
    Out* o = out_ptr<Out>(out);
    reduce<T>(out, in, SumOp<T>{}, [o](int64_t off, auto acc) { o[off] = Out(acc); });
  });
}

void mean_cpu(const Tensor& out, const Tensor& in) {
  dispatch_dtype<kFloatingTypes>(in.dtype(), "mean", in.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out_ptr<T>(out);
    const double count = out.numel() == 0 ? 1.0 : double(in.numel()) / double(out.numel());
    reduce<T>(out, in, SumOp<T>{},
              [o, count](int64_t off, double acc) { o[off] = T(acc / count); });
  });
}

template <bool IsMax>
void extremum_cpu(const Tensor& out, const Tensor& in) {
  dispatch_dtype<kAllTypesAndBool>(in.dtype(), IsMax ? "amax" : "amin", in.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out_ptr<T>(out);
    reduce<T>(out, in, ExtremumOp<T, IsMax>{}, [o](int64_t off, auto acc) { o[off] = T(acc); });
  });
}

void all_finite_cpu(const Tensor& out, const Tensor& in) {
  bool* o = out_ptr<bool>(out);
  // Every dim is reduced, whatever out's shape: view the one element as in's keepdim form.
  const Tensor layout = mantissa::detail::make_view(out, Shape(in.dim(), 1), Shape(in.dim(), 0),
                                                    out.storage_offset());
  dispatch_dtype<kAllTypesAndBool>(in.dtype(), "all_finite", in.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!is_float_type_v<T>) {
      o[0] = true;
    } else {
      o[0] = true;  // an empty input has nothing non-finite
      reduce<T>(layout, in, NonFiniteOp<T>{}, [o](int64_t, auto acc) { o[0] = !is_nan(acc); });
    }
  });
}

// out is in's dtype, or float32 for half inputs (std takes the root before rounding to half).
void var_cpu(const Tensor& out, const Tensor& in, int64_t correction) {
  dispatch_dtype<kFloatingTypes>(in.dtype(), "var", in.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto run = [&](auto* o) {
      using Out = std::remove_pointer_t<decltype(o)>;
      reduce<T>(out, in, VarOp<T>{}, [o, correction](int64_t off, const Welford& a) {
        // PyTorch divides by max(0, N - correction): 0/0 gives NaN, m2/0 gives inf.
        const double divisor = std::max(0.0, a.n - double(correction));
        o[off] = Out(a.m2 / divisor);
      });
    };
    if (out.dtype() == in.dtype()) {
      run(out_ptr<T>(out));
    } else {
      MT_ASSERT(is_reduced_float(in.dtype()) && out.dtype() == kFloat32, "var: out dtype ",
                out.dtype(), " for input ", in.dtype());
      run(out_ptr<float>(out));
    }
  });
}

template <typename T, NormKind K>
void norm_impl(const Tensor& out, const Tensor& in, double p) {
  T* o = out_ptr<T>(out);
  const NormOp<T, K> op{p};
  reduce<T>(out, in, op, [o, &op](int64_t off, auto acc) { o[off] = T(op.finish(acc)); });
}

// max |x| of n float32 or bfloat16 values, as the largest magnitude bit pattern: for values of
// one sign the bits order as the values do, and a NaN's magnitude bits are above infinity's, so
// a NaN anywhere gives a NaN (as the engine's fold does). An integer max vectorises (x86-64-v4
// copy), where the engine's per-element fold does not.
#define MT_MAX_MAGNITUDE(T, Bits, mask)                                                        \
  MT_CPU_V4_CLONES Bits max_magnitude(const T* p, int64_t n) {                                 \
    Bits m = 0;                                                                                \
    for (int64_t i = 0; i < n; ++i) m = std::max<Bits>(m, std::bit_cast<Bits>(p[i]) & (mask)); \
    return m;                                                                                  \
  }                                                                                            \
  MT_CPU_V4_CLONES void max_magnitude_columns(Bits* acc, const T* p, int64_t n) {              \
    for (int64_t i = 0; i < n; ++i)                                                            \
      acc[i] = std::max<Bits>(acc[i], std::bit_cast<Bits>(p[i]) & (mask));                     \
  }
MT_MAX_MAGNITUDE(float, uint32_t, 0x7fffffffu)
MT_MAX_MAGNITUDE(BFloat16, uint16_t, uint16_t{0x7fff})
#undef MT_MAX_MAGNITUDE

// The infinity norm of a dense tensor over all of it, over its last dim, or (a matrix) over its
// rows, for float32 and bfloat16 (the float8 scales' maxima): false for any other case.
template <typename T, typename Bits>
bool max_magnitude_norm(const Tensor& out, const Tensor& in) {
  if (!in.is_contiguous() || !out.is_contiguous() || in.dim() == 0 || in.numel() == 0) return false;
  const int64_t n = in.numel(), last = in.size(-1);
  const T* src = in.data<T>();
  T* o = out.data<T>();
  bool keeps_all_but_last = out.size(-1) == 1;
  for (int64_t d = 0; d + 1 < in.dim(); ++d)
    keeps_all_but_last = keeps_all_but_last && out.size(d) == in.size(d);
  if (out.numel() == 1) {
    std::atomic<Bits> m{0};
    parallel_ranges(n, [&](int64_t b, int64_t e) {
      const Bits part = max_magnitude(src + b, e - b);
      Bits seen = m.load();
      while (part > seen && !m.compare_exchange_weak(seen, part)) {
      }
    });
    o[0] = std::bit_cast<T>(m.load());
    return true;
  }
  if (keeps_all_but_last) {
    parallel_ranges(
        n / last,
        [&](int64_t b, int64_t e) {
          for (int64_t r = b; r < e; ++r)
            o[r] = std::bit_cast<T>(max_magnitude(src + r * last, last));
        },
        n);
    return true;
  }
  if (in.dim() == 2 && out.size(0) == 1 && out.size(1) == last) {
    parallel_ranges(
        last,
        [&](int64_t b, int64_t e) {
          std::vector<Bits> acc(static_cast<size_t>(e - b), 0);
          for (int64_t r = 0; r < in.size(0); ++r)
            max_magnitude_columns(acc.data(), src + r * last + b, e - b);
          for (int64_t c = b; c < e; ++c) o[c] = std::bit_cast<T>(acc[c - b]);
        },
        n);
    return true;
  }
  return false;
}

void vector_norm_cpu(const Tensor& out, const Tensor& in, double p) {
  dispatch_dtype<kFloatingTypes>(in.dtype(), "norm", in.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, BFloat16>) {
      using Bits = std::conditional_t<std::is_same_v<T, float>, uint32_t, uint16_t>;
      if (p == std::numeric_limits<double>::infinity() && max_magnitude_norm<T, Bits>(out, in))
        return;
    }
    with_norm_kind(p, [&](auto kind) { norm_impl<T, decltype(kind)::value>(out, in, p); });
  });
}

template <bool IsMax>
void arg_extremum_cpu(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t dim) {
  MT_ASSERT(values.shape() == indices.shape() && values.strides() == indices.strides(),
            "max_dim/min_dim: values and indices must share one layout");
  MT_ASSERT(in.dim() == 0 || (values.size(dim) == 1 && values.numel() * in.size(dim) == in.numel()),
            "max_dim/min_dim: values of shape ", values.shape(), " do not reduce ", in.shape(),
            " along dim ", dim);
  int64_t* idx = out_ptr<int64_t>(indices);
  dispatch_dtype<kAllTypesAndBool>(in.dtype(), IsMax ? "max" : "min", in.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Op = ArgExtremumOp<T, IsMax>;
    T* v = out_ptr<T>(values);
    // Only `dim` is reduced, so the engine's reduction index is the position along it.
    reduce<T>(values, in, Op{}, [v, idx](int64_t off, const typename Op::Acc& a) {
      v[off] = T(a.v);
      idx[off] = a.i;
    });
  });
}

void prod_cpu(const Tensor& out, const Tensor& in) {
  dispatch_dtype<kAllTypesAndBool>(in.dtype(), "prod", in.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Out = std::conditional_t<is_float_type_v<T>, T, int64_t>;
    MT_ASSERT(out.dtype() == dtype_of_v<Out>, "prod: kernel writes ", dtype_of_v<Out>, " for ",
              in.dtype(), " input, got out ", out.dtype());
    Out* o = out_ptr<Out>(out);
    reduce<T>(out, in, ProdOp<T>{}, [o](int64_t off, auto acc) { o[off] = Out(acc); });
  });
}

template <bool IsAll>
void logic_cpu(const Tensor& out, const Tensor& in) {
  MT_ASSERT(out.dtype() == (in.dtype() == kUInt8 ? kUInt8 : kBool), IsAll ? "all" : "any", ": out ",
            out.dtype(), " for input ", in.dtype());
  dispatch_dtype<kAllTypesAndBool>(in.dtype(), IsAll ? "all" : "any", in.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (out.dtype() == kUInt8) {
      uint8_t* o = out_ptr<uint8_t>(out);
      reduce<T>(out, in, LogicOp<T, IsAll>{}, [o](int64_t off, bool acc) { o[off] = acc; });
    } else {
      bool* o = out_ptr<bool>(out);
      reduce<T>(out, in, LogicOp<T, IsAll>{}, [o](int64_t off, bool acc) { o[off] = acc; });
    }
  });
}

}  // namespace

MT_REGISTER_KERNEL(prod_kernel, kCPU, &prod_cpu);
MT_REGISTER_KERNEL(any_kernel, kCPU, &logic_cpu<false>);
MT_REGISTER_KERNEL(all_kernel, kCPU, &logic_cpu<true>);
MT_REGISTER_KERNEL(sum_kernel, kCPU, &sum_cpu);
MT_REGISTER_KERNEL(mean_kernel, kCPU, &mean_cpu);
MT_REGISTER_KERNEL(amax_kernel, kCPU, &extremum_cpu<true>);
MT_REGISTER_KERNEL(amin_kernel, kCPU, &extremum_cpu<false>);
MT_REGISTER_KERNEL(all_finite_kernel, kCPU, &all_finite_cpu);
MT_REGISTER_KERNEL(var_kernel, kCPU, &var_cpu);
MT_REGISTER_KERNEL(vector_norm_kernel, kCPU, &vector_norm_cpu);
MT_REGISTER_KERNEL(max_dim_kernel, kCPU, &arg_extremum_cpu<true>);
MT_REGISTER_KERNEL(min_dim_kernel, kCPU, &arg_extremum_cpu<false>);

}  // namespace mantissa::cpu
