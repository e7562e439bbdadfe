// The CUDA reduction engine shared by kernels/cuda/reduce_kernels.cu and arg_reduce_kernels.cu,
// the counterpart of reduce() in kernels/cpu/reduce_kernels.cpp.
//
// `out` is in keepdim form: a dim is reduced where out's size is 1 and in's is not. The host
// drops size-1 dims, orders the rest by input stride (innermost memory dim last) and merges
// neighbours of the same kind, exactly like the CPU plan. Then one of two kernels runs:
//  - block per output (the common case): the block's threads stride over the reduced elements,
//    so neighbouring threads read neighbouring memory when the innermost dim is reduced, and the
//    per-thread partials meet in a shared-memory tree;
//  - thread per output, for reductions of at most kSerialMax elements (x.sum(-1) of [N, 2], a
//    bias gradient over a tiny batch): each thread folds its output serially.
// Deliberately simple: no split of one output across blocks, so a single output of a huge
// reduction runs on one block (one SM); reductions are not the bottleneck of training.
//
// An Op supplies Acc (a trivial type: it lives in __shared__ memory), init(), step(acc, x, r)
// with r the row-major index over the reduced dims (the position along `dim` when only one dim
// is reduced), merge(acc, other) and store(out_element_offset, acc).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "engine/tensor.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_guard.h"
#include "kernels/cuda/loops.cuh"

namespace mantissa::cuda {

inline constexpr int kReduceBlock = 256;   // threads of a block-per-output reduction (pow of 2)
inline constexpr int64_t kSerialMax = 32;  // up to this many elements, a thread per output

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

template <typename In, typename Op>
__global__ void __launch_bounds__(kReduceBlock)
    reduce_block_kernel(ReducePlan plan, const In* in, Op op) {
  using Acc = typename Op::Acc;
  __shared__ Acc partial[kReduceBlock];
  const int tid = threadIdx.x;
  // Every thread of a block runs the same iterations, so the barriers below are uniform.
  for (int64_t o = blockIdx.x; o < plan.nk; o += gridDim.x) {
    int64_t base = 0, out_off = 0;
    plan.kept.offsets(o, base, out_off);
    Acc acc = op.init();
    for (int64_t r = tid; r < plan.nr; r += blockDim.x) {
      int64_t in_off = 0, unused = 0;
      plan.red.offsets(r, in_off, unused);
      op.step(acc, in[base + in_off], r);
    }
    partial[tid] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
      if (tid < s) op.merge(partial[tid], partial[tid + s]);
      __syncthreads();
    }
    if (tid == 0) op.store(out_off, partial[0]);
    __syncthreads();  // partial[0] is read before the next output overwrites it
  }
}

template <typename In, typename Op>
__global__ void __launch_bounds__(kBlockSize)
    reduce_serial_kernel(ReducePlan plan, const In* in, Op op) {
  using Acc = typename Op::Acc;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < plan.nk;
       o += stride) {
    int64_t base = 0, out_off = 0;
    plan.kept.offsets(o, base, out_off);
    Acc acc = op.init();
    for (int64_t r = 0; r < plan.nr; ++r) {
      int64_t in_off = 0, unused = 0;
      plan.red.offsets(r, in_off, unused);
      op.step(acc, in[base + in_off], r);
    }
    op.store(out_off, acc);
  }
}

// Reduces `in` (storage type In) into the keepdim-form `layout`; op.store writes the results.
template <typename In, typename Op>
void gpu_reduce(const Tensor& layout, const Tensor& in, const Op& op) {
  if (layout.numel() == 0) return;
  MT_ASSERT(layout.device() == in.device(), "reduction output on ", layout.device(),
            " while the input is on ", in.device());
  DeviceGuard guard(in.device().index());
  const ReducePlan plan = make_reduce_plan(layout, in);
  const In* src = static_cast<const In*>(in.data_ptr());
  if (plan.nr <= kSerialMax) {
    reduce_serial_kernel<In, Op><<<grid_for(plan.nk), kBlockSize>>>(plan, src, op);
  } else {
    // Fewer threads than elements would idle: the smallest power of two >= nr, at least a warp.
    int threads = 32;
    while (threads < kReduceBlock && threads < plan.nr) threads *= 2;
    const auto blocks = static_cast<unsigned>(std::min<int64_t>(plan.nk, kMaxBlocks));
    reduce_block_kernel<In, Op><<<blocks, threads>>>(plan, src, op);
  }
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace mantissa::cuda
