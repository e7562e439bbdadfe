// CPU embedding: a row gather forward and a row scatter-add backward.
//
// Backward walks the indices in order and adds each grad_out row into its weight row in opmath
// (a float32 buffer for the half types, rounded once at the end), so every row sums its
// contributions in order of n: the CUDA kernel sums in that same order and gets the same bits.
#include <cstring>
#include <type_traits>
#include <vector>

#include "engine/kernel_tables.h"
#include "kernels/cpu/worker_pool.h"
#include "kernels/index_views.h"

namespace mantissa::cpu {
namespace {

void check_indices(const char* op, const int64_t* idx, int64_t n, int64_t rows) {
  for (int64_t i = 0; i < n; ++i)
    if (idx[i] < 0 || idx[i] >= rows) index_views::throw_out_of_bounds(op, idx[i], 0, rows);
}

void embedding_forward_cpu(const Tensor& out, const Tensor& weight, const Tensor& indices) {
  const int64_t n = indices.numel(), rows = weight.size(0), D = weight.size(1);
  const int64_t* idx = indices.data<int64_t>();
  check_indices("embedding", idx, n, rows);
  if (out.numel() == 0) return;
  const size_t row_bytes = static_cast<size_t>(D * weight.element_size());
  const auto* src = static_cast<const char*>(weight.data_ptr());
  auto* dst = static_cast<char*>(out.data_ptr());
  parallel_ranges(
      n,
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i)
          std::memcpy(dst + i * row_bytes, src + idx[i] * static_cast<int64_t>(row_bytes),
                      row_bytes);
      },
      n * D);
}

template <typename T>
void backward_impl(const Tensor& grad_weight, const Tensor& grad_out, const int64_t* idx, int64_t n,
                   int64_t padding_idx) {
  using Acc = opmath_t<T>;
  const int64_t rows = grad_weight.size(0), D = grad_weight.size(1);
  const T* go = grad_out.data<T>();
  T* gw = grad_weight.data<T>();
  std::vector<Acc> buffer;
  Acc* acc = nullptr;
  if constexpr (std::is_same_v<Acc, T>) {
    acc = gw;
  } else {
    buffer.resize(static_cast<size_t>(rows * D));
    acc = buffer.data();
  }
  std::fill(acc, acc + rows * D, Acc(0));
  for (int64_t i = 0; i < n; ++i) {
    if (idx[i] == padding_idx) continue;
    Acc* row = acc + idx[i] * D;
    const T* g = go + i * D;
    for (int64_t d = 0; d < D; ++d) row[d] += static_cast<Acc>(g[d]);
  }
  if constexpr (!std::is_same_v<Acc, T>) {
    for (int64_t i = 0; i < rows * D; ++i) gw[i] = static_cast<T>(acc[i]);
  }
}

void embedding_backward_cpu(const Tensor& grad_weight, const Tensor& grad_out,
                            const Tensor& indices, int64_t padding_idx) {
  const int64_t n = indices.numel();
  const int64_t* idx = indices.data<int64_t>();
  check_indices("embedding_backward", idx, n, grad_weight.size(0));
  if (grad_weight.numel() == 0) return;
  dispatch_dtype<kFloatingTypes>(grad_weight.dtype(), "embedding_backward", grad_weight.device(),
                                 [&](auto tag) {
                                   using T = typename decltype(tag)::type;
                                   backward_impl<T>(grad_weight, grad_out, idx, n, padding_idx);
                                 });
}

}  // namespace

MT_REGISTER_KERNEL(embedding_forward_kernel, kCPU, &embedding_forward_cpu);
MT_REGISTER_KERNEL(embedding_backward_kernel, kCPU, &embedding_backward_cpu);

}  // namespace mantissa::cpu
