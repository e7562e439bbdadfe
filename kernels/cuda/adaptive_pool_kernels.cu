// CUDA adaptive average pooling, with the windows and divisions of
// kernels/cpu/adaptive_pool_kernels.cpp. Forward: one thread per output element. Backward is a
// gather, not an atomic scatter: one thread per input element visits the outputs whose windows
// hold it in row-major order and sums their shares in opmath before one rounding, the order in
// which the CPU adds them, so results match the CPU bit for bit and never vary between runs.
#include <cstdint>

#include "engine/kernel_tables.h"
#include "kernels/adaptive_pool.h"
#include "kernels/cuda/loops.cuh"

namespace mantissa::cuda {
namespace {

template <typename T>
__global__ void __launch_bounds__(kBlockSize)
    forward_kernel(const T* x, T* y, int64_t H, int64_t W, int64_t Ho, int64_t Wo, int64_t n) {
  using M = opmath_t<T>;
  for (int64_t i = detail::global_thread(); i < n; i += detail::grid_stride()) {
    const int64_t ow = i % Wo, oh = (i / Wo) % Ho, plane = i / (Wo * Ho);
    const T* xp = x + plane * H * W;
    const int64_t h0 = adaptive_start(oh, H, Ho), h1 = adaptive_end(oh, H, Ho);
    const int64_t w0 = adaptive_start(ow, W, Wo), w1 = adaptive_end(ow, W, Wo);
    M sum = 0;
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t iw = w0; iw < w1; ++iw) sum += static_cast<M>(xp[ih * W + iw]);
    y[i] = static_cast<T>(sum / static_cast<M>(h1 - h0) / static_cast<M>(w1 - w0));
  }
}

// Outputs [first, last] along one dim whose window can hold input position i.
__device__ __forceinline__ void candidates(int64_t i, int64_t n_in, int64_t n_out, int64_t& first,
                                           int64_t& last) {
  first = (i * n_out) / n_in;
  last = ((i + 1) * n_out - 1) / n_in;
  if (last > n_out - 1) last = n_out - 1;
}

template <typename T>
__global__ void __launch_bounds__(kBlockSize)
    backward_kernel(const T* go, T* gx, int64_t H, int64_t W, int64_t Ho, int64_t Wo, int64_t n) {
  using M = opmath_t<T>;
  for (int64_t i = detail::global_thread(); i < n; i += detail::grid_stride()) {
    const int64_t iw = i % W, ih = (i / W) % H, plane = i / (W * H);
    const T* gp = go + plane * Ho * Wo;
    int64_t oh0, oh1, ow0, ow1;
    candidates(ih, H, Ho, oh0, oh1);
    candidates(iw, W, Wo, ow0, ow1);
    M acc = 0;
    for (int64_t oh = oh0; oh <= oh1; ++oh) {
      const int64_t h0 = adaptive_start(oh, H, Ho), h1 = adaptive_end(oh, H, Ho);
      if (ih < h0 || ih >= h1) continue;
      for (int64_t ow = ow0; ow <= ow1; ++ow) {
        const int64_t w0 = adaptive_start(ow, W, Wo), w1 = adaptive_end(ow, W, Wo);
        if (iw < w0 || iw >= w1) continue;
        acc += static_cast<M>(gp[oh * Wo + ow]) / static_cast<M>(h1 - h0) / static_cast<M>(w1 - w0);
      }
    }
    gx[i] = static_cast<T>(acc);
  }
}

void adaptive_avg_pool2d_forward_cuda(const Tensor& out, const Tensor& input) {
  const int64_t n = out.numel();
  if (n == 0) return;
  DeviceGuard guard(out.device().index());
  dispatch_dtype<kFloatingTypes>(out.dtype(), "adaptive_avg_pool2d", out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    forward_kernel<T><<<grid_for(n), kBlockSize, 0, detail::current_stream()>>>(
        static_cast<const T*>(input.data_ptr()), static_cast<T*>(out.data_ptr()), input.size(2),
        input.size(3), out.size(2), out.size(3), n);
    MT_CUDA_CHECK_LAUNCH();
  });
}

void adaptive_avg_pool2d_backward_cuda(const Tensor& grad_input, const Tensor& grad_out) {
  const int64_t n = grad_input.numel();
  if (n == 0) return;
  DeviceGuard guard(grad_input.device().index());
  dispatch_dtype<kFloatingTypes>(
      grad_input.dtype(), "adaptive_avg_pool2d_backward", grad_input.device(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        backward_kernel<T><<<grid_for(n), kBlockSize, 0, detail::current_stream()>>>(
            static_cast<const T*>(grad_out.data_ptr()), static_cast<T*>(grad_input.data_ptr()),
            grad_input.size(2), grad_input.size(3), grad_out.size(2), grad_out.size(3), n);
        MT_CUDA_CHECK_LAUNCH();
      });
}

}  // namespace

MT_REGISTER_KERNEL(adaptive_avg_pool2d_forward_kernel, kCUDA, &adaptive_avg_pool2d_forward_cuda);
MT_REGISTER_KERNEL(adaptive_avg_pool2d_backward_kernel, kCUDA, &adaptive_avg_pool2d_backward_cuda);

}  // namespace mantissa::cuda
