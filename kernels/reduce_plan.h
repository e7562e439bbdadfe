// How a reduction walks its input, shared by the CPU engine (kernels/cpu/reduce_kernels.cpp)
// and the CUDA one (kernels/cuda/reduce.cuh).
//
// `out` is in keepdim form: a dim is reduced where out's size is 1 and in's is not. The plan
// drops size-1 dims, orders the rest by input stride (innermost memory dim last) and merges
// neighbours of the same kind (kept or reduced) where the strides allow.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "engine/macros.h"
#include "engine/tensor.h"

namespace mantissa {

// A set of dims (kept or reduced), outer to inner, with element strides in `in` and `out`.
struct ReduceDims {
  int ndim = 0;
  int64_t size[kMaxDims] = {};
  int64_t in_stride[kMaxDims] = {};
  int64_t out_stride[kMaxDims] = {};

  int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < ndim; ++d) n *= size[d];
    return n;
  }
  // Element offsets of the element with row-major index `i` over these dims.
  MT_HOST_DEVICE void offsets(int64_t i, int64_t& in_off, int64_t& out_off) const {
    in_off = 0;
    out_off = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      int64_t c = i;
      if (d > 0) {  // the outermost dim needs no division
        const int64_t q = i / size[d];
        c = i - q * size[d];
        i = q;
      }
      in_off += c * in_stride[d];
      out_off += c * out_stride[d];
    }
  }
};

struct ReducePlan {
  ReduceDims kept, red;
  int64_t nk = 1, nr = 1;  // outputs, and elements folded into each
  bool inner_reduced = true;
};

inline ReducePlan make_reduce_plan(const Tensor& out, const Tensor& in) {
  struct D {
    int64_t size, is, os;
    bool red;
  };
  D ds[kMaxDims];
  int n = 0;
  for (int64_t d = 0; d < in.dim(); ++d) {
    if (in.size(d) == 1) continue;
    const bool red = out.size(d) == 1;
    ds[n++] = {in.size(d), in.stride(d), red ? 0 : out.stride(d), red};
  }
  // Innermost memory dim last (stable: equal strides keep their logical order).
  std::stable_sort(ds, ds + n,
                   [](const D& a, const D& b) { return std::abs(a.is) > std::abs(b.is); });
  D merged[kMaxDims];
  int m = 0;
  for (int i = 0; i < n; ++i) {
    if (m > 0) {
      D& p = merged[m - 1];
      if (p.red == ds[i].red && p.is == ds[i].is * ds[i].size && p.os == ds[i].os * ds[i].size) {
        p.size *= ds[i].size;
        p.is = ds[i].is;
        p.os = ds[i].os;
        continue;
      }
    }
    merged[m++] = ds[i];
  }
  ReducePlan plan;
  for (int i = 0; i < m; ++i) {
    ReduceDims& s = merged[i].red ? plan.red : plan.kept;
    s.size[s.ndim] = merged[i].size;
    s.in_stride[s.ndim] = merged[i].is;
    s.out_stride[s.ndim] = merged[i].os;
    ++s.ndim;
  }
  plan.nk = plan.kept.numel();
  plan.nr = plan.red.numel();
  plan.inner_reduced = m == 0 || merged[m - 1].red;
  return plan;
}

// Which p-norm a reduction computes: the special cases have their own accumulators. The one
// mapping from p to a kind, for the CPU and the CUDA norm kernels.
enum class NormKind { Zero, One, Two, Inf, NegInf, General };

// Calls fn(std::integral_constant<NormKind, K>{}) with the kind of `p`.
template <typename Fn>
void with_norm_kind(double p, Fn&& fn) {
  using K = NormKind;
  if (p == 2.0) {
    fn(std::integral_constant<K, K::Two>{});
  } else if (p == 1.0) {
    fn(std::integral_constant<K, K::One>{});
  } else if (p == 0.0) {
    fn(std::integral_constant<K, K::Zero>{});
  } else if (std::isinf(p)) {
    if (p > 0) {
      fn(std::integral_constant<K, K::Inf>{});
    } else {
      fn(std::integral_constant<K, K::NegInf>{});
    }
  } else {
    fn(std::integral_constant<K, K::General>{});
  }
}

}  // namespace mantissa
