// The column matrices of a 2-D convolution, written once for the CPU and CUDA kernels of
// conv2d_im2col and conv2d_col2im (engine/kernel_tables.h), which the composed convolution
// (kernels/conv_composite.h) is built from.
//
// For an input [N, C, H, W] and a kh x kw window, cols [N, C*kh*kw, Ho*Wo] holds in row
// (c*kh + i)*kw + j, column oh*Wo + ow the input element the window at (oh, ow) reads through
// its tap (i, j): x[n, c, oh*sh - ph + i*dh, ow*sw - pw + j*dw], or 0 over the padding.
// col2im is its adjoint: each input element is the sum of the column entries that read it. It is
// written as a gather (each input element sums its own taps, in a fixed order) rather than a
// scatter of every column entry, so it needs no atomics and is deterministic on every device.
#pragma once

#include <cstdint>

#include "engine/macros.h"

namespace mantissa::conv_columns {

struct Geometry {
  int64_t N, C, H, W, kh, kw, Ho, Wo;
  int64_t sh, sw, ph, pw, dh, dw;

  MT_HOST_DEVICE int64_t rows() const { return C * kh * kw; }
  MT_HOST_DEVICE int64_t cols() const { return Ho * Wo; }
};

// PyTorch's output size of one dimension.
MT_HOST_DEVICE inline int64_t output_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

// cols[e] for the flat index e of cols [N, C*kh*kw, Ho*Wo]: the input element it reads, or 0.
template <typename T>
MT_HOST_DEVICE inline T im2col_element(const T* x, const Geometry& g, int64_t e) {
  const int64_t ow = e % g.Wo;
  int64_t r = e / g.Wo;
  const int64_t oh = r % g.Ho;
  r /= g.Ho;
  const int64_t j = r % g.kw;
  r /= g.kw;
  const int64_t i = r % g.kh;
  r /= g.kh;  // r = n * C + c
  const int64_t ih = oh * g.sh - g.ph + i * g.dh;
  const int64_t iw = ow * g.sw - g.pw + j * g.dw;
  if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) return static_cast<T>(0.0f);
  return x[(r * g.H + ih) * g.W + iw];
}

// x[e] for the flat index e of x [N, C, H, W]: the sum, in Acc, of the column entries that read
// it, taps in row-major order.
template <typename Acc, typename T>
MT_HOST_DEVICE inline Acc col2im_element(const T* cols, const Geometry& g, int64_t e) {
  const int64_t w = e % g.W;
  int64_t r = e / g.W;
  const int64_t h = r % g.H;
  r /= g.H;  // r = n * C + c
  const int64_t n = r / g.C, c = r % g.C;
  const T* base = cols + (n * g.rows() + c * g.kh * g.kw) * g.cols();
  Acc sum = Acc(0);
  for (int64_t i = 0; i < g.kh; ++i) {
    const int64_t th = h + g.ph - i * g.dh;  // = oh * sh when tap i of row oh reads row h
    if (th < 0 || th % g.sh != 0) continue;
    const int64_t oh = th / g.sh;
    if (oh >= g.Ho) continue;
    for (int64_t j = 0; j < g.kw; ++j) {
      const int64_t tw = w + g.pw - j * g.dw;
      if (tw < 0 || tw % g.sw != 0) continue;
      const int64_t ow = tw / g.sw;
      if (ow >= g.Wo) continue;
      sum += static_cast<Acc>(base[(i * g.kw + j) * g.cols() + oh * g.Wo + ow]);
    }
  }
  return sum;
}

}  // namespace mantissa::conv_columns
