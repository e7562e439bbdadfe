// CUDA layer norm over the last N elements of M contiguous rows, and its backward.
//
// Forward and input gradient: one block per row (grid-stride over rows), sized to the row (a
// warp for rows up to 32 elements, up to 256 threads), so a row's statistics never leave the
// SM. Each row is read in 16-byte packs when the rows are 16-byte aligned. Statistics are two
// block sums (mean, then the centred sum of squares: no cancellation when |mean| >> std),
// accumulated in opmath: float for float32/float16/bfloat16, double for float64, and mean/rstd
// are saved in that type (engine/kernel_tables.h). Half types are read into float and rounded
// once on store, as on the CPU (kernels/cpu/layer_norm_kernels.cpp, which accumulates in double
// and is the oracle in tests/test_layer_norm.cpp).
//
// Weight and bias gradients are column sums over all rows, in two stages: a thread per
// (column, chunk of 128 rows) walks its rows, so consecutive threads read consecutive addresses
// and a tall [M, N] still fills the GPU; then a thread per column adds the chunks.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cuda/cuda_check.h"
#include "cuda/current_stream.h"
#include "cuda/device_guard.h"
#include "engine/factory.h"
#include "engine/kernel_tables.h"
#include "kernels/cuda/loops.cuh"

namespace mantissa::cuda {
namespace {

constexpr int kMaxRowThreads = 256;

// Sum of v over the block; every thread gets the result. `scratch` holds one value per warp.
// blockDim.x is a multiple of 32, so every shuffle has a full warp.
template <typename A>
__device__ A block_sum(A v, A* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? scratch[lane] : A(0);
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if (lane == 0) scratch[0] = v;
  }
  __syncthreads();
  const A total = scratch[0];
  __syncthreads();  // scratch is reused by the next sum
  return total;
}

template <typename T>
struct alignas(16) Pack {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};

// Calls f(j, value) for this thread's share of row [0, n), by 16-byte packs when `vec`.
template <typename T, typename F>
__device__ void for_row(const T* row, int64_t n, bool vec, F&& f) {
  using A = opmath_t<T>;
  if (vec) {
    constexpr int V = Pack<T>::kSize;
    const auto* packs = reinterpret_cast<const Pack<T>*>(row);
    for (int64_t p = threadIdx.x; p < n / V; p += blockDim.x) {
      const Pack<T> pk = packs[p];
#pragma unroll
      for (int i = 0; i < V; ++i) f(p * V + i, static_cast<A>(pk.v[i]));
    }
  } else {
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) f(j, static_cast<A>(row[j]));
  }
}

template <typename T>
__global__ void __launch_bounds__(kMaxRowThreads)
    layer_norm_forward_kernel_impl(T* out, opmath_t<T>* mean, opmath_t<T>* rstd, const T* x,
                                   const T* w, const T* b, int64_t M, int64_t N, double eps,
                                   bool vec) {
  using A = opmath_t<T>;
  __shared__ A scratch[32];
  for (int64_t r = blockIdx.x; r < M; r += gridDim.x) {
    const T* row = x + r * N;
    A s = 0;
    for_row(row, N, vec, [&](int64_t, A v) { s += v; });
    const A mu = block_sum(s, scratch) / static_cast<A>(N);
    A ss = 0;
    for_row(row, N, vec, [&](int64_t, A v) { ss += (v - mu) * (v - mu); });
    const A var = block_sum(ss, scratch) / static_cast<A>(N);
    const A rs = static_cast<A>(1) / sqrt(var + static_cast<A>(eps));
    if (threadIdx.x == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
    T* orow = out + r * N;
    for_row(row, N, vec, [&](int64_t j, A v) {
      A y = (v - mu) * rs;
      if (w) y = y * static_cast<A>(w[j]);
      if (b) y = y + static_cast<A>(b[j]);
      orow[j] = static_cast<T>(y);
    });
  }
}

template <typename T>
__global__ void __launch_bounds__(kMaxRowThreads)
    layer_norm_backward_input_kernel(T* dx, const T* dy, const T* x, const opmath_t<T>* mean,
                                     const opmath_t<T>* rstd, const T* w, int64_t M, int64_t N) {
  using A = opmath_t<T>;
  __shared__ A scratch[32];
  for (int64_t r = blockIdx.x; r < M; r += gridDim.x) {
    const T* xr = x + r * N;
    const T* gr = dy + r * N;
    const A mu = mean[r], rs = rstd[r];
    A sg = 0, sgx = 0;
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x) {
      const A g = static_cast<A>(gr[j]) * (w ? static_cast<A>(w[j]) : A(1));
      sg += g;
      sgx += g * (static_cast<A>(xr[j]) - mu) * rs;
    }
    const A a = block_sum(sg, scratch) / static_cast<A>(N);
    const A c = block_sum(sgx, scratch) / static_cast<A>(N);
    T* dr = dx + r * N;
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x) {
      const A g = static_cast<A>(gr[j]) * (w ? static_cast<A>(w[j]) : A(1));
      const A xhat = (static_cast<A>(xr[j]) - mu) * rs;
      dr[j] = static_cast<T>(rs * (g - a - xhat * c));
    }
  }
}

// Stage 1 of the weight/bias gradients: block (bx, by) sums rows [by * chunk_rows, ...) of the
// columns it owns into partial[by][j] (opmath), so the grid covers the GPU even when N is small
// and M large (a batch of tokens). Stage 2 adds the chunks of each column and rounds once.
// Chunks are kRowChunk rows until that would need more than kMaxChunks of them (gridDim.y stops
// at 65,535); beyond, chunks grow so that any M fits.
constexpr int64_t kRowChunk = 128;
constexpr int64_t kMaxChunks = 65535;

template <typename T>
__global__ void __launch_bounds__(kBlockSize)
    layer_norm_params_partial_kernel(opmath_t<T>* partial_w, opmath_t<T>* partial_b, const T* dy,
                                     const T* x, const opmath_t<T>* mean, const opmath_t<T>* rstd,
                                     int64_t M, int64_t N, int64_t chunk_rows) {
  using A = opmath_t<T>;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= N) return;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * chunk_rows;
  const int64_t r1 = r0 + chunk_rows < M ? r0 + chunk_rows : M;
  A sw = 0, sb = 0;
  for (int64_t r = r0; r < r1; ++r) {
    const A g = static_cast<A>(dy[r * N + j]);
    sw += g * (static_cast<A>(x[r * N + j]) - mean[r]) * rstd[r];
    sb += g;
  }
  const int64_t at = static_cast<int64_t>(blockIdx.y) * N + j;
  if (partial_w) partial_w[at] = sw;
  if (partial_b) partial_b[at] = sb;
}

template <typename T>
__global__ void __launch_bounds__(kBlockSize)
    layer_norm_params_finish_kernel(T* dw, T* db, const opmath_t<T>* partial_w,
                                    const opmath_t<T>* partial_b, int64_t chunks, int64_t N) {
  using A = opmath_t<T>;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < N;
       j += stride) {
    A sw = 0, sb = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      if (partial_w) sw += partial_w[c * N + j];
      if (partial_b) sb += partial_b[c * N + j];
    }
    if (dw) dw[j] = static_cast<T>(sw);
    if (db) db[j] = static_cast<T>(sb);
  }
}

// Threads per row block: a multiple of 32 covering the row, at most kMaxRowThreads.
int row_threads(int64_t n) {
  return static_cast<int>(std::clamp<int64_t>((n + 31) / 32 * 32, 32, kMaxRowThreads));
}

unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>(std::clamp<int64_t>(rows, 1, kMaxBlocks));
}

template <typename T>
T* ptr(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

void layer_norm_forward_cuda(const Tensor& out, const Tensor& mean, const Tensor& rstd,
                             const Tensor& x, const Tensor& weight, const Tensor& bias,
                             double eps) {
  const int64_t N = x.size(-1), M = x.numel() / std::max<int64_t>(N, 1);
  if (M == 0 || N == 0) return;
  DeviceGuard guard(x.device().index());
  dispatch_dtype<kFloatingTypes>(x.dtype(), "layer_norm", x.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = opmath_t<T>;
    const auto addr = reinterpret_cast<uintptr_t>(x.data_ptr());
    const bool vec = (N * static_cast<int64_t>(sizeof(T))) % 16 == 0 && addr % 16 == 0;
    layer_norm_forward_kernel_impl<T>
        <<<row_blocks(M), row_threads(vec ? N / Pack<T>::kSize : N), 0, detail::current_stream()>>>(
            ptr<T>(out), ptr<A>(mean), ptr<A>(rstd), ptr<T>(x), ptr<T>(weight), ptr<T>(bias), M, N,
            eps, vec);
    MT_CUDA_CHECK_LAUNCH();
  });
}

void layer_norm_backward_cuda(const Tensor& grad_x, const Tensor& grad_weight,
                              const Tensor& grad_bias, const Tensor& grad_out, const Tensor& x,
                              const Tensor& mean, const Tensor& rstd, const Tensor& weight) {
  const int64_t N = x.size(-1), M = x.numel() / std::max<int64_t>(N, 1);
  if (N == 0) return;
  DeviceGuard guard(x.device().index());
  dispatch_dtype<kFloatingTypes>(x.dtype(), "layer_norm_backward", x.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = opmath_t<T>;
    if (grad_x.defined() && M > 0) {
      layer_norm_backward_input_kernel<T>
          <<<row_blocks(M), row_threads(N), 0, detail::current_stream()>>>(
              ptr<T>(grad_x), ptr<T>(grad_out), ptr<T>(x), ptr<A>(mean), ptr<A>(rstd),
              ptr<T>(weight), M, N);
      MT_CUDA_CHECK_LAUNCH();
    }
    if (grad_weight.defined() || grad_bias.defined()) {
      // Partial sums per chunk of rows in opmath, from the caching allocator (stream-ordered).
      const int64_t chunk_rows = std::max(kRowChunk, (M + kMaxChunks - 1) / kMaxChunks);
      const int64_t chunks = std::max<int64_t>(1, (M + chunk_rows - 1) / chunk_rows);
      const TensorOptions acc_opts =
          TensorOptions(x.device())
              .dtype(std::is_same_v<A, double> ? DType::Float64 : DType::Float32);
      const Tensor pw = grad_weight.defined() ? empty(Shape{chunks, N}, acc_opts) : Tensor();
      const Tensor pb = grad_bias.defined() ? empty(Shape{chunks, N}, acc_opts) : Tensor();
      const dim3 grid(static_cast<unsigned>((N + kBlockSize - 1) / kBlockSize),
                      static_cast<unsigned>(chunks));
      if (M > 0) {
        layer_norm_params_partial_kernel<T><<<grid, kBlockSize, 0, detail::current_stream()>>>(
            ptr<A>(pw), ptr<A>(pb), ptr<T>(grad_out), ptr<T>(x), ptr<A>(mean), ptr<A>(rstd), M, N,
            chunk_rows);
        MT_CUDA_CHECK_LAUNCH();
      }
      layer_norm_params_finish_kernel<T><<<grid_for(N), kBlockSize, 0, detail::current_stream()>>>(
          ptr<T>(grad_weight), ptr<T>(grad_bias), ptr<A>(pw), ptr<A>(pb), M > 0 ? chunks : 0, N);
      MT_CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace

MT_REGISTER_KERNEL(layer_norm_forward_kernel, kCUDA, &layer_norm_forward_cuda);
MT_REGISTER_KERNEL(layer_norm_backward_kernel, kCUDA, &layer_norm_backward_cuda);

}  // namespace mantissa::cuda
