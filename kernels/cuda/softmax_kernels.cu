// CUDA softmax and log_softmax along one dim, and their backwards, with the CPU's semantics
// (kernels/cpu/softmax_kernels.cpp): the row max is subtracted before exp, NaN anywhere in a row
// makes the row NaN, and the half types compute in float and round once on store.
//
// A tensor is seen as [outer, D, inner] with the softmax over D; each of the outer * inner rows
// has D elements `inner` apart. Non-contiguous operands are copied once so that this view is
// dense (as on the CPU). Two kernels, both plain:
//  - a block per row when rows are contiguous (inner == 1, the [N, C] logits case) or few: the
//    block's threads stride over the row and combine their max and sum in shared memory;
//  - a thread per row otherwise: neighbouring threads walk neighbouring columns, so each of the
//    three passes over D reads coalesced memory.
// Row sums accumulate in opmath (float for float32 and the half types, double for float64); the
// CPU uses double throughout, so float32 results agree to a few ulps, not bit for bit.
#include <cuda_runtime.h>

#include <algorithm>

#include "engine/factory.h"
#include "engine/kernel_tables.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/loops.cuh"

namespace mantissa::cuda {
namespace {

constexpr int kRowBlock = 256;      // threads per row in the block kernels (power of two)
constexpr int64_t kFewRows = 2048;  // fewer strided rows than this: still a block per row

// Rows of D elements: row q starts at (q / inner) * D * inner + q % inner, elements inner apart.
struct Rows {
  int64_t count, d, inner;
  MT_HOST_DEVICE int64_t base(int64_t q) const {
    return inner == 1 ? q * d : (q / inner) * d * inner + q % inner;
  }
};

Rows rows_of(const Tensor& t, int64_t dim) {
  Rows r{1, 1, 1};
  if (t.dim() == 0) return r;
  int64_t outer = 1;
  for (int64_t i = 0; i < dim; ++i) outer *= t.size(i);
  r.d = t.size(dim);
  for (int64_t i = dim + 1; i < t.dim(); ++i) r.inner *= t.size(i);
  r.count = outer * r.inner;
  return r;
}

bool block_per_row(const Rows& r) { return r.inner == 1 || r.count < kFewRows; }

template <typename T, bool Log>
__device__ __forceinline__ T softmax_value(opmath_t<T> x, opmath_t<T> mx, opmath_t<T> scale) {
  // scale: log of the row sum for log_softmax, its reciprocal for softmax
  if constexpr (Log) {
    return T(x - mx - scale);
  } else {
    return T(dmath::exp(x - mx) * scale);
  }
}

template <typename M, bool Log>
__device__ __forceinline__ M softmax_scale(M sum) {
  if constexpr (Log) {
    return dmath::log(sum);
  } else {
    return M(1) / sum;
  }
}

template <typename T, bool Log>
__global__ void __launch_bounds__(kRowBlock) softmax_block_kernel(const T* x, T* y, Rows rows) {
  using M = opmath_t<T>;
  __shared__ M smem[kRowBlock];
  for (int64_t q = blockIdx.x; q < rows.count; q += gridDim.x) {
    const int64_t b = rows.base(q);
    M mx = M(-INFINITY);
    for (int64_t k = threadIdx.x; k < rows.d; k += blockDim.x)
      mx = max_skip_nan(mx, M(x[b + k * rows.inner]));
    mx = block_allreduce(mx, smem, MaxOf{});
    M sum = M(0);
    for (int64_t k = threadIdx.x; k < rows.d; k += blockDim.x)
      sum += dmath::exp(M(x[b + k * rows.inner]) - mx);
    sum = block_allreduce(sum, smem, SumOf{});
    const M scale = softmax_scale<M, Log>(sum);
    for (int64_t k = threadIdx.x; k < rows.d; k += blockDim.x) {
      const int64_t i = b + k * rows.inner;
      y[i] = softmax_value<T, Log>(M(x[i]), mx, scale);
    }
  }
}

template <typename T, bool Log>
__global__ void __launch_bounds__(kBlockSize) softmax_thread_kernel(const T* x, T* y, Rows rows) {
  using M = opmath_t<T>;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; q < rows.count;
       q += stride) {
    const int64_t b = rows.base(q);
    M mx = M(-INFINITY);
    for (int64_t k = 0; k < rows.d; ++k) mx = max_skip_nan(mx, M(x[b + k * rows.inner]));
    M sum = M(0);
    for (int64_t k = 0; k < rows.d; ++k) sum += dmath::exp(M(x[b + k * rows.inner]) - mx);
    const M scale = softmax_scale<M, Log>(sum);
    for (int64_t k = 0; k < rows.d; ++k) {
      const int64_t i = b + k * rows.inner;
      y[i] = softmax_value<T, Log>(M(x[i]), mx, scale);
    }
  }
}

// softmax:     grad_in = y * (g - sum(g * y))
// log_softmax: grad_in = g - exp(y) * sum(g)
template <typename M, bool Log>
__device__ __forceinline__ M backward_term(M g, M y) {
  return Log ? g : g * y;
}
template <typename M, bool Log>
__device__ __forceinline__ M backward_value(M g, M y, M s) {
  if constexpr (Log) {
    return g - dmath::exp(y) * s;
  } else {
    return y * (g - s);
  }
}

template <typename T, bool Log>
__global__ void __launch_bounds__(kRowBlock)
    softmax_backward_block_kernel(const T* go, const T* y, T* gi, Rows rows) {
  using M = opmath_t<T>;
  __shared__ M smem[kRowBlock];
  for (int64_t q = blockIdx.x; q < rows.count; q += gridDim.x) {
    const int64_t b = rows.base(q);
    M sum = M(0);
    for (int64_t k = threadIdx.x; k < rows.d; k += blockDim.x) {
      const int64_t i = b + k * rows.inner;
      sum += backward_term<M, Log>(M(go[i]), M(y[i]));
    }
    const M s = block_allreduce(sum, smem, SumOf{});
    for (int64_t k = threadIdx.x; k < rows.d; k += blockDim.x) {
      const int64_t i = b + k * rows.inner;
      gi[i] = T(backward_value<M, Log>(M(go[i]), M(y[i]), s));
    }
  }
}

template <typename T, bool Log>
__global__ void __launch_bounds__(kBlockSize)
    softmax_backward_thread_kernel(const T* go, const T* y, T* gi, Rows rows) {
  using M = opmath_t<T>;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; q < rows.count;
       q += stride) {
    const int64_t b = rows.base(q);
    M s = M(0);
    for (int64_t k = 0; k < rows.d; ++k) {
      const int64_t i = b + k * rows.inner;
      s += backward_term<M, Log>(M(go[i]), M(y[i]));
    }
    for (int64_t k = 0; k < rows.d; ++k) {
      const int64_t i = b + k * rows.inner;
      gi[i] = T(backward_value<M, Log>(M(go[i]), M(y[i]), s));
    }
  }
}

using mantissa::detail::dense;
using mantissa::detail::with_dense_out;

unsigned row_blocks(const Rows& r) {
  return static_cast<unsigned>(std::min<int64_t>(r.count, kMaxBlocks));
}

template <bool Log>
void softmax_cuda(const Tensor& out_in, const Tensor& in_in, int64_t dim) {
  if (in_in.numel() == 0) return;
  const Tensor in = dense(in_in);
  const Rows rows = rows_of(in, dim);
  with_dense_out(out_in, [&](const Tensor& out) {
    dispatch_dtype<kFloatingTypes>(
        in.dtype(), Log ? "log_softmax" : "softmax", in.device(), [&](auto tag) {
          using T = typename decltype(tag)::type;
          DeviceGuard guard(in.device().index());
          const T* x = static_cast<const T*>(in.data_ptr());
          T* y = static_cast<T*>(out.data_ptr());
          if (block_per_row(rows)) {
            softmax_block_kernel<T, Log>
                <<<row_blocks(rows), kRowBlock, 0, detail::current_stream()>>>(x, y, rows);
          } else {
            softmax_thread_kernel<T, Log>
                <<<grid_for(rows.count), kBlockSize, 0, detail::current_stream()>>>(x, y, rows);
          }
          MT_CUDA_CHECK_LAUNCH();
        });
  });
}

template <bool Log>
void softmax_backward_cuda(const Tensor& grad_in_out, const Tensor& grad_out_in,
                           const Tensor& output_in, int64_t dim) {
  if (output_in.numel() == 0) return;
  const Tensor go = dense(grad_out_in), out = dense(output_in);
  const Rows rows = rows_of(out, dim);
  with_dense_out(grad_in_out, [&](const Tensor& grad_in) {
    dispatch_dtype<kFloatingTypes>(
        out.dtype(), Log ? "log_softmax_backward" : "softmax_backward", out.device(),
        [&](auto tag) {
          using T = typename decltype(tag)::type;
          DeviceGuard guard(out.device().index());
          const T* g = static_cast<const T*>(go.data_ptr());
          const T* y = static_cast<const T*>(out.data_ptr());
          T* gi = static_cast<T*>(grad_in.data_ptr());
          if (block_per_row(rows)) {
            softmax_backward_block_kernel<T, Log>
                <<<row_blocks(rows), kRowBlock, 0, detail::current_stream()>>>(g, y, gi, rows);
          } else {
            softmax_backward_thread_kernel<T, Log>
                <<<grid_for(rows.count), kBlockSize, 0, detail::current_stream()>>>(g, y, gi, rows);
          }
          MT_CUDA_CHECK_LAUNCH();
        });
  });
}

}  // namespace

MT_REGISTER_KERNEL(softmax_kernel, kCUDA, &softmax_cuda<false>);
MT_REGISTER_KERNEL(log_softmax_kernel, kCUDA, &softmax_cuda<true>);
MT_REGISTER_KERNEL(softmax_backward_kernel, kCUDA, &softmax_backward_cuda<false>);
MT_REGISTER_KERNEL(log_softmax_backward_kernel, kCUDA, &softmax_backward_cuda<true>);

}  // namespace mantissa::cuda
