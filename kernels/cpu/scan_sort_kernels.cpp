// CPU scans (cumsum, cumprod and cumprod's backward) and the stable sort, one slice per
// iteration on the per-slice math of kernels/scan_sort_math.h, which the CUDA kernels share.
// Slices are independent, so splitting them over threads never changes a result.
#include <memory>

#include "engine/kernel_tables.h"
#include "kernels/cpu/loops.h"
#include "kernels/scan_sort_math.h"

namespace mantissa::cpu {
namespace {

// body(slice) for every slice of `in` along dim, threaded when the tensor is large.
template <typename F>
void for_slices(int64_t slices, int64_t n, const F& body) {
#if defined(_OPENMP)
  if (use_threads(slices * n) && slices > 1) {
#pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < slices; ++s) body(s);
    return;
  }
#endif
  for (int64_t s = 0; s < slices; ++s) body(s);
}

template <bool Prod>
void scan_cpu(const Tensor& out, const Tensor& in, int64_t dim, bool reverse, bool exclusive) {
  MT_ASSERT(out.shape() == in.shape() && out.dtype() == in.dtype(), Prod ? "cumprod" : "cumsum",
            ": out ", out.shape(), " ", out.dtype(), " for input ", in.shape(), " ", in.dtype());
  if (in.numel() == 0) return;
  dispatch_dtype<kAllTypes>(in.dtype(), Prod ? "cumprod" : "cumsum", in.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const ReduceDims slices = make_slices(out, in, dim);
    const int64_t n = in.dim() == 0 ? 1 : in.size(dim);
    const int64_t is = in.dim() == 0 ? 0 : in.stride(dim);
    const int64_t os = out.dim() == 0 ? 0 : out.stride(dim);
    const T* src = static_cast<const T*>(in.data_ptr());
    T* dst = static_cast<T*>(out.data_ptr());
    for_slices(slices.numel(), n, [&](int64_t s) {
      int64_t in_off, out_off;
      slices.offsets(s, in_off, out_off);
      scan_slice<T, Prod>(dst + out_off, os, src + in_off, is, n, reverse, exclusive);
    });
  });
}

void cumprod_backward_cpu(const Tensor& grad_in, const Tensor& grad_out, const Tensor& in,
                          const Tensor& out, int64_t dim) {
  if (in.numel() == 0) return;
  dispatch_dtype<kFloatingTypes>(in.dtype(), "cumprod_backward", in.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t n = in.dim() == 0 ? 1 : in.size(dim);
    auto stride = [&](const Tensor& t) { return t.dim() == 0 ? 0 : t.stride(dim); };
    // Offsets of one slice in each operand: the plan walks two at a time.
    const ReduceDims a = make_slices(grad_in, grad_out, dim), b = make_slices(out, in, dim);
    T* gx = static_cast<T*>(grad_in.data_ptr());
    const T* g = static_cast<const T*>(grad_out.data_ptr());
    const T* x = static_cast<const T*>(in.data_ptr());
    const T* y = static_cast<const T*>(out.data_ptr());
    for_slices(a.numel(), n, [&](int64_t s) {
      int64_t g_off, gx_off, x_off, y_off;
      a.offsets(s, g_off, gx_off);
      b.offsets(s, x_off, y_off);
      cumprod_backward_slice<T>(gx + gx_off, stride(grad_in), g + g_off, stride(grad_out),
                                x + x_off, stride(in), y + y_off, stride(out), n);
    });
  });
}

void sort_cpu(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t dim,
              bool descending) {
  MT_ASSERT(values.is_contiguous() && indices.is_contiguous() && values.shape() == in.shape() &&
                indices.shape() == in.shape(),
            "sort: values and indices must be contiguous with the input's shape ", in.shape());
  if (in.numel() == 0) return;
  dispatch_dtype<kAllTypesAndBool>(in.dtype(), "sort", in.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const ReduceDims slices = make_slices(values, in, dim);
    const int64_t n = in.dim() == 0 ? 1 : in.size(dim);
    const int64_t is = in.dim() == 0 ? 0 : in.stride(dim);
    const int64_t os = values.dim() == 0 ? 0 : values.stride(dim);
    const T* src = static_cast<const T*>(in.data_ptr());
    T* v = static_cast<T*>(values.data_ptr());
    int64_t* idx = static_cast<int64_t*>(indices.data_ptr());
    for_slices(slices.numel(), n, [&](int64_t s) {
      const std::unique_ptr<int64_t[]> order(new int64_t[2 * n]);
      int64_t in_off, out_off;
      slices.offsets(s, in_off, out_off);
      sort_slice<T>(order.get(), order.get() + n, src + in_off, is, n, descending);
      for (int64_t k = 0; k < n; ++k) {
        v[out_off + k * os] = src[in_off + order[k] * is];
        idx[out_off + k * os] = order[k];
      }
    });
  });
}

}  // namespace

MT_REGISTER_KERNEL(cumsum_kernel, kCPU, &scan_cpu<false>);
MT_REGISTER_KERNEL(cumprod_kernel, kCPU, &scan_cpu<true>);
MT_REGISTER_KERNEL(cumprod_backward_kernel, kCPU, &cumprod_backward_cpu);
MT_REGISTER_KERNEL(sort_kernel, kCPU, &sort_cpu);

}  // namespace mantissa::cpu
