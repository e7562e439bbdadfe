// CUDA scans (cumsum, cumprod and cumprod's backward) and the stable sort: a thread per slice
// running the same per-slice code as the CPU (kernels/scan_sort_math.h), so results match the
// CPU bit for bit. Serial slices are simple and exact but leave the GPU underused for few long
// slices; sort scratch (2 positions per element) comes from the caching allocator.
#include <cuda_runtime.h>

#include "cuda/cuda_check.h"
#include "cuda/device_guard.h"
#include "engine/factory.h"
#include "engine/kernel_tables.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/scan_sort_math.h"

namespace mantissa::cuda {
namespace {

int64_t stride_along(const Tensor& t, int64_t dim) { return t.dim() == 0 ? 0 : t.stride(dim); }
int64_t size_along(const Tensor& t, int64_t dim) { return t.dim() == 0 ? 1 : t.size(dim); }

template <typename T, bool Prod>
__global__ void scan_kernel_impl(ReduceDims slices, int64_t count, T* out, int64_t os, const T* in,
                                 int64_t is, int64_t n, bool reverse, bool exclusive) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t s = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; s < count;
       s += step) {
    int64_t in_off = 0, out_off = 0;
    slices.offsets(s, in_off, out_off);
    scan_slice<T, Prod>(out + out_off, os, in + in_off, is, n, reverse, exclusive);
  }
}

template <bool Prod>
void scan_cuda(const Tensor& out, const Tensor& in, int64_t dim, bool reverse, bool exclusive) {
  MT_ASSERT(out.shape() == in.shape() && out.dtype() == in.dtype(), Prod ? "cumprod" : "cumsum",
            ": out ", out.shape(), " ", out.dtype(), " for input ", in.shape(), " ", in.dtype());
  if (in.numel() == 0) return;
  DeviceGuard guard(in.device().index());
  dispatch_dtype<kAllTypes>(in.dtype(), Prod ? "cumprod" : "cumsum", in.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const ReduceDims slices = make_slices(out, in, dim);
    const int64_t count = slices.numel();
    scan_kernel_impl<T, Prod><<<grid_for(count), kBlockSize, 0, detail::current_stream()>>>(
        slices, count, static_cast<T*>(out.data_ptr()), stride_along(out, dim),
        static_cast<const T*>(in.data_ptr()), stride_along(in, dim), size_along(in, dim), reverse,
        exclusive);
    MT_CUDA_CHECK_LAUNCH();
  });
}

template <typename T>
__global__ void cumprod_backward_impl(ReduceDims a, ReduceDims b, int64_t count, T* gx, int64_t gxs,
                                      const T* g, int64_t gs, const T* x, int64_t xs, const T* y,
                                      int64_t ys, int64_t n) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t s = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; s < count;
       s += step) {
    int64_t g_off = 0, gx_off = 0, x_off = 0, y_off = 0;
    a.offsets(s, g_off, gx_off);
    b.offsets(s, x_off, y_off);
    cumprod_backward_slice<T>(gx + gx_off, gxs, g + g_off, gs, x + x_off, xs, y + y_off, ys, n);
  }
}

void cumprod_backward_cuda(const Tensor& grad_in, const Tensor& grad_out, const Tensor& in,
                           const Tensor& out, int64_t dim) {
  if (in.numel() == 0) return;
  DeviceGuard guard(in.device().index());
  dispatch_dtype<kFloatingTypes>(in.dtype(), "cumprod_backward", in.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const ReduceDims a = make_slices(grad_in, grad_out, dim), b = make_slices(out, in, dim);
    const int64_t count = a.numel();
    cumprod_backward_impl<T><<<grid_for(count), kBlockSize, 0, detail::current_stream()>>>(
        a, b, count, static_cast<T*>(grad_in.data_ptr()), stride_along(grad_in, dim),
        static_cast<const T*>(grad_out.data_ptr()), stride_along(grad_out, dim),
        static_cast<const T*>(in.data_ptr()), stride_along(in, dim),
        static_cast<const T*>(out.data_ptr()), stride_along(out, dim), size_along(in, dim));
    MT_CUDA_CHECK_LAUNCH();
  });
}

template <typename T>
__global__ void sort_impl(ReduceDims slices, int64_t count, T* values, int64_t* indices, int64_t os,
                          const T* in, int64_t is, int64_t n, int64_t* scratch, bool descending) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t s = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; s < count;
       s += step) {
    int64_t in_off = 0, out_off = 0;
    slices.offsets(s, in_off, out_off);
    int64_t* order = scratch + 2 * n * s;
    sort_slice<T>(order, order + n, in + in_off, is, n, descending);
    for (int64_t k = 0; k < n; ++k) {
      values[out_off + k * os] = in[in_off + order[k] * is];
      indices[out_off + k * os] = order[k];
    }
  }
}

void sort_cuda(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t dim,
               bool descending) {
  MT_ASSERT(values.is_contiguous() && indices.is_contiguous() && values.shape() == in.shape() &&
                indices.shape() == in.shape(),
            "sort: values and indices must be contiguous with the input's shape ", in.shape());
  if (in.numel() == 0) return;
  DeviceGuard guard(in.device().index());
  dispatch_dtype<kAllTypesAndBool>(in.dtype(), "sort", in.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const ReduceDims slices = make_slices(values, in, dim);
    const int64_t count = slices.numel(), n = size_along(in, dim);
    // Stream-ordered: freed when this returns, reused only by work queued after the kernel.
    const Tensor scratch =
        empty(Shape{2 * in.numel()}, TensorOptions(in.device()).dtype(DType::Int64));
    sort_impl<T><<<grid_for(count), kBlockSize, 0, detail::current_stream()>>>(
        slices, count, static_cast<T*>(values.data_ptr()),
        static_cast<int64_t*>(indices.data_ptr()), stride_along(values, dim),
        static_cast<const T*>(in.data_ptr()), stride_along(in, dim), n,
        static_cast<int64_t*>(scratch.data_ptr()), descending);
    MT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

MT_REGISTER_KERNEL(cumsum_kernel, kCUDA, &scan_cuda<false>);
MT_REGISTER_KERNEL(cumprod_kernel, kCUDA, &scan_cuda<true>);
MT_REGISTER_KERNEL(cumprod_backward_kernel, kCUDA, &cumprod_backward_cuda);
MT_REGISTER_KERNEL(sort_kernel, kCUDA, &sort_cuda);

}  // namespace mantissa::cuda
