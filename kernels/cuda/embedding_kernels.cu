// CUDA embedding: a row gather forward and a deterministic scatter-add backward.
//
// Backward does not add with atomics (whose order, and so whose float sums, change from run to
// run): it sorts the (index, position) pairs by index with CUB's stable radix sort, so each
// weight row's positions sit together in increasing order, and one thread per (row, column)
// sums its row's grad_out entries in that order in opmath and rounds once. That is the CPU's
// order (kernels/cpu/embedding_kernels.cpp), so both devices give the same bits, every run.
//
// Forward checks the indices: the first out-of-range one is recorded in a device flag and the
// host throws the CPU's message after reading it back (one host round trip per call), or, under a
// CUDA graph capture, the next host read does (kernels/cuda/bad_index_flag.cuh). Backward skips
// rows outside the table, which only a captured forward that met a bad index can leave.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>

#include "engine/factory.h"
#include "engine/kernel_tables.h"
#include "kernels/cuda/bad_index_flag.cuh"
#include "kernels/cuda/loops.cuh"
#include "kernels/index_views.h"

namespace mantissa::cuda {
namespace {

template <typename U>
__global__ void __launch_bounds__(kBlockSize)
    gather_rows(const U* weight, const int64_t* idx, U* out, int64_t n, int64_t D, int64_t rows,
                unsigned long long* bad) {
  for (int64_t i = detail::global_thread(); i < n * D; i += detail::grid_stride()) {
    const int64_t k = idx[i / D];
    if (k < 0 || k >= rows) {
      record_bad_index(bad, k);
      continue;
    }
    out[i] = weight[k * D + i % D];
  }
}

template <typename U>
void launch_gather(const Tensor& out, const Tensor& weight, const Tensor& indices,
                   unsigned long long* bad) {
  const int64_t n = indices.numel(), D = weight.size(1);
  gather_rows<U><<<grid_for(n * D), kBlockSize, 0, detail::current_stream()>>>(
      static_cast<const U*>(weight.data_ptr()), static_cast<const int64_t*>(indices.data_ptr()),
      static_cast<U*>(out.data_ptr()), n, D, weight.size(0), bad);
  MT_CUDA_CHECK_LAUNCH();
}

// A byte copy of rows: any dtype, by element size.
void embedding_forward_cuda(const Tensor& out, const Tensor& weight, const Tensor& indices) {
  if (indices.numel() == 0) return;
  DeviceGuard guard(out.device().index());
  const BadIndexFlag flag(out.device(), "embedding", 0, weight.size(0));
  unsigned long long* bad = flag.device_ptr();
  if (weight.size(1) > 0) {
    switch (weight.element_size()) {
      case 1:
        launch_gather<uint8_t>(out, weight, indices, bad);
        break;
      case 2:
        launch_gather<uint16_t>(out, weight, indices, bad);
        break;
      case 4:
        launch_gather<uint32_t>(out, weight, indices, bad);
        break;
      case 8:
        launch_gather<uint64_t>(out, weight, indices, bad);
        break;
      default:
        ::mantissa::detail::throw_not_implemented("embedding", weight.dtype(), weight.device());
    }
  }
  flag.check();
}

__global__ void __launch_bounds__(kBlockSize) iota(int64_t* out, int64_t n) {
  for (int64_t i = detail::global_thread(); i < n; i += detail::grid_stride()) out[i] = i;
}

// Thread (j, d): if sorted position j starts its row's run, the row's column d.
template <typename T>
__global__ void __launch_bounds__(kBlockSize)
    sum_sorted_rows(const int64_t* rows_sorted, const int64_t* order, const T* grad_out,
                    T* grad_weight, int64_t n, int64_t D, int64_t rows, int64_t padding_idx) {
  using M = opmath_t<T>;
  for (int64_t i = detail::global_thread(); i < n * D; i += detail::grid_stride()) {
    const int64_t j = i / D, d = i % D;
    const int64_t row = rows_sorted[j];
    if (row == padding_idx || row < 0 || row >= rows || (j > 0 && rows_sorted[j - 1] == row))
      continue;
    M acc = 0;
    for (int64_t k = j; k < n && rows_sorted[k] == row; ++k)
      acc += static_cast<M>(grad_out[order[k] * D + d]);
    grad_weight[row * D + d] = static_cast<T>(acc);
  }
}

void embedding_backward_cuda(const Tensor& grad_weight, const Tensor& grad_out,
                             const Tensor& indices, int64_t padding_idx) {
  if (grad_weight.numel() == 0) return;
  DeviceGuard guard(grad_weight.device().index());
  const cudaStream_t stream = detail::current_stream();
  MT_CUDA_CHECK(cudaMemsetAsync(grad_weight.data_ptr(), 0, grad_weight.nbytes(), stream));
  const int64_t n = indices.numel(), D = grad_weight.size(1), rows = grad_weight.size(0);
  if (n == 0) return;
  MT_CHECK(n <= INT_MAX, "embedding_backward: at most ", INT_MAX, " indices on CUDA, got ", n);
  const TensorOptions i64 = TensorOptions(grad_weight.device()).dtype(kInt64);
  Tensor positions = empty(Shape{n}, i64), order = empty(Shape{n}, i64);
  Tensor rows_sorted = empty(Shape{n}, i64);
  iota<<<grid_for(n), kBlockSize, 0, stream>>>(static_cast<int64_t*>(positions.data_ptr()), n);
  MT_CUDA_CHECK_LAUNCH();
  // Indices lie in [0, rows) (forward checked them): sort on the bits that can be set.
  int end_bit = 1;
  while (end_bit < 63 && (int64_t{1} << end_bit) < rows) ++end_bit;
  const auto* keys_in = static_cast<const int64_t*>(indices.data_ptr());
  auto* keys_out = static_cast<int64_t*>(rows_sorted.data_ptr());
  const auto* vals_in = static_cast<const int64_t*>(positions.data_ptr());
  auto* vals_out = static_cast<int64_t*>(order.data_ptr());
  size_t temp_bytes = 0;
  MT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in, keys_out, vals_in,
                                                vals_out, static_cast<int>(n), 0, end_bit, stream));
  Tensor temp = empty(Shape{static_cast<int64_t>(temp_bytes) + 1},
                      TensorOptions(grad_weight.device()).dtype(kUInt8));
  MT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data_ptr(), temp_bytes, keys_in, keys_out,
                                                vals_in, vals_out, static_cast<int>(n), 0, end_bit,
                                                stream));
  dispatch_dtype<kFloatingTypes>(
      grad_weight.dtype(), "embedding_backward", grad_weight.device(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        sum_sorted_rows<T><<<grid_for(n * D), kBlockSize, 0, stream>>>(
            keys_out, vals_out, static_cast<const T*>(grad_out.data_ptr()),
            static_cast<T*>(grad_weight.data_ptr()), n, D, rows, padding_idx);
        MT_CUDA_CHECK_LAUNCH();
      });
}

}  // namespace

MT_REGISTER_KERNEL(embedding_forward_kernel, kCUDA, &embedding_forward_cuda);
MT_REGISTER_KERNEL(embedding_backward_kernel, kCUDA, &embedding_backward_cuda);

}  // namespace mantissa::cuda
