// The CUDA reduction engine shared by kernels/cuda/reduce_kernels.cu and arg_reduce_kernels.cu,
// the counterpart of reduce() in kernels/cpu/reduce_kernels.cpp.
//
// The host builds the same plan as the CPU (kernels/reduce_plan.h). Then one of two kernels runs:
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
#include "kernels/reduce_plan.h"

namespace mantissa::cuda {

inline constexpr int kReduceBlock = 256;   // threads of a block-per-output reduction (pow of 2)
inline constexpr int64_t kSerialMax = 32;  // up to this many elements, a thread per output


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
    reduce_serial_kernel<In, Op>
        <<<grid_for(plan.nk), kBlockSize, 0, detail::current_stream()>>>(plan, src, op);
  } else {
    // Fewer threads than elements would idle: the smallest power of two >= nr, at least a warp.
    int threads = 32;
    while (threads < kReduceBlock && threads < plan.nr) threads *= 2;
    const auto blocks = static_cast<unsigned>(std::min<int64_t>(plan.nk, kMaxBlocks));
    reduce_block_kernel<In, Op><<<blocks, threads, 0, detail::current_stream()>>>(plan, src, op);
  }
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace mantissa::cuda
