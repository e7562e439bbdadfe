// CUDA max and average 2-D pooling, with the window rules of kernels/cpu/pool_kernels.cpp.
// cuDNN pooling is not used: it has neither argmax indices nor dilation.
//
// Forward: one thread per output element walks its window in the CPU's order (NaN wins, the first
// maximum wins ties), so values and indices match the CPU exactly. Backward is a gather, not an
// atomic scatter: one thread per input element visits, in row-major order, every output whose
// window can contain it, and sums the matching contributions in opmath before one rounding. That
// is deterministic and adds in the CPU's order, so float results match the CPU bit for bit.
// As PyTorch's CUDA kernel, max backward credits a window only to an input element inside it;
// a window lying wholly in the padding (possible with dilation) contributes nothing.
#include <cstdint>
#include <limits>

#include "engine/kernel_tables.h"
#include "kernels/cuda/loops.cuh"

namespace mantissa::cuda {
namespace {

struct Geometry {
  int64_t planes, H, W, Ho, Wo;
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  bool count_include_pad;
  int64_t divisor_override;
  Geometry(const Shape& in, const Shape& out, const Pool2dParams& p)
      : planes(in[0] * in[1]),
        H(in[2]),
        W(in[3]),
        Ho(out[2]),
        Wo(out[3]),
        kh(p.kernel[0]),
        kw(p.kernel[1]),
        sh(p.stride[0]),
        sw(p.stride[1]),
        ph(p.padding[0]),
        pw(p.padding[1]),
        dh(p.dilation[0]),
        dw(p.dilation[1]),
        count_include_pad(p.count_include_pad),
        divisor_override(p.divisor_override) {}
};

__device__ __forceinline__ int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
__device__ __forceinline__ int64_t imax(int64_t a, int64_t b) { return a < b ? b : a; }

// Outputs [first, last) along one dim whose window (start o*s - p, extent (k-1)*d+1) can hold
// input position i. A superset: callers still test membership.
__device__ __forceinline__ void candidates(int64_t i, int64_t k, int64_t s, int64_t p, int64_t d,
                                           int64_t n_out, int64_t& first, int64_t& last) {
  const int64_t lo = i + p - (k - 1) * d;  // o*s >= lo
  first = lo <= 0 ? 0 : (lo + s - 1) / s;
  last = imin(n_out, (i + p) / s + 1);
}

struct AvgWindow {
  int64_t h0, h1, w0, w1, divisor;
};
__device__ __forceinline__ AvgWindow avg_window(int64_t oh, int64_t ow, const Geometry& g) {
  int64_t h0 = oh * g.sh - g.ph, w0 = ow * g.sw - g.pw;
  int64_t h1 = imin(h0 + g.kh, g.H + g.ph), w1 = imin(w0 + g.kw, g.W + g.pw);
  const int64_t padded_size = (h1 - h0) * (w1 - w0);
  h0 = imax(h0, 0);
  w0 = imax(w0, 0);
  h1 = imin(h1, g.H);
  w1 = imin(w1, g.W);
  int64_t divisor = g.count_include_pad ? padded_size : (h1 - h0) * (w1 - w0);
  if (g.divisor_override != 0) divisor = g.divisor_override;
  return {h0, h1, w0, w1, divisor};
}

template <typename T>
__global__ void __launch_bounds__(kBlockSize)
    max_forward_kernel(Geometry g, const T* x, T* y, int64_t* idx, int64_t n) {
  using M = opmath_t<T>;
  for (int64_t i = detail::global_thread(); i < n; i += detail::grid_stride()) {
    const int64_t ow = i % g.Wo, oh = (i / g.Wo) % g.Ho, plane = i / (g.Wo * g.Ho);
    const T* xp = x + plane * g.H * g.W;
    int64_t h0 = oh * g.sh - g.ph, w0 = ow * g.sw - g.pw;
    const int64_t h1 = imin(h0 + (g.kh - 1) * g.dh + 1, g.H);
    const int64_t w1 = imin(w0 + (g.kw - 1) * g.dw + 1, g.W);
    while (h0 < 0) h0 += g.dh;
    while (w0 < 0) w0 += g.dw;
    int64_t best_index = h0 * g.W + w0;
    M best = -std::numeric_limits<M>::infinity();
    for (int64_t ih = h0; ih < h1; ih += g.dh) {
      for (int64_t iw = w0; iw < w1; iw += g.dw) {
        const int64_t k = ih * g.W + iw;
        const M v = static_cast<M>(xp[k]);
        if (v > best || v != v) {
          best = v;
          best_index = k;
        }
      }
    }
    y[i] = static_cast<T>(best);
    idx[i] = best_index;
  }
}

template <typename T>
__global__ void __launch_bounds__(kBlockSize)
    max_backward_kernel(Geometry g, const T* go, const int64_t* idx, T* gx, int64_t n) {
  using M = opmath_t<T>;
  for (int64_t i = detail::global_thread(); i < n; i += detail::grid_stride()) {
    const int64_t iw = i % g.W, ih = (i / g.W) % g.H, plane = i / (g.W * g.H);
    const int64_t target = ih * g.W + iw;
    const T* gp = go + plane * g.Ho * g.Wo;
    const int64_t* ip = idx + plane * g.Ho * g.Wo;
    int64_t oh0, oh1, ow0, ow1;
    candidates(ih, g.kh, g.sh, g.ph, g.dh, g.Ho, oh0, oh1);
    candidates(iw, g.kw, g.sw, g.pw, g.dw, g.Wo, ow0, ow1);
    M acc = 0;
    for (int64_t oh = oh0; oh < oh1; ++oh)
      for (int64_t ow = ow0; ow < ow1; ++ow)
        if (ip[oh * g.Wo + ow] == target) acc += static_cast<M>(gp[oh * g.Wo + ow]);
    gx[i] = static_cast<T>(acc);
  }
}

template <typename T>
__global__ void __launch_bounds__(kBlockSize)
    avg_forward_kernel(Geometry g, const T* x, T* y, int64_t n) {
  using M = opmath_t<T>;
  for (int64_t i = detail::global_thread(); i < n; i += detail::grid_stride()) {
    const int64_t ow = i % g.Wo, oh = (i / g.Wo) % g.Ho, plane = i / (g.Wo * g.Ho);
    const T* xp = x + plane * g.H * g.W;
    const AvgWindow win = avg_window(oh, ow, g);
    M sum = 0;
    for (int64_t ih = win.h0; ih < win.h1; ++ih)
      for (int64_t iw = win.w0; iw < win.w1; ++iw) sum += static_cast<M>(xp[ih * g.W + iw]);
    y[i] = static_cast<T>(sum / static_cast<M>(win.divisor));
  }
}

template <typename T>
__global__ void __launch_bounds__(kBlockSize)
    avg_backward_kernel(Geometry g, const T* go, T* gx, int64_t n) {
  using M = opmath_t<T>;
  for (int64_t i = detail::global_thread(); i < n; i += detail::grid_stride()) {
    const int64_t iw = i % g.W, ih = (i / g.W) % g.H, plane = i / (g.W * g.H);
    const T* gp = go + plane * g.Ho * g.Wo;
    int64_t oh0, oh1, ow0, ow1;
    candidates(ih, g.kh, g.sh, g.ph, 1, g.Ho, oh0, oh1);
    candidates(iw, g.kw, g.sw, g.pw, 1, g.Wo, ow0, ow1);
    M acc = 0;
    for (int64_t oh = oh0; oh < oh1; ++oh) {
      for (int64_t ow = ow0; ow < ow1; ++ow) {
        const AvgWindow win = avg_window(oh, ow, g);
        if (ih < win.h0 || ih >= win.h1 || iw < win.w0 || iw >= win.w1) continue;
        acc += static_cast<M>(gp[oh * g.Wo + ow]) / static_cast<M>(win.divisor);
      }
    }
    gx[i] = static_cast<T>(acc);
  }
}

template <typename T>
const T* cdata(const Tensor& t) {
  return static_cast<const T*>(t.data_ptr());
}
template <typename T>
T* mdata(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

void max_pool2d_forward_cuda(const Tensor& out, const Tensor& indices, const Tensor& input,
                             const Pool2dParams& p) {
  const int64_t n = out.numel();
  if (n == 0) return;
  DeviceGuard guard(out.device().index());
  const Geometry g(input.shape(), out.shape(), p);
  dispatch_dtype<kFloatingTypes>(out.dtype(), "max_pool2d", out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    max_forward_kernel<T><<<grid_for(n), kBlockSize, 0, detail::current_stream()>>>(
        g, cdata<T>(input), mdata<T>(out), mdata<int64_t>(indices), n);
    MT_CUDA_CHECK_LAUNCH();
  });
}

void max_pool2d_backward_cuda(const Tensor& grad_input, const Tensor& grad_out,
                              const Tensor& indices, const Pool2dParams& p) {
  const int64_t n = grad_input.numel();
  if (n == 0) return;
  DeviceGuard guard(grad_input.device().index());
  const Geometry g(grad_input.shape(), grad_out.shape(), p);
  dispatch_dtype<kFloatingTypes>(
      grad_input.dtype(), "max_pool2d_backward", grad_input.device(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        max_backward_kernel<T><<<grid_for(n), kBlockSize, 0, detail::current_stream()>>>(
            g, cdata<T>(grad_out), cdata<int64_t>(indices), mdata<T>(grad_input), n);
        MT_CUDA_CHECK_LAUNCH();
      });
}

void avg_pool2d_forward_cuda(const Tensor& out, const Tensor& input, const Pool2dParams& p) {
  const int64_t n = out.numel();
  if (n == 0) return;
  DeviceGuard guard(out.device().index());
  const Geometry g(input.shape(), out.shape(), p);
  dispatch_dtype<kFloatingTypes>(out.dtype(), "avg_pool2d", out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    avg_forward_kernel<T><<<grid_for(n), kBlockSize, 0, detail::current_stream()>>>(
        g, cdata<T>(input), mdata<T>(out), n);
    MT_CUDA_CHECK_LAUNCH();
  });
}

void avg_pool2d_backward_cuda(const Tensor& grad_input, const Tensor& grad_out,
                              const Pool2dParams& p) {
  const int64_t n = grad_input.numel();
  if (n == 0) return;
  DeviceGuard guard(grad_input.device().index());
  const Geometry g(grad_input.shape(), grad_out.shape(), p);
  dispatch_dtype<kFloatingTypes>(
      grad_input.dtype(), "avg_pool2d_backward", grad_input.device(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        avg_backward_kernel<T><<<grid_for(n), kBlockSize, 0, detail::current_stream()>>>(
            g, cdata<T>(grad_out), mdata<T>(grad_input), n);
        MT_CUDA_CHECK_LAUNCH();
      });
}

}  // namespace

MT_REGISTER_KERNEL(max_pool2d_forward_kernel, kCUDA, &max_pool2d_forward_cuda);
MT_REGISTER_KERNEL(max_pool2d_backward_kernel, kCUDA, &max_pool2d_backward_cuda);
MT_REGISTER_KERNEL(avg_pool2d_forward_kernel, kCUDA, &avg_pool2d_forward_cuda);
MT_REGISTER_KERNEL(avg_pool2d_backward_kernel, kCUDA, &avg_pool2d_backward_cuda);

}  // namespace mantissa::cuda
