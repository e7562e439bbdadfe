// The operand layout of an elementwise loop, built on the host and shared by the CPU and CUDA
// engines (kernels/cpu/loops.h, kernels/cuda/loops.cuh): N operands described by byte strides
// over one shared shape (broadcast operands have stride 0). Size-1 dims are dropped and an outer
// dim is merged into its inner neighbour where every operand steps over the neighbour's whole
// extent, but dims are never reordered, so a linear index over the layout is the row-major index
// of the shape on both devices (the random kernels rely on that to give the same numbers).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>

#include "engine/tensor.h"

namespace mantissa {

template <int N>
struct Layout {
  int ndim = 0;  // after merging, >= 1
  int64_t numel = 1;
  int64_t sizes[kMaxDims] = {};       // outermost dim first
  int64_t strides[N][kMaxDims] = {};  // bytes, per operand, outermost dim first
  char* base[N] = {};

  Layout(const Shape& shape, const std::array<const Tensor*, N>& ts) {
    for (int k = 0; k < N; ++k) base[k] = static_cast<char*>(ts[k]->data_ptr());
    for (int64_t d = 0; d < shape.size(); ++d) {
      if (shape[d] == 1) continue;
      int64_t s[N];
      for (int k = 0; k < N; ++k) s[k] = ts[k]->stride(d) * ts[k]->element_size();
      if (ndim > 0) {
        bool merge = true;
        for (int k = 0; k < N; ++k) merge = merge && strides[k][ndim - 1] == s[k] * shape[d];
        if (merge) {
          sizes[ndim - 1] *= shape[d];
          for (int k = 0; k < N; ++k) strides[k][ndim - 1] = s[k];
          continue;
        }
      }
      sizes[ndim] = shape[d];
      for (int k = 0; k < N; ++k) strides[k][ndim] = s[k];
      ++ndim;
    }
    if (ndim == 0) {  // a single element: any stride works, the element size keeps it dense()
      sizes[0] = 1;
      for (int k = 0; k < N; ++k) strides[k][0] = ts[k]->element_size();
      ndim = 1;
    }
    numel = 1;
    for (int d = 0; d < ndim; ++d) numel *= sizes[d];
  }

  // True when every operand is one run of adjacent elements of the given byte sizes.
  bool dense(const std::array<int64_t, N>& elem_sizes) const {
    if (ndim != 1) return false;
    for (int k = 0; k < N; ++k)
      if (strides[k][0] != elem_sizes[k]) return false;
    return true;
  }

  // True when every element index and byte offset fits in int32.
  bool fits_int32() const {
    constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
    if (numel > kMax) return false;
    for (int k = 0; k < N; ++k) {
      int64_t extent = 0;
      for (int d = 0; d < ndim; ++d) {
        if (strides[k][d] < 0) return false;
        extent += (sizes[d] - 1) * strides[k][d];
      }
      if (extent > kMax) return false;
    }
    return true;
  }

  // Calls loop(ptrs, inner_strides, n) over the runs along the innermost dim that cover linear
  // elements [begin, end). Each run's start is stepped from the previous run's, not recomputed
  // from all the counters.
  template <typename Loop>
  void for_each_run(int64_t begin, int64_t end, Loop&& loop) const {
    const int inner = ndim - 1;
    int64_t counter[kMaxDims];
    int64_t rest = begin / sizes[inner];
    int64_t pos = begin % sizes[inner];
    for (int d = inner - 1; d >= 0; --d) {
      counter[d] = rest % sizes[d];
      rest /= sizes[d];
    }
    int64_t inner_strides[N];
    char* row[N];  // where the current run's row starts (its element 0 along the inner dim)
    for (int k = 0; k < N; ++k) {
      inner_strides[k] = strides[k][inner];
      row[k] = base[k];
      for (int d = 0; d < inner; ++d) row[k] += counter[d] * strides[k][d];
    }
    while (begin < end) {
      char* ptrs[N];
      for (int k = 0; k < N; ++k) ptrs[k] = row[k] + pos * inner_strides[k];
      const int64_t n = std::min(sizes[inner] - pos, end - begin);
      loop(ptrs, inner_strides, n);
      begin += n;
      pos = 0;
      for (int d = inner - 1; d >= 0; --d) {
        if (++counter[d] < sizes[d]) {
          for (int k = 0; k < N; ++k) row[k] += strides[k][d];
          break;
        }
        counter[d] = 0;
        for (int k = 0; k < N; ++k) row[k] -= (sizes[d] - 1) * strides[k][d];
      }
    }
  }
};

}  // namespace mantissa
