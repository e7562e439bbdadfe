// CPU reductions: sum, prod, mean, amax/amin, any/all, all_finite, var, norm, and max/min along
// a dim.
//
// They all run on one engine, reduce(), over the plan of kernels/reduce_plan.h (size-1 dims
// dropped, innermost memory dim last, neighbours of the same kind merged). Then:
//  - innermost dim reduced (sum of everything, softmax-style rows): every output folds a run of
//    adjacent elements, in several independent lanes so the adds pipeline;
//  - innermost dim kept (sum over the batch of [N, C], the bias gradient): a tile of outputs
//    accumulates side by side while the input is read row by row.
// Rows longer than kChunk are folded in fixed chunks whose partials merge in order, and threads
// only ever split whole outputs or whole chunks, so results never depend on the thread count.
//
// Accumulation: floating sums (sum, mean, var, norms) run in double, also for float32 and the
// half types, so 1e5-element float32 sums stay within float32 rounding of the exact value.
// Integer and bool sums run in int64 and write int64: the sum kernel reads in.dtype() and expects
// out.dtype() == in.dtype() for floating inputs and int64 for integral/bool ones (the op casts
// for any other requested dtype). max/min compare in opmath and propagate NaN like PyTorch.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "engine/factory.h"
#include "engine/kernel_tables.h"
#include "kernels/cpu/loops.h"
#include "kernels/reduce_plan.h"

namespace mantissa::cpu {
namespace {

constexpr int64_t kChunk = 32768;   // elements folded by one task of a long reduction
constexpr int64_t kMaxTile = 4096;  // outputs accumulated together when the inner dim is kept
constexpr int kLanes = 8;           // independent accumulators over a contiguous run

// body(i) for i in [0, n), split over threads when `threads`. Not `#pragma omp parallel for if`:
// a false `if` still enters libgomp and runs a one-thread team, which costs a small reduction
// (the bias gradient of a tiny layer) more than the reduction itself.
template <typename F>
void for_range(int64_t n, bool threads, const F& body) {
#if defined(_OPENMP)
  if (threads) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
#else
  (void)threads;
#endif
  for (int64_t i = 0; i < n; ++i) body(i);
}

// Width of the tiles a kept inner dim of `vsize` is cut into: wide, so each input row is read in
// long runs (narrow tiles stride across pages), but narrow enough to give every thread a tile.
// Tiles only partition the outputs, so the width never changes a result.
int64_t tile_width(int64_t vsize, int64_t outer, bool threads) {
  int64_t tile = std::min(vsize, kMaxTile);
#if defined(_OPENMP)
  const int64_t want = threads ? omp_get_max_threads() : 1;
  if (outer * ((vsize + tile - 1) / tile) < want) {
    const int64_t per_outer = (want + outer - 1) / outer;
    tile = std::max<int64_t>(64, (vsize + per_outer - 1) / per_outer);
  }
#endif
  return tile;
}

// Folds n elements p[0], p[s], ... (reduction indices r0, r0+1, ...) into acc.
template <typename Op, typename In>
inline void fold_run(const Op& op, typename Op::Acc& acc, const In* p, int64_t s, int64_t n,
                     int64_t r0) {
  using Acc = typename Op::Acc;
  int64_t i = 0;
  if (n >= 4 * kLanes) {
    Acc lane[kLanes];
    for (int k = 0; k < kLanes; ++k) lane[k] = op.init();
    if (s == 1) {
      for (; i + kLanes <= n; i += kLanes)
        for (int k = 0; k < kLanes; ++k) op.step(lane[k], p[i + k], r0 + i + k);
    } else {
      for (; i + kLanes <= n; i += kLanes)
        for (int k = 0; k < kLanes; ++k) op.step(lane[k], p[(i + k) * s], r0 + i + k);
    }
    for (int k = 0; k < kLanes; ++k) op.merge(acc, lane[k]);
  }
  for (; i < n; ++i) op.step(acc, p[i * s], r0 + i);
}

// Folds reduction indices [rb, re) of the output whose first input element is `base`.
template <typename Op, typename In>
typename Op::Acc fold_range(const Op& op, const ReduceDims& red, const In* base, int64_t rb,
                            int64_t re) {
  typename Op::Acc acc = op.init();
  if (rb >= re) return acc;  // also covers reductions over a size-0 dim
  if (red.ndim == 0) {
    op.step(acc, base[0], 0);
    return acc;
  }
  const int inner = red.ndim - 1;
  int64_t counter[kMaxDims];
  int64_t rest = rb / red.size[inner], pos = rb % red.size[inner];
  for (int d = inner - 1; d >= 0; --d) {
    counter[d] = rest % red.size[d];
    rest /= red.size[d];
  }
  while (rb < re) {
    const In* p = base + pos * red.in_stride[inner];
    for (int d = 0; d < inner; ++d) p += counter[d] * red.in_stride[d];
    const int64_t n = std::min(red.size[inner] - pos, re - rb);
    fold_run(op, acc, p, red.in_stride[inner], n, rb);
    rb += n;
    pos = 0;
    for (int d = inner - 1; d >= 0; --d) {
      if (++counter[d] < red.size[d]) break;
      counter[d] = 0;
    }
  }
  return acc;
}

// A whole output: chunked when long, chunks optionally spread over threads.
template <typename Op, typename In>
typename Op::Acc fold_output(const Op& op, const ReduceDims& red, const In* base, int64_t nr,
                             bool parallel_chunks) {
  if (nr <= kChunk) return fold_range(op, red, base, 0, nr);
  const int64_t chunks = (nr + kChunk - 1) / kChunk;
  std::vector<typename Op::Acc> partial(chunks);
  for_range(chunks, parallel_chunks, [&](int64_t c) {
    partial[c] = fold_range(op, red, base, c * kChunk, std::min(nr, (c + 1) * kChunk));
  });
  typename Op::Acc acc = partial[0];
  for (int64_t c = 1; c < chunks; ++c) op.merge(acc, partial[c]);
  return acc;
}

// Reduces `in` into the keepdim-form `layout` tensor; store(out_offset, acc) writes a result at
// an element offset of `layout` (an op with two outputs of one layout writes both).
template <typename In, typename Op, typename Store>
void reduce(const Tensor& layout, const Tensor& in, const Op& op, const Store& store) {
  if (layout.numel() == 0) return;
  const ReducePlan plan = make_reduce_plan(layout, in);
  const In* src = static_cast<const In*>(in.data_ptr());
  const int64_t nk = plan.nk, nr = plan.nr;
  const bool threads = use_threads(nk * std::max<int64_t>(nr, 1));

  if (plan.inner_reduced) {
    if (nk == 1) {
      store(0, fold_output(op, plan.red, src, nr, threads));
      return;
    }
    for_range(nk, threads, [&](int64_t o) {
      int64_t in_off, out_off;
      plan.kept.offsets(o, in_off, out_off);
      store(out_off, fold_output(op, plan.red, src + in_off, nr, false));
    });
    return;
  }

  // Innermost dim kept: tiles of it accumulate together, one reduction row at a time.
  ReduceDims outer = plan.kept;
  const int v = --outer.ndim;
  const int64_t vsize = plan.kept.size[v], vis = plan.kept.in_stride[v];
  const int64_t vos = plan.kept.out_stride[v];
  const int64_t tile = tile_width(vsize, outer.numel(), threads);
  const int64_t tiles = (vsize + tile - 1) / tile, items = outer.numel() * tiles;
  for_range(items, threads, [&](int64_t item) {
    const int64_t j0 = (item % tiles) * tile, n = std::min(tile, vsize - j0);
    int64_t in_off, out_off;
    outer.offsets(item / tiles, in_off, out_off);
    const In* base = src + in_off + j0 * vis;
    // (not a std::vector: Acc may be bool)
    const std::unique_ptr<typename Op::Acc[]> acc(new typename Op::Acc[n]);
    for (int64_t j = 0; j < n; ++j) acc[j] = op.init();
    for (int64_t r = 0; r < nr; ++r) {
      int64_t r_off, unused;
      plan.red.offsets(r, r_off, unused);
      const In* p = base + r_off;
      if (vis == 1) {
        for (int64_t j = 0; j < n; ++j) op.step(acc[j], p[j], r);
      } else {
        for (int64_t j = 0; j < n; ++j) op.step(acc[j], p[j * vis], r);
      }
    }
    for (int64_t j = 0; j < n; ++j) store(out_off + (j0 + j) * vos, acc[j]);
  });
}

template <typename T>
constexpr bool is_float_type_v =
    std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

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
template <typename T>
struct SumOp {
  using Acc = std::conditional_t<is_float_type_v<T>, double, int64_t>;
  Acc init() const { return 0; }
  void step(Acc& a, T x, int64_t) const { a += static_cast<Acc>(static_cast<opmath_t<T>>(x)); }
  void merge(Acc& a, const Acc& b) const { a += b; }
};

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

// Welford's running mean and M2, with Chan's formula to merge partials.
struct Welford {
  double n = 0, mean = 0, m2 = 0;
};
template <typename T>
struct VarOp {
  using Acc = Welford;
  Acc init() const { return {}; }
  void step(Acc& a, T x, int64_t) const {
    const double v = static_cast<opmath_t<T>>(x);
    a.n += 1;
    const double d = v - a.mean;
    a.mean += d / a.n;
    a.m2 += d * (v - a.mean);
  }
  void merge(Acc& a, const Acc& b) const {
    if (b.n == 0) return;
    if (a.n == 0) {
      a = b;
      return;
    }
    const double n = a.n + b.n, d = b.mean - a.mean;
    a.mean += d * (b.n / n);
    a.m2 += b.m2 + d * d * (a.n * b.n / n);
    a.n = n;
  }
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

void norm_cpu(const Tensor& out, const Tensor& in, double p) {
  dispatch_dtype<kFloatingTypes>(in.dtype(), "norm", in.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
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
MT_REGISTER_KERNEL(norm_kernel, kCPU, &norm_cpu);
MT_REGISTER_KERNEL(max_dim_kernel, kCPU, &arg_extremum_cpu<true>);
MT_REGISTER_KERNEL(min_dim_kernel, kCPU, &arg_extremum_cpu<false>);

}  // namespace mantissa::cpu
