// The CUDA reduction engine shared by kernels/cuda/reduce_kernels.cu and arg_reduce_kernels.cu,
// the counterpart of reduce() in kernels/cpu/reduce_kernels.cpp.
//
// The host builds the same plan as the CPU (kernels/reduce_plan.h). Then one of three paths runs:
//  - block per output (the common case): the block's threads stride over the reduced elements,
//    so neighbouring threads read neighbouring memory when the innermost dim is reduced, and the
//    per-thread partials meet in a shared-memory tree;
//  - thread per output, for reductions of at most kSerialMax elements (x.sum(-1) of [N, 2], a
//    bias gradient over a tiny batch): each thread folds its output serially;
//  - split, for few outputs of many elements (x.sum() of a large tensor, a gradient norm): a
//    block per output would leave all but a few SMs idle, so each output's reduced range is cut
//    into contiguous chunks, a block per chunk writes its partial Acc to scratch memory, and a
//    thread per output merges its chunks in order. The chunking depends only on the shapes, so
//    results are deterministic.
// Outputs and chunks are grid-strided over blockIdx.x (never y or z, which stop at 65,535), and
// every index is 64-bit, so any number of outputs and elements works.
//
// An Op supplies Acc (a trivial type: it lives in __shared__ and scratch memory), init(),
// step(acc, x, r) with r the row-major index over the reduced dims (the position along `dim`
// when only one dim is reduced), merge(acc, other) and store(out_element_offset, acc). Each
// thread steps through increasing r, and merge() must not depend on which partial holds the
// smaller r (arg-extremum ties compare indices).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "cuda/cuda_check.h"
#include "cuda/device_guard.h"
#include "engine/factory.h"
#include "engine/tensor.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/reduce_plan.h"

namespace mantissa::cuda {

inline constexpr int kReduceBlock = 256;   // threads of a block-per-output reduction (pow of 2)
inline constexpr int64_t kSerialMax = 32;  // up to this many elements, a thread per output
// The split path: chunks of at least kSplitChunk elements (64 per thread of a full block, so a
// chunk's loads amortise its shared-memory tree), and about kSplitBlocks blocks in all (several
// per SM of the largest GPUs).
inline constexpr int64_t kSplitChunk = 64 * kReduceBlock;
inline constexpr int64_t kSplitBlocks = 1024;

// Block b folds reduced elements [chunk * s, chunk * (s + 1)) of output b / splits, with
// s = b % splits; splits == 1 is the block-per-output path (chunk >= nr). With `partials` the
// block's Acc goes to partials[b], else op.store writes the output.
template <typename In, typename Op>
__global__ void __launch_bounds__(kReduceBlock)
    reduce_block_kernel(ReducePlan plan, const In* in, Op op, int64_t splits, int64_t chunk,
                        typename Op::Acc* partials) {
  using Acc = typename Op::Acc;
  __shared__ Acc partial[kReduceBlock];
  const int tid = threadIdx.x;
  const int64_t blocks = plan.nk * splits;
  // Every thread of a block runs the same iterations, so the barriers below are uniform.
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const int64_t o = b / splits;
    const int64_t r0 = (b - o * splits) * chunk;
    const int64_t r1 = r0 + chunk < plan.nr ? r0 + chunk : plan.nr;
    int64_t base = 0, out_off = 0;
    plan.kept.offsets(o, base, out_off);
    Acc acc = op.init();
    for (int64_t r = r0 + tid; r < r1; r += blockDim.x) {
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
    if (tid == 0) {
      if (partials != nullptr) {
        partials[b] = partial[0];
      } else {
        op.store(out_off, partial[0]);
      }
    }
    __syncthreads();  // partial[0] is read before the next output overwrites it
  }
}

// The split path's second pass: output o merges partials[o * splits ...] in chunk order.
template <typename Op>
__global__ void __launch_bounds__(kBlockSize)
    reduce_merge_kernel(ReducePlan plan, Op op, const typename Op::Acc* partials, int64_t splits) {
  using Acc = typename Op::Acc;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < plan.nk;
       o += stride) {
    int64_t base = 0, out_off = 0;
    plan.kept.offsets(o, base, out_off);
    Acc acc = partials[o * splits];
    for (int64_t s = 1; s < splits; ++s) op.merge(acc, partials[o * splits + s]);
    op.store(out_off, acc);
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
    MT_CUDA_CHECK_LAUNCH();
    return;
  }
  // Chunks only when the outputs alone leave blocks to spare and each chunk stays large.
  int64_t splits = 1, chunk = plan.nr;
  if (plan.nk < kSplitBlocks && plan.nr >= 2 * kSplitChunk) {
    splits =
        std::min((plan.nr + kSplitChunk - 1) / kSplitChunk, (kSplitBlocks + plan.nk - 1) / plan.nk);
    chunk = (plan.nr + splits - 1) / splits;
    splits = (plan.nr + chunk - 1) / chunk;  // no empty chunk
  }
  // Fewer threads than elements would idle: the smallest power of two >= chunk, at least a warp.
  int threads = 32;
  while (threads < kReduceBlock && threads < chunk) threads *= 2;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>(plan.nk * splits, kMaxBlocks));
  if (splits == 1) {
    reduce_block_kernel<In, Op>
        <<<blocks, threads, 0, detail::current_stream()>>>(plan, src, op, splits, chunk, nullptr);
    MT_CUDA_CHECK_LAUNCH();
    return;
  }
  using Acc = typename Op::Acc;
  static_assert(std::is_trivially_copyable_v<Acc>, "reduction partials are copied as bytes");
  // Stream-ordered scratch from the caching allocator: freed when this returns, reused only by
  // work queued after the two kernels on this stream.
  const Tensor scratch = empty(Shape{plan.nk * splits * static_cast<int64_t>(sizeof(Acc))},
                               TensorOptions(in.device()).dtype(DType::UInt8));
  auto* partials = static_cast<Acc*>(scratch.data_ptr());
  reduce_block_kernel<In, Op>
      <<<blocks, threads, 0, detail::current_stream()>>>(plan, src, op, splits, chunk, partials);
  MT_CUDA_CHECK_LAUNCH();
  reduce_merge_kernel<Op>
      <<<grid_for(plan.nk), kBlockSize, 0, detail::current_stream()>>>(plan, op, partials, splits);
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace mantissa::cuda
