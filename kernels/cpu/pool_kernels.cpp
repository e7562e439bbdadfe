// CPU max and average 2-D pooling, forward and backward, with PyTorch's window rules.
//
// Every kernel works plane by plane ([N*C] planes of H x W) and OpenMP splits the planes, so each
// output element is computed by exactly one thread in a fixed order: results never depend on
// the thread count. Backward passes accumulate a plane's gradient in opmath (overlapping
// windows add several contributions to one input) and round it once on store.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/kernel_tables.h"
#include "kernels/cpu/loops.h"

namespace mantissa::cpu {
namespace {

struct Planes {
  int64_t planes, H, W, Ho, Wo;
  Planes(const Shape& in, const Shape& out)
      : planes(in[0] * in[1]), H(in[2]), W(in[3]), Ho(out[2]), Wo(out[3]) {}
};

// Avg pooling's window [h0, h1) x [w0, w1) clipped to the input, and its divisor.
struct AvgWindow {
  int64_t h0, h1, w0, w1;
  int64_t divisor;
};
AvgWindow avg_window(int64_t oh, int64_t ow, const Planes& s, const Pool2dParams& p) {
  int64_t h0 = oh * p.stride[0] - p.padding[0], w0 = ow * p.stride[1] - p.padding[1];
  // The window may hang over the right padding only up to the padded edge (ceil_mode).
  int64_t h1 = std::min(h0 + p.kernel[0], s.H + p.padding[0]);
  int64_t w1 = std::min(w0 + p.kernel[1], s.W + p.padding[1]);
  const int64_t padded_size = (h1 - h0) * (w1 - w0);
  h0 = std::max<int64_t>(h0, 0);
  w0 = std::max<int64_t>(w0, 0);
  h1 = std::min(h1, s.H);
  w1 = std::min(w1, s.W);
  int64_t divisor = p.count_include_pad ? padded_size : (h1 - h0) * (w1 - w0);
  if (p.divisor_override != 0) divisor = p.divisor_override;
  return {h0, h1, w0, w1, divisor};
}

template <typename T>
void max_forward_impl(const Tensor& out, const Tensor& indices, const Tensor& input,
                      const Pool2dParams& p) {
  using Acc = opmath_t<T>;
  const Planes s(input.shape(), out.shape());
  const T* x = input.data<T>();
  T* y = out.data<T>();
  int64_t* idx = indices.data<int64_t>();
  const int64_t kh = p.kernel[0], kw = p.kernel[1], dh = p.dilation[0], dw = p.dilation[1];
#pragma omp parallel for if (s.planes * s.Ho * s.Wo * kh * kw >= kOmpGrain)
  for (int64_t plane = 0; plane < s.planes; ++plane) {
    const T* xp = x + plane * s.H * s.W;
    T* yp = y + plane * s.Ho * s.Wo;
    int64_t* ip = idx + plane * s.Ho * s.Wo;
    for (int64_t oh = 0; oh < s.Ho; ++oh) {
      int64_t h0 = oh * p.stride[0] - p.padding[0];
      const int64_t h1 = std::min(h0 + (kh - 1) * dh + 1, s.H);
      while (h0 < 0) h0 += dh;
      for (int64_t ow = 0; ow < s.Wo; ++ow) {
        int64_t w0 = ow * p.stride[1] - p.padding[1];
        const int64_t w1 = std::min(w0 + (kw - 1) * dw + 1, s.W);
        while (w0 < 0) w0 += dw;
        int64_t best_index = h0 * s.W + w0;
        Acc best = -std::numeric_limits<Acc>::infinity();
        for (int64_t ih = h0; ih < h1; ih += dh) {
          for (int64_t iw = w0; iw < w1; iw += dw) {
            const int64_t i = ih * s.W + iw;
            const Acc v = static_cast<Acc>(xp[i]);
            if (v > best || std::isnan(v)) {
              best = v;
              best_index = i;
            }
          }
        }
        yp[oh * s.Wo + ow] = static_cast<T>(best);
        ip[oh * s.Wo + ow] = best_index;
      }
    }
  }
}

template <typename T>
void max_backward_impl(const Tensor& grad_input, const Tensor& grad_out, const Tensor& indices) {
  using Acc = opmath_t<T>;
  const Planes s(grad_input.shape(), grad_out.shape());
  const T* go = grad_out.data<T>();
  const int64_t* idx = indices.data<int64_t>();
  T* gx = grad_input.data<T>();
#pragma omp parallel if (s.planes * s.H * s.W >= kOmpGrain)
  {
    std::vector<Acc> acc(static_cast<size_t>(s.H * s.W));
#pragma omp for
    for (int64_t plane = 0; plane < s.planes; ++plane) {
      std::fill(acc.begin(), acc.end(), Acc(0));
      const T* gp = go + plane * s.Ho * s.Wo;
      const int64_t* ip = idx + plane * s.Ho * s.Wo;
      // A window lying wholly in the padding (possible with dilation) saw no input element.
      for (int64_t o = 0; o < s.Ho * s.Wo; ++o)
        if (ip[o] >= 0 && ip[o] < s.H * s.W) acc[ip[o]] += static_cast<Acc>(gp[o]);
      T* dst = gx + plane * s.H * s.W;
      for (int64_t i = 0; i < s.H * s.W; ++i) dst[i] = static_cast<T>(acc[i]);
    }
  }
}

template <typename T>
void avg_forward_impl(const Tensor& out, const Tensor& input, const Pool2dParams& p) {
  using Acc = opmath_t<T>;
  const Planes s(input.shape(), out.shape());
  const T* x = input.data<T>();
  T* y = out.data<T>();
#pragma omp parallel for if (s.planes * s.Ho * s.Wo * p.kernel[0] * p.kernel[1] >= kOmpGrain)
  for (int64_t plane = 0; plane < s.planes; ++plane) {
    const T* xp = x + plane * s.H * s.W;
    T* yp = y + plane * s.Ho * s.Wo;
    for (int64_t oh = 0; oh < s.Ho; ++oh) {
      for (int64_t ow = 0; ow < s.Wo; ++ow) {
        const AvgWindow win = avg_window(oh, ow, s, p);
        Acc sum = 0;
        for (int64_t ih = win.h0; ih < win.h1; ++ih)
          for (int64_t iw = win.w0; iw < win.w1; ++iw) sum += static_cast<Acc>(xp[ih * s.W + iw]);
        yp[oh * s.Wo + ow] = static_cast<T>(sum / static_cast<Acc>(win.divisor));
      }
    }
  }
}

template <typename T>
void avg_backward_impl(const Tensor& grad_input, const Tensor& grad_out, const Pool2dParams& p) {
  using Acc = opmath_t<T>;
  const Planes s(grad_input.shape(), grad_out.shape());
  const T* go = grad_out.data<T>();
  T* gx = grad_input.data<T>();
#pragma omp parallel if (s.planes * s.H * s.W >= kOmpGrain)
  {
    std::vector<Acc> acc(static_cast<size_t>(s.H * s.W));
#pragma omp for
    for (int64_t plane = 0; plane < s.planes; ++plane) {
      std::fill(acc.begin(), acc.end(), Acc(0));
      const T* gp = go + plane * s.Ho * s.Wo;
      for (int64_t oh = 0; oh < s.Ho; ++oh) {
        for (int64_t ow = 0; ow < s.Wo; ++ow) {
          const AvgWindow win = avg_window(oh, ow, s, p);
          const Acc share = static_cast<Acc>(gp[oh * s.Wo + ow]) / static_cast<Acc>(win.divisor);
          for (int64_t ih = win.h0; ih < win.h1; ++ih)
            for (int64_t iw = win.w0; iw < win.w1; ++iw) acc[ih * s.W + iw] += share;
        }
      }
      T* dst = gx + plane * s.H * s.W;
      for (int64_t i = 0; i < s.H * s.W; ++i) dst[i] = static_cast<T>(acc[i]);
    }
  }
}

void max_pool2d_forward_cpu(const Tensor& out, const Tensor& indices, const Tensor& input,
                            const Pool2dParams& p) {
  if (out.numel() == 0) return;
  dispatch_dtype<kFloatingTypes>(out.dtype(), "max_pool2d", out.device(), [&](auto tag) {
    max_forward_impl<typename decltype(tag)::type>(out, indices, input, p);
  });
}

void max_pool2d_backward_cpu(const Tensor& grad_input, const Tensor& grad_out,
                             const Tensor& indices, const Pool2dParams&) {
  if (grad_input.numel() == 0) return;
  dispatch_dtype<kFloatingTypes>(grad_input.dtype(), "max_pool2d_backward", grad_input.device(),
                                 [&](auto tag) {
                                   using T = typename decltype(tag)::type;
                                   max_backward_impl<T>(grad_input, grad_out, indices);
                                 });
}

void avg_pool2d_forward_cpu(const Tensor& out, const Tensor& input, const Pool2dParams& p) {
  if (out.numel() == 0) return;
  dispatch_dtype<kFloatingTypes>(out.dtype(), "avg_pool2d", out.device(), [&](auto tag) {
    avg_forward_impl<typename decltype(tag)::type>(out, input, p);
  });
}

void avg_pool2d_backward_cpu(const Tensor& grad_input, const Tensor& grad_out,
                             const Pool2dParams& p) {
  if (grad_input.numel() == 0) return;
  dispatch_dtype<kFloatingTypes>(grad_input.dtype(), "avg_pool2d_backward", grad_input.device(),
                                 [&](auto tag) {
                                   using T = typename decltype(tag)::type;
                                   avg_backward_impl<T>(grad_input, grad_out, p);
                                 });
}

}  // namespace

MT_REGISTER_KERNEL(max_pool2d_forward_kernel, kCPU, &max_pool2d_forward_cpu);
MT_REGISTER_KERNEL(max_pool2d_backward_kernel, kCPU, &max_pool2d_backward_cpu);
MT_REGISTER_KERNEL(avg_pool2d_forward_kernel, kCPU, &avg_pool2d_forward_cpu);
MT_REGISTER_KERNEL(avg_pool2d_backward_kernel, kCPU, &avg_pool2d_backward_cpu);

}  // namespace mantissa::cpu
