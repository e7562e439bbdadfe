// CUDA batched matrix multiply: floating types on cuBLAS (cublasGemmStridedBatchedEx), integers
// on a plain kernel. Operands arrive as [B,M,K] x [B,K,N] with any strides (a batch stride of 0
// is a broadcast operand); `out` is contiguous [B,M,N].
//
// cuBLAS is column-major and `out` row-major, so it computes out^T = b^T a^T: a row-major matrix
// read column-major is its transpose. As in the CPU kernel (kernels/cpu/matmul_kernels.cpp), a
// matrix whose rows or columns are dense is passed as it is (op N or T, leading dim from its
// strides); anything else is first copied into a contiguous buffer by the copy kernel.
//
// Numerics: float32 uses CUBLAS_COMPUTE_32F, or CUBLAS_COMPUTE_32F_FAST_TF32 when matmuls may
// use TF32 (set_float32_matmul_precision("high") or a tf32 autocast scope: engine/precision.h);
// float16/bfloat16 multiply on tensor cores with float32 accumulation and round once on store;
// float64 uses CUBLAS_COMPUTE_64F. Integers accumulate in int64, as on the CPU.
//
// gemm_opmath is the same GEMM on cublasGemmEx (2-D, [1,rows,cols] views for prepare()) with a
// float32 (float64) output that is also the accumulator: c = a b, or c += a b with beta 1.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <type_traits>

#include "cuda/cublas_handle.h"
#include "engine/factory.h"
#include "engine/kernel_tables.h"
#include "engine/precision.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/linear_composite.h"
#include "kernels/scaled_mm_math.h"

namespace mantissa::cuda {
namespace {

// One operand as cuBLAS sees it: matrix b starts at ptr + b * batch_stride elements.
struct GemmOperand {
  const void* ptr = nullptr;
  cublasOperation_t op = CUBLAS_OP_N;
  int64_t ld = 1;
  int64_t batch_stride = 0;
  Tensor packed;  // keeps a packed copy alive until the GEMM is enqueued (stream-ordered free)
};

// How a rows x cols matrix with strides (sr, sc) can be read by cuBLAS without a copy, as the
// column-major transpose of what it is (op N: dense rows) or as itself (op T: dense columns).
// Strides of size-1 dims are meaningless, so they never disqualify a layout.
bool cublas_layout(int64_t rows, int64_t cols, int64_t sr, int64_t sc, cublasOperation_t& op,
                   int64_t& ld) {
  if ((cols == 1 || sc == 1) && (rows == 1 || sr >= std::max<int64_t>(1, cols))) {
    op = CUBLAS_OP_N;
    ld = rows == 1 ? std::max<int64_t>(1, cols) : sr;
    return true;
  }
  if ((rows == 1 || sr == 1) && (cols == 1 || sc >= std::max<int64_t>(1, rows))) {
    op = CUBLAS_OP_T;
    ld = cols == 1 ? std::max<int64_t>(1, rows) : sc;
    return true;
  }
  return false;
}

GemmOperand prepare(const Tensor& x) {
  const int64_t rows = x.size(1), cols = x.size(2);
  GemmOperand g;
  if (cublas_layout(rows, cols, x.stride(1), x.stride(2), g.op, g.ld)) {
    g.ptr = x.data_ptr();
    g.batch_stride = x.stride(0);
    return g;
  }
  // A broadcast batch is packed once and stays broadcast.
  const bool broadcast = x.stride(0) == 0;
  const Tensor src = broadcast ? mantissa::detail::make_view(x, Shape{1, rows, cols}, x.strides(),
                                                             x.storage_offset())
                               : x;
  g.packed = empty(src.shape(), TensorOptions(x.device()).dtype(x.dtype()));
  mantissa::detail::copy_into(g.packed, src);
  g.ptr = g.packed.data_ptr();
  g.op = CUBLAS_OP_N;
  g.ld = std::max<int64_t>(1, cols);
  g.batch_stride = broadcast ? 0 : rows * cols;
  return g;
}

bool fits_int(std::initializer_list<int64_t> values) {
  for (int64_t v : values)
    if (v > INT_MAX) return false;
  return true;
}

// The cuBLAS element type of T and the compute type its products are summed in.
struct CublasTypes {
  cudaDataType_t data = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
};

template <typename T>
CublasTypes cublas_types() {
  CublasTypes t;
  if constexpr (std::is_same_v<T, double>) {
    t.data = CUDA_R_64F;
    t.compute = CUBLAS_COMPUTE_64F;
  } else if constexpr (std::is_same_v<T, float>) {
    t.data = CUDA_R_32F;
    if (effective_matmul_precision(DeviceType::CUDA) == MatmulPrecision::High)
      t.compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  } else if constexpr (std::is_same_v<T, Half>) {
    t.data = CUDA_R_16F;
  } else {
    static_assert(std::is_same_v<T, BFloat16>);
    t.data = CUDA_R_16BF;
  }
  return t;
}

// alpha/beta have the compute type's precision: double for 64F, float otherwise.
template <typename T>
using CublasScale = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
void bmm_cublas(const Tensor& out, const Tensor& a, const Tensor& b) {
  const int64_t B = out.size(0), M = out.size(1), N = out.size(2), K = a.size(2);
  const GemmOperand ga = prepare(a), gb = prepare(b);
  MT_CHECK(fits_int({B, M, N, K, ga.ld, gb.ld}), "bmm: matrix dimensions exceed cuBLAS's ",
           "integer range, got [", B, ", ", M, ", ", K, "] x [", B, ", ", K, ", ", N, "]");

  const CublasTypes types = cublas_types<T>();
  const CublasScale<T> alpha = 1, beta = 0;

  const CublasLease lease(out.device().index());
  // out^T [N x M] = op(b) [N x K] * op(a) [K x M], column-major, ldc = N.
  MT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      lease.handle(), gb.op, ga.op, static_cast<int>(N), static_cast<int>(M), static_cast<int>(K),
      &alpha, gb.ptr, types.data, static_cast<int>(gb.ld), gb.batch_stride, ga.ptr, types.data,
      static_cast<int>(ga.ld), ga.batch_stride, &beta, out.data_ptr(), types.data,
      static_cast<int>(N), M * N, static_cast<int>(B), types.compute, CUBLAS_GEMM_DEFAULT));
}

struct BmmShape {
  int64_t B, M, N, K;
  int64_t as0, as1, as2, bs0, bs1, bs2;  // element strides of a and b
};

// One thread per output element, int64 accumulation (wrapping into T on store, as the CPU).
template <typename T>
__global__ void __launch_bounds__(kBlockSize)
    bmm_integral_kernel(const T* a, const T* b, T* out, BmmShape s) {
  const int64_t total = s.B * s.M * s.N;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += stride) {
    const int64_t batch = e / (s.M * s.N), rem = e % (s.M * s.N);
    const int64_t i = rem / s.N, j = rem % s.N;
    const T* arow = a + batch * s.as0 + i * s.as1;
    const T* bcol = b + batch * s.bs0 + j * s.bs2;
    int64_t acc = 0;
    for (int64_t k = 0; k < s.K; ++k)
      acc += static_cast<int64_t>(arow[k * s.as2]) * static_cast<int64_t>(bcol[k * s.bs1]);
    out[e] = static_cast<T>(acc);
  }
}

template <typename T>
void bmm_integral(const Tensor& out, const Tensor& a, const Tensor& b) {
  const BmmShape s{out.size(0), out.size(1), out.size(2), a.size(2),   a.stride(0),
                   a.stride(1), a.stride(2), b.stride(0), b.stride(1), b.stride(2)};
  bmm_integral_kernel<T><<<grid_for(out.numel()), kBlockSize, 0, detail::current_stream()>>>(
      static_cast<const T*>(a.data_ptr()), static_cast<const T*>(b.data_ptr()),
      static_cast<T*>(out.data_ptr()), s);
  MT_CUDA_CHECK_LAUNCH();
}

void bmm_kernel_cuda(const Tensor& out, const Tensor& a, const Tensor& b) {
  if (out.numel() == 0) return;
  MT_ASSERT(out.is_contiguous() && out.dim() == 3 && a.dim() == 3 && b.dim() == 3,
            "bmm: expected 3-D operands and a contiguous output, got ", a.shape(), " x ", b.shape(),
            " -> ", out.shape());
  MT_ASSERT(a.device() == out.device() && b.device() == out.device(), "bmm: operands on ",
            a.device(), " and ", b.device(), ", output on ", out.device());
  DeviceGuard guard(out.device().index());
  dispatch_dtype<kAllTypes>(out.dtype(), "bmm", out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (a.size(2) == 0) {
      MT_CUDA_CHECK(cudaMemsetAsync(out.data_ptr(), 0, static_cast<size_t>(out.nbytes()),
                                    detail::current_stream()));
      return;
    }
    if constexpr (std::is_integral_v<T>) {
      bmm_integral<T>(out, a, b);
    } else {
      bmm_cublas<T>(out, a, b);
    }
  });
}

template <typename T>
void gemm_opmath_cublas(const Tensor& c, const Tensor& a, const Tensor& b, bool accumulate) {
  const int64_t M = c.size(0), N = c.size(1), K = a.size(1);
  const GemmOperand ga = prepare(linear_composite::batch1(a)),
                    gb = prepare(linear_composite::batch1(b));
  MT_CHECK(fits_int({M, N, K, ga.ld, gb.ld}), "gemm_opmath: matrix dimensions exceed cuBLAS's ",
           "integer range, got ", a.shape(), " (strides ", a.strides(), ") x ", b.shape(),
           " (strides ", b.strides(), ")");

  const CublasTypes types = cublas_types<T>();
  // c is the opmath accumulator: float64 for double operands, float32 for the rest.
  const cudaDataType_t c_type = std::is_same_v<T, double> ? CUDA_R_64F : CUDA_R_32F;
  const CublasScale<T> alpha = 1, beta = accumulate ? 1 : 0;

  const CublasLease lease(c.device().index());
  // c^T [N x M] (+)= op(b) [N x K] * op(a) [K x M], column-major, ldc = N.
  MT_CUBLAS_CHECK(cublasGemmEx(lease.handle(), gb.op, ga.op, static_cast<int>(N),
                               static_cast<int>(M), static_cast<int>(K), &alpha, gb.ptr, types.data,
                               static_cast<int>(gb.ld), ga.ptr, types.data, static_cast<int>(ga.ld),
                               &beta, c.data_ptr(), c_type, static_cast<int>(N), types.compute,
                               CUBLAS_GEMM_DEFAULT));
}

void gemm_opmath_kernel_cuda(const Tensor& c, const Tensor& a, const Tensor& b, bool accumulate) {
  MT_ASSERT(c.is_contiguous() && c.dim() == 2 && a.dim() == 2 && b.dim() == 2 &&
                a.size(0) == c.size(0) && b.size(1) == c.size(1) && a.size(1) == b.size(0),
            "gemm_opmath: expected [M,K] x [K,N] -> contiguous [M,N], got ", a.shape(), " x ",
            b.shape(), " -> ", c.shape());
  MT_ASSERT(a.dtype() == b.dtype(), "gemm_opmath: operands of dtypes ", a.dtype(), " and ",
            b.dtype());
  MT_ASSERT(a.device() == c.device() && b.device() == c.device(), "gemm_opmath: operands on ",
            a.device(), " and ", b.device(), ", output on ", c.device());
  if (c.numel() == 0) return;
  DeviceGuard guard(c.device().index());
  dispatch_dtype<kFloatingTypes>(a.dtype(), "gemm_opmath", a.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr DType kOpmath = dtype_of_v<opmath_t<T>>;
    MT_CHECK(c.dtype() == kOpmath, "gemm_opmath: expected a ", kOpmath, " output for ", a.dtype(),
             " operands, got ", c.dtype());
    if (a.size(1) == 0) {  // an empty sum: c = 0, or c unchanged when accumulating
      if (!accumulate)
        MT_CUDA_CHECK(cudaMemsetAsync(c.data_ptr(), 0, static_cast<size_t>(c.nbytes()),
                                      detail::current_stream()));
      return;
    }
    gemm_opmath_cublas<T>(c, a, b, accumulate);
  });
}

// scaled_mm_epilogue: one thread per output element (kernels/scaled_mm_math.h).
template <typename T>
struct ScaledMmEpilogueOp {
  const float* acc;
  const float* scale_a;
  const float* scale_b;
  const float* bias;
  int64_t cols;
  bool row_scales, col_scales;
  __device__ T operator()(int64_t idx) const {
    const int64_t i = idx / cols, j = idx % cols;
    return scaled_mm_math::element<T>(acc[idx], scale_a[row_scales ? i : 0],
                                      scale_b[col_scales ? j : 0], bias, j);
  }
};

void scaled_mm_epilogue_cuda(const Tensor& out, const Tensor& acc, const Tensor& scale_a,
                             const Tensor& scale_b, const Tensor& bias) {
  if (out.numel() == 0) return;
  dispatch_dtype<kScaledMmOutTypes>(out.dtype(), "scaled_mm", out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    gpu_generate<T>(
        out, ScaledMmEpilogueOp<T>{acc.data<float>(), scale_a.data<float>(), scale_b.data<float>(),
                                   bias.defined() ? bias.data<float>() : nullptr, out.size(1),
                                   scale_a.numel() > 1, scale_b.numel() > 1});
  });
}

}  // namespace

MT_REGISTER_KERNEL(bmm_kernel, kCUDA, &bmm_kernel_cuda);
MT_REGISTER_KERNEL(scaled_mm_epilogue_kernel, kCUDA, &scaled_mm_epilogue_cuda);
MT_REGISTER_KERNEL(gemm_opmath_kernel, kCUDA, &gemm_opmath_kernel_cuda);

}  // namespace mantissa::cuda
