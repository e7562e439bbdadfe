// CUDA cross_entropy_rows (engine/kernel_tables.h): the loss of each row of logits [n, V] against
// its class index, and with `grad` the row's gradient written over the logits in place. The math
// shared with the CPU (what a row's target means, the loss and the gradient from lse) lives in
// kernels/cross_entropy_math.h; this file only decides how a row is walked.
//
// A block per row: a row is V contiguous elements (V is a vocabulary, thousands to hundreds of
// thousands), so the block's threads stride over it with coalesced reads and combine their max
// and sums in shared memory, as softmax's block kernel does (kernels/cuda/softmax_kernels.cu).
// Three passes: the max (NaN skipped, as in softmax: exp(NaN - max) then poisons the sum, so a
// NaN row gives NaN loss and gradient) with sum(z) under label smoothing; sum(exp(z - max)); and,
// with `grad`, the gradient. The row is overwritten only in the third pass, after every thread's
// reads of the first two (the reductions synchronise the block). Sums accumulate in opmath (float
// for float32 and the half types, double for float64); the gradient rounds once to T.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>

#include "engine/kernel_tables.h"
#include "kernels/cross_entropy_math.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/loops.cuh"

namespace mantissa::cuda {
namespace {

constexpr int kRowBlock = 256;  // threads per row (a power of two, for block_allreduce)

// What every row shares: its length, the smoothing and the ignored class, the scale's layout.
template <typename A>
struct RowsArgs {
  int64_t rows, classes, ignore_index;
  A smoothing;
  const A* scale;        // nullptr: 1
  int64_t scale_stride;  // 0: one scale for every row
  bool grad;
};

// Fills a row whose loss does not depend on its logits: 0 for an ignored target, NaN for one out
// of range (the gradient likewise).
template <typename T, typename A>
__device__ void fill_row(T* z, A* loss, int64_t q, int64_t classes, A value, bool grad) {
  if (threadIdx.x == 0) loss[q] = value;
  if (!grad) return;
  const T v = T(value);
  for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) z[j] = v;
}

template <typename T>
__global__ void __launch_bounds__(kRowBlock)
    cross_entropy_rows_block_kernel(T* logits, opmath_t<T>* loss, const int64_t* target,
                                    RowsArgs<opmath_t<T>> args) {
  using A = opmath_t<T>;
  namespace ce = mantissa::cross_entropy;
  __shared__ A smem[kRowBlock];
  const int64_t V = args.classes;
  const A classes = A(V);
  for (int64_t q = blockIdx.x; q < args.rows; q += gridDim.x) {
    T* z = logits + q * V;
    const int64_t t = target[q];
    const ce::RowTarget kind = ce::classify(t, V, args.ignore_index);
    // The kind is the same for the whole block, so the reductions below are reached by all.
    if (kind == ce::RowTarget::Ignored) {
      fill_row(z, loss, q, V, A(0), args.grad);
      continue;
    }
    if (kind == ce::RowTarget::OutOfRange) {
      fill_row(z, loss, q, V, A(NAN), args.grad);
      continue;
    }
    // Read before any thread of the block reaches pass 3, which may overwrite z[t].
    const A z_target = threadIdx.x == 0 ? A(z[t]) : A(0);
    const A scale = args.scale == nullptr ? A(1) : args.scale[q * args.scale_stride];

    // Pass 1: the max, and sum(z) when smoothing reads it.
    A mx = A(-INFINITY), sum_z = A(0);
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
      const A v = A(z[j]);
      mx = max_skip_nan(mx, v);
      sum_z += v;
    }
    mx = block_allreduce(mx, smem, MaxOf{});
    if (args.smoothing != A(0)) sum_z = block_allreduce(sum_z, smem, SumOf{});

    // Pass 2: sum(exp(z - max)).
    A sum = A(0);
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) sum += dmath::exp(A(z[j]) - mx);
    sum = block_allreduce(sum, smem, SumOf{});
    const A lse = mx + dmath::log(sum);
    if (threadIdx.x == 0) loss[q] = ce::row_loss(lse, z_target, sum_z, args.smoothing, classes);
    if (!args.grad) continue;

    // Pass 3: the gradient, over the row every thread has finished reading.
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
      const A p = dmath::exp(A(z[j]) - lse);
      z[j] = T(ce::element_grad(p, j == t, args.smoothing, classes, scale));
    }
  }
}

void cross_entropy_rows_kernel_cuda(const Tensor& logits, const Tensor& loss, const Tensor& target,
                                    const Tensor& scale, const CrossEntropyRowsParams& p) {
  MT_ASSERT(logits.dim() == 2 && logits.is_contiguous(),
            "cross_entropy_rows: expected contiguous 2-D logits, got ", logits.shape(),
            " (strides ", logits.strides(), ")");
  const int64_t n = logits.size(0), V = logits.size(1);
  MT_ASSERT(target.dtype() == kInt64 && target.is_contiguous() && target.numel() == n,
            "cross_entropy_rows: expected ", n, " contiguous int64 targets, got ", target.dtype(),
            " ", target.shape());
  MT_ASSERT(loss.is_contiguous() && loss.numel() == n,
            "cross_entropy_rows: expected a contiguous loss of ", n, " rows, got ", loss.shape());
  MT_ASSERT(!scale.defined() || (scale.dim() == 1 && scale.size(0) == n) || scale.numel() == 1,
            "cross_entropy_rows: expected a scale of ", n, " rows or one value, got ",
            scale.shape());
  MT_ASSERT(loss.device() == logits.device() && target.device() == logits.device(),
            "cross_entropy_rows: logits on ", logits.device(), ", loss on ", loss.device(),
            ", target on ", target.device());
  MT_ASSERT(!scale.defined() || scale.device() == logits.device(), "cross_entropy_rows: logits on ",
            logits.device(), ", scale on ", scale.device());
  if (n == 0) return;
  MT_CHECK(V > 0, "cross_entropy_rows: expected at least one class, got logits of shape ",
           logits.shape());
  DeviceGuard guard(logits.device().index());
  dispatch_dtype<kFloatingTypes>(
      logits.dtype(), "cross_entropy_rows", logits.device(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        using A = opmath_t<T>;
        constexpr DType kOpmath = dtype_of_v<A>;
        MT_ASSERT(loss.dtype() == kOpmath, "cross_entropy_rows: expected a ", kOpmath, " loss for ",
                  logits.dtype(), " logits, got ", loss.dtype());
        MT_ASSERT(!scale.defined() || scale.dtype() == kOpmath, "cross_entropy_rows: expected a ",
                  kOpmath, " scale for ", logits.dtype(), " logits, got ", scale.dtype());
        RowsArgs<A> args{n, V, p.ignore_index, A(p.label_smoothing), nullptr, 0, p.grad};
        if (scale.defined()) {
          args.scale = static_cast<const A*>(scale.data_ptr());
          args.scale_stride = scale.numel() == 1 ? 0 : scale.stride(0);
        }
        // A block per row; rows beyond the grid's reach are taken by the kernel's row loop.
        const auto blocks = static_cast<unsigned>(std::min<int64_t>(n, INT_MAX));
        cross_entropy_rows_block_kernel<T><<<blocks, kRowBlock, 0, detail::current_stream()>>>(
            static_cast<T*>(logits.data_ptr()), static_cast<A*>(loss.data_ptr()),
            static_cast<const int64_t*>(target.data_ptr()), args);
        MT_CUDA_CHECK_LAUNCH();
      });
}

}  // namespace

MT_REGISTER_KERNEL(cross_entropy_rows_kernel, kCUDA, &cross_entropy_rows_kernel_cuda);

}  // namespace mantissa::cuda
