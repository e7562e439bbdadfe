// The CPU reduction engine, reduce(), and the folds other kernels reuse (sums, Welford's
// variance); kernels/cpu/reduce_kernels.cpp holds the reduction ops built on it, and
// kernels/cpu/norm_kernels.cpp the batch/group/RMS norm statistics.
//
// reduce() walks the plan of kernels/reduce_plan.h (size-1 dims dropped, innermost memory dim
// last, neighbours of the same kind merged). Then:
//  - innermost dim reduced (sum of everything, softmax-style rows): every output folds a run of
//    adjacent elements, in several independent lanes so the adds pipeline;
//  - innermost dim kept (sum over the batch of [N, C], the bias gradient): a tile of outputs
//    accumulates side by side while the input is read row by row.
// Rows longer than kChunk are folded in fixed chunks whose partials merge in order, and threads
// only ever split whole outputs or whole chunks, so results never depend on the thread count.
//
// An Op supplies Acc, init(), step(acc, x, r) with r the row-major index over the reduced dims,
// and merge(acc, other).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "engine/tensor.h"
#include "kernels/cpu/loops.h"
#include "kernels/reduce_plan.h"

namespace mantissa::cpu::reduce_engine {

inline constexpr int64_t kChunk = 32768;  // elements folded by one task of a long reduction
inline constexpr int64_t kMaxTile =
    4096;                         // outputs accumulated together when the inner dim is kept
inline constexpr int kLanes = 8;  // independent accumulators over a contiguous run

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
inline int64_t tile_width(int64_t vsize, int64_t outer, bool threads) {
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

// ---- folds shared with other kernels ---------------------------------------------------------
template <typename T>
struct SumOp {
  using Acc = std::conditional_t<is_float_type_v<T>, double, int64_t>;
  Acc init() const { return 0; }
  void step(Acc& a, T x, int64_t) const { a += static_cast<Acc>(static_cast<opmath_t<T>>(x)); }
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

}  // namespace mantissa::cpu::reduce_engine
