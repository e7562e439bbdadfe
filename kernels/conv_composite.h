// The 2-D convolution composed from other kernels of one device: im2col (conv2d_im2col), a
// batched GEMM per group (bmm), col2im (conv2d_col2im), copies and a batch sum. It is the CUDA
// path when cuDNN's heuristics offer no algorithm it will run for a call (counted in
// engine/fast_path_stats.h, path "cuda.conv"; an error in strict mode), and it runs on the CPU too,
// where the tests hold it to the CPU convolution. Operands as the conv2d kernel tables take them:
// contiguous NCHW of one dtype, weight [O, C/groups, kh, kw], fresh outputs fully overwritten.
//
// For group g (C/g input and O/g output channels, K = C/g*kh*kw column rows, L = Ho*Wo):
//   forward:         out[n, g]  = W[g] [O/g, K] @ cols[n, g] [K, L]
//   backward input:  gcols[n, g] = W[g]^T @ grad_out[n, g], then col2im
//   backward weight: gW[g] = sum over n of grad_out[n, g] @ cols[n, g]^T
// The GEMMs keep bmm's contract (half types accumulate in float and round once; float32 honours
// the matmul precision). Half types round the column products once more than cuDNN would (gcols
// before col2im, each image's weight gradient before the batch sum): this path is for
// correctness where cuDNN has nothing, not for speed.
#pragma once

#include "engine/factory.h"
#include "engine/kernel_tables.h"
#include "kernels/conv_columns.h"

namespace mantissa::conv_composite {

// The column geometry of `input` [N,C,H,W] under a kh x kw window.
inline conv_columns::Geometry geometry(const Shape& input, const Conv2dParams& p, int64_t kh,
                                       int64_t kw) {
  conv_columns::Geometry g{};
  g.N = input[0], g.C = input[1], g.H = input[2], g.W = input[3], g.kh = kh, g.kw = kw;
  g.sh = p.stride[0], g.sw = p.stride[1], g.ph = p.padding[0], g.pw = p.padding[1];
  g.dh = p.dilation[0], g.dw = p.dilation[1];
  g.Ho = conv_columns::output_size(g.H, kh, g.sh, g.ph, g.dh);
  g.Wo = conv_columns::output_size(g.W, kw, g.sw, g.pw, g.dw);
  return g;
}

namespace detail {

inline Tensor view(const Tensor& t, const Shape& shape, const Shape& strides, int64_t offset) {
  return mantissa::detail::make_view(t, shape, strides, t.storage_offset() + offset);
}

// out = a @ b per batch, into `out` (a view of a contiguous tensor, any strides): through a
// contiguous temporary unless out is contiguous itself.
inline void bmm_into(const Tensor& out, const Tensor& a, const Tensor& b) {
  const Device d = out.device();
  if (out.is_contiguous()) {
    bmm_kernel(d)(out, a, b);
    return;
  }
  const Tensor tmp = empty(out.shape(), TensorOptions(d).dtype(out.dtype()));
  bmm_kernel(d)(tmp, a, b);
  copy_kernel(d)(out, tmp);
}

}  // namespace detail

// cols [N, C*kh*kw, Ho*Wo] of `input`.
inline Tensor columns(const Tensor& input, const Conv2dParams& p, int64_t kh, int64_t kw) {
  const conv_columns::Geometry g = geometry(input.shape(), p, kh, kw);
  const Tensor cols =
      empty({g.N, g.rows(), g.cols()}, TensorOptions(input.device()).dtype(input.dtype()));
  conv2d_im2col_kernel(input.device())(cols, input, p, kh, kw);
  return cols;
}

// out [N,O,Ho,Wo] = conv(input, weight); the caller adds a bias.
inline void forward(const Tensor& out, const Tensor& input, const Tensor& weight,
                    const Conv2dParams& p) {
  const int64_t N = input.size(0), O = weight.size(0), G = p.groups, Og = O / G;
  const int64_t kh = weight.size(2), kw = weight.size(3), K = weight.size(1) * kh * kw;
  const Tensor cols = columns(input, p, kh, kw);
  const int64_t L = cols.size(2);
  for (int64_t g = 0; g < G; ++g) {
    const Tensor w = detail::view(weight, {N, Og, K}, {0, K, 1}, g * Og * K);  // W[g], broadcast
    const Tensor c = detail::view(cols, {N, K, L}, {G * K * L, L, 1}, g * K * L);
    detail::bmm_into(detail::view(out, {N, Og, L}, {O * L, L, 1}, g * Og * L), w, c);
  }
}

// grad_input [N,C,H,W] from grad_out [N,O,Ho,Wo] and weight.
inline void backward_input(const Tensor& grad_input, const Tensor& grad_out, const Tensor& weight,
                           const Conv2dParams& p) {
  const int64_t N = grad_out.size(0), O = weight.size(0), G = p.groups, Og = O / G;
  const int64_t kh = weight.size(2), kw = weight.size(3), K = weight.size(1) * kh * kw;
  const int64_t L = grad_out.size(2) * grad_out.size(3);
  const Device d = grad_input.device();
  const Tensor gcols = empty({N, G * K, L}, TensorOptions(d).dtype(grad_input.dtype()));
  for (int64_t g = 0; g < G; ++g) {
    const Tensor wt = detail::view(weight, {N, K, Og}, {0, 1, K}, g * Og * K);  // W[g]^T
    const Tensor go = detail::view(grad_out, {N, Og, L}, {O * L, L, 1}, g * Og * L);
    detail::bmm_into(detail::view(gcols, {N, K, L}, {G * K * L, L, 1}, g * K * L), wt, go);
  }
  conv2d_col2im_kernel(d)(grad_input, gcols, p, kh, kw);
}

// grad_weight [O, C/groups, kh, kw] from grad_out [N,O,Ho,Wo] and the forward input, summed over
// the batch in batch order.
inline void backward_weight(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& input,
                            const Conv2dParams& p) {
  const int64_t N = grad_out.size(0), O = grad_weight.size(0), G = p.groups, Og = O / G;
  const int64_t kh = grad_weight.size(2), kw = grad_weight.size(3);
  const int64_t K = grad_weight.size(1) * kh * kw;
  const Device d = grad_weight.device();
  const Tensor cols = columns(input, p, kh, kw);
  const int64_t L = cols.size(2);
  const Tensor per_image = empty({N, Og, K}, TensorOptions(d).dtype(grad_weight.dtype()));
  for (int64_t g = 0; g < G; ++g) {
    const Tensor go = detail::view(grad_out, {N, Og, L}, {O * L, L, 1}, g * Og * L);
    const Tensor ct = detail::view(cols, {N, L, K}, {G * K * L, 1, L}, g * K * L);  // cols[n,g]^T
    bmm_kernel(d)(per_image, go, ct);
    sum_kernel(d)(detail::view(grad_weight, {1, Og * K}, {Og * K, 1}, g * Og * K),
                  detail::view(per_image, {N, Og * K}, {Og * K, 1}, 0));
  }
}

}  // namespace mantissa::conv_composite
