// CPU adaptive average pooling, forward and backward, plane by plane (OpenMP splits the planes,
// so results never depend on the thread count). Window bounds come from kernels/adaptive_pool.h,
// shared with the CUDA kernels; a window's mean is its sum divided by its height, then by its
// width, as PyTorch's CPU kernel divides.
#include <algorithm>
#include <vector>

#include "engine/kernel_tables.h"
#include "kernels/adaptive_pool.h"
#include "kernels/cpu/loops.h"

namespace mantissa::cpu {
namespace {

template <typename T>
void forward_impl(const Tensor& out, const Tensor& input) {
  using Acc = opmath_t<T>;
  const int64_t planes = input.size(0) * input.size(1), H = input.size(2), W = input.size(3);
  const int64_t Ho = out.size(2), Wo = out.size(3);
  const T* x = input.data<T>();
  T* y = out.data<T>();
#pragma omp parallel for if (planes * H * W >= kOmpGrain)
  for (int64_t plane = 0; plane < planes; ++plane) {
    const T* xp = x + plane * H * W;
    T* yp = y + plane * Ho * Wo;
    for (int64_t oh = 0; oh < Ho; ++oh) {
      const int64_t h0 = adaptive_start(oh, H, Ho), h1 = adaptive_end(oh, H, Ho);
      for (int64_t ow = 0; ow < Wo; ++ow) {
        const int64_t w0 = adaptive_start(ow, W, Wo), w1 = adaptive_end(ow, W, Wo);
        Acc sum = 0;
        for (int64_t ih = h0; ih < h1; ++ih)
          for (int64_t iw = w0; iw < w1; ++iw) sum += static_cast<Acc>(xp[ih * W + iw]);
        yp[oh * Wo + ow] =
            static_cast<T>(sum / static_cast<Acc>(h1 - h0) / static_cast<Acc>(w1 - w0));
      }
    }
  }
}

template <typename T>
void backward_impl(const Tensor& grad_input, const Tensor& grad_out) {
  using Acc = opmath_t<T>;
  const int64_t planes = grad_input.size(0) * grad_input.size(1);
  const int64_t H = grad_input.size(2), W = grad_input.size(3);
  const int64_t Ho = grad_out.size(2), Wo = grad_out.size(3);
  const T* go = grad_out.data<T>();
  T* gx = grad_input.data<T>();
#pragma omp parallel if (planes * H * W >= kOmpGrain)
  {
    std::vector<Acc> acc(static_cast<size_t>(H * W));
#pragma omp for
    for (int64_t plane = 0; plane < planes; ++plane) {
      std::fill(acc.begin(), acc.end(), Acc(0));
      const T* gp = go + plane * Ho * Wo;
      for (int64_t oh = 0; oh < Ho; ++oh) {
        const int64_t h0 = adaptive_start(oh, H, Ho), h1 = adaptive_end(oh, H, Ho);
        for (int64_t ow = 0; ow < Wo; ++ow) {
          const int64_t w0 = adaptive_start(ow, W, Wo), w1 = adaptive_end(ow, W, Wo);
          const Acc share = static_cast<Acc>(gp[oh * Wo + ow]) / static_cast<Acc>(h1 - h0) /
                            static_cast<Acc>(w1 - w0);
          for (int64_t ih = h0; ih < h1; ++ih)
            for (int64_t iw = w0; iw < w1; ++iw) acc[ih * W + iw] += share;
        }
      }
      T* dst = gx + plane * H * W;
      for (int64_t i = 0; i < H * W; ++i) dst[i] = static_cast<T>(acc[i]);
    }
  }
}

void adaptive_avg_pool2d_forward_cpu(const Tensor& out, const Tensor& input) {
  if (out.numel() == 0) return;
  dispatch_dtype<kFloatingTypes>(out.dtype(), "adaptive_avg_pool2d", out.device(), [&](auto tag) {
    forward_impl<typename decltype(tag)::type>(out, input);
  });
}

void adaptive_avg_pool2d_backward_cpu(const Tensor& grad_input, const Tensor& grad_out) {
  if (grad_input.numel() == 0) return;
  dispatch_dtype<kFloatingTypes>(
      grad_input.dtype(), "adaptive_avg_pool2d_backward", grad_input.device(),
      [&](auto tag) { backward_impl<typename decltype(tag)::type>(grad_input, grad_out); });
}

}  // namespace

MT_REGISTER_KERNEL(adaptive_avg_pool2d_forward_kernel, kCPU, &adaptive_avg_pool2d_forward_cpu);
MT_REGISTER_KERNEL(adaptive_avg_pool2d_backward_kernel, kCPU, &adaptive_avg_pool2d_backward_cpu);

}  // namespace mantissa::cpu
