// Per-slice scans and sorting, shared by the CPU kernels (kernels/cpu/scan_sort_kernels.cpp) and
// the CUDA ones (kernels/cuda/scan_sort_kernels.cu), so both devices give the same bits: a slice
// is the run of elements along `dim` at one position of the other dims, and one call (one CPU
// iteration, one GPU thread) handles one slice serially, in input order.
//
// Floating scans accumulate in double and integer ones in int64 (PyTorch's CPU accumulation
// types), rounding each output once. Sorting is a bottom-up merge sort of positions: stable, no
// recursion, and its scratch space is the caller's, which a GPU thread cannot allocate.
#pragma once

#include <cstdint>
#include <type_traits>

#include "engine/convert.h"
#include "engine/half.h"
#include "engine/macros.h"
#include "engine/tensor.h"
#include "kernels/reduce_plan.h"

namespace mantissa {

template <typename T>
inline constexpr bool is_float_storage_v =
    std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// The accumulator of a scan over T.
template <typename T>
using ScanAcc = std::conditional_t<is_float_storage_v<T>, double, int64_t>;

// The slices of `in` along `dim`: every other dim, with in's and out's element strides (out may
// be laid out differently), so slices.offsets(s, in_off, out_off) finds slice s.
inline ReduceDims make_slices(const Tensor& out, const Tensor& in, int64_t dim) {
  ReduceDims s;
  for (int64_t d = 0; d < in.dim(); ++d) {
    if (d == dim) continue;
    s.size[s.ndim] = in.size(d);
    s.in_stride[s.ndim] = in.stride(d);
    s.out_stride[s.ndim] = out.stride(d);
    ++s.ndim;
  }
  return s;
}

// out[k * os] = in[0] op ... op in[k] (reverse: from the end; exclusive: without in[k]).
template <typename T, bool Prod>
MT_HOST_DEVICE inline void scan_slice(T* out, int64_t os, const T* in, int64_t is, int64_t n,
                                      bool reverse, bool exclusive) {
  using Acc = ScanAcc<T>;
  Acc acc = Prod ? Acc(1) : Acc(0);
  for (int64_t j = 0; j < n; ++j) {
    const int64_t k = reverse ? n - 1 - j : j;
    const Acc v = convert<Acc>(in[k * is]);
    if (exclusive) out[k * os] = convert<T>(acc);
    if constexpr (Prod) {
      acc *= v;
    } else {
      acc += v;
    }
    if (!exclusive) out[k * os] = convert<T>(acc);
  }
}

// Gradient of y = cumprod(x) along one slice. dy_k/dx_i = y_k / x_i for i <= k needs care where x
// has zeros. With z the first zero (n if none):
//   i < z: sum_{k>=i} g_k y_k / x_i (x_i != 0, and y_k = 0 for k >= z);
//   i = z: sum_{k>=z} g_k * y_{z-1} * x_{z+1} ... x_k (the product without x_z);
//   i > z: 0 (every y_k with k >= i keeps the factor x_z = 0).
template <typename T>
MT_HOST_DEVICE inline void cumprod_backward_slice(T* gx, int64_t gxs, const T* g, int64_t gs,
                                                  const T* x, int64_t xs, const T* y, int64_t ys,
                                                  int64_t n) {
  int64_t z = n;
  for (int64_t k = 0; k < n; ++k) {
    if (convert<double>(x[k * xs]) == 0.0) {
      z = k;
      break;
    }
  }
  double tail = 0.0;  // sum_{k>=i} g_k y_k, built from the end
  for (int64_t i = n - 1; i >= 0; --i) {
    tail += convert<double>(g[i * gs]) * convert<double>(y[i * ys]);
    if (i > z) gx[i * gxs] = convert<T>(0.0);
    if (i < z) gx[i * gxs] = convert<T>(tail / convert<double>(x[i * xs]));
  }
  if (z < n) {
    double run = z > 0 ? convert<double>(y[(z - 1) * ys]) : 1.0, sum = 0.0;
    for (int64_t k = z; k < n; ++k) {
      if (k > z) run *= convert<double>(x[k * xs]);
      sum += convert<double>(g[k * gs]) * run;
    }
    gx[z * gxs] = convert<T>(sum);
  }
}

// Whether a goes before b: NaN above every number, so last ascending and first descending.
template <typename M>
MT_HOST_DEVICE inline bool sorts_before(M a, M b, bool descending) {
  const bool a_nan = a != a, b_nan = b != b;
  if (descending) return (a_nan && !b_nan) || a > b;
  return (b_nan && !a_nan) || a < b;
}

// Sorts positions 0..n-1 of the slice in[0], in[is], ... by value into `order` (n entries), using
// `scratch` (n entries). Stable: a merge takes from the right run only when it sorts strictly
// before the left one.
template <typename T>
MT_HOST_DEVICE inline void sort_slice(int64_t* order, int64_t* scratch, const T* in, int64_t is,
                                      int64_t n, bool descending) {
  using M = opmath_t<T>;
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  int64_t* src = order;
  int64_t* dst = scratch;
  for (int64_t width = 1; width < n; width *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * width) {
      const int64_t mid = lo + width < n ? lo + width : n;
      const int64_t hi = lo + 2 * width < n ? lo + 2 * width : n;
      int64_t a = lo, b = mid, o = lo;
      while (a < mid && b < hi) {
        const M va = static_cast<M>(in[src[a] * is]), vb = static_cast<M>(in[src[b] * is]);
        dst[o++] = sorts_before(vb, va, descending) ? src[b++] : src[a++];
      }
      while (a < mid) dst[o++] = src[a++];
      while (b < hi) dst[o++] = src[b++];
    }
    int64_t* t = src;
    src = dst;
    dst = t;
  }
  if (src != order)
    for (int64_t i = 0; i < n; ++i) order[i] = src[i];
}

}  // namespace mantissa
