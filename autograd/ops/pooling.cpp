// max_pool2d, avg_pool2d and adaptive_avg_pool2d with their backward formulas.
//
// Each op validates its arguments with PyTorch's rules and messages and computes the output size
// with PyTorch's formulas (adaptive pooling's window bounds: kernels/adaptive_pool.h). Max pooling
// saves the argmax indices and scatters grad_out back to them. Unbatched [C, H, W] inputs run as
// a batch of one through recorded views.
#include "autograd/op_bodies.h"
#include "autograd/ops/elementwise_common.h"

namespace mantissa {
namespace {

using autograd::BackwardContext;
using autograd::Recorder;
using Grads = std::vector<Tensor>;
using detail::dense;
using ops::is_unbatched;

// Floor division, also for negative numerators (PyTorch's div_rtn).
int64_t div_floor(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

// PyTorch's pooling_output_shape: in ceil_mode the last window must still start inside the
// input or the left padding.
int64_t pooling_output_size(int64_t in, int64_t kernel, int64_t pad, int64_t stride,
                            int64_t dilation, bool ceil_mode) {
  int64_t out =
      div_floor(in + 2 * pad - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0), stride) +
      1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

// ---- pooling --------------------------------------------------------------------------------

struct PoolArgs {
  Size2 kernel, stride, padding, dilation;
};

// Checks PyTorch's pool2d_shape_check rules and returns the output shape.
Shape pool_output_shape(const char* op, const Tensor& input, const PoolArgs& a, bool ceil_mode) {
  MT_CHECK(a.kernel.h > 0 && a.kernel.w > 0, op, ": kernel size should be greater than zero, but ",
           "got kH: ", a.kernel.h, " kW: ", a.kernel.w);
  MT_CHECK(a.stride.h > 0 && a.stride.w > 0, op, ": stride should be greater than zero, but got ",
           "dH: ", a.stride.h, " dW: ", a.stride.w);
  MT_CHECK(a.dilation.h > 0 && a.dilation.w > 0, op, ": dilation should be greater than zero, ",
           "but got dilationH: ", a.dilation.h, " dilationW: ", a.dilation.w);
  MT_CHECK(a.padding.h >= 0 && a.padding.w >= 0, op, ": padding must be non-negative, but got ",
           "padH: ", a.padding.h, " padW: ", a.padding.w);
  MT_CHECK(a.kernel.w / 2 >= a.padding.w && a.kernel.h / 2 >= a.padding.h, op, ": pad should be ",
           "smaller than or equal to half of kernel size, but got padW = ", a.padding.w,
           ", padH = ", a.padding.h, ", kW = ", a.kernel.w, ", kH = ", a.kernel.h);
  MT_CHECK(input.size(1) > 0 && input.size(2) > 0 && input.size(3) > 0, op, ": Expected input's ",
           "non-batch dimensions to have positive length, but got input of size ", input.shape());
  const int64_t C = input.size(1), H = input.size(2), W = input.size(3);
  const int64_t Ho =
      pooling_output_size(H, a.kernel.h, a.padding.h, a.stride.h, a.dilation.h, ceil_mode);
  const int64_t Wo =
      pooling_output_size(W, a.kernel.w, a.padding.w, a.stride.w, a.dilation.w, ceil_mode);
  MT_CHECK(Ho >= 1 && Wo >= 1, op, ": Given input size: (", C, "x", H, "x", W, "). Calculated ",
           "output size: (", C, "x", Ho, "x", Wo, "). Output size is too small");
  return Shape{input.size(0), C, Ho, Wo};
}

Pool2dParams pool_params(const PoolArgs& a, bool ceil_mode, bool count_include_pad,
                         int64_t divisor_override) {
  return Pool2dParams{{a.kernel.h, a.kernel.w},
                      {a.stride.h, a.stride.w},
                      {a.padding.h, a.padding.w},
                      {a.dilation.h, a.dilation.w},
                      ceil_mode,
                      count_include_pad,
                      divisor_override};
}

ValuesIndices max_pool2d_batched(const Tensor& input, const PoolArgs& a, bool ceil_mode) {
  const Shape out_shape = pool_output_shape("max_pool2d", input, a, ceil_mode);
  const Pool2dParams p = pool_params(a, ceil_mode, true, 0);
  Tensor out = ops::empty_as(out_shape, input);
  Tensor indices = empty(out_shape, TensorOptions(input.device()).dtype(kInt64));
  max_pool2d_forward_kernel(input.device())(out, indices, dense(input), p);
  if (Recorder rec{"MaxPool2DWithIndicesBackward0", {&input}}) {
    rec.save(indices);
    rec.finish(out, [p, input_shape = input.shape()](BackwardContext& ctx) -> Grads {
      const Tensor g = dense(ctx.grad());
      Tensor gx = ops::empty_as(input_shape, g);
      max_pool2d_backward_kernel(g.device())(gx, g, ctx.saved(0), p);
      return {gx};
    });
  }
  return {out, indices};
}

Tensor avg_pool2d_batched(const Tensor& input, const PoolArgs& a, bool ceil_mode,
                          bool count_include_pad, int64_t divisor_override) {
  const Shape out_shape = pool_output_shape("avg_pool2d", input, a, ceil_mode);
  const Pool2dParams p = pool_params(a, ceil_mode, count_include_pad, divisor_override);
  Tensor out = ops::empty_as(out_shape, input);
  avg_pool2d_forward_kernel(input.device())(out, dense(input), p);
  if (Recorder rec{"AvgPool2DBackward0", {&input}}) {
    rec.finish(out, [p, input_shape = input.shape()](BackwardContext& ctx) -> Grads {
      const Tensor g = dense(ctx.grad());
      Tensor gx = ops::empty_as(input_shape, g);
      avg_pool2d_backward_kernel(g.device())(gx, g, p);
      return {gx};
    });
  }
  return out;
}

// ---- adaptive_avg_pool2d --------------------------------------------------------------------

Tensor adaptive_avg_pool2d_batched(const Tensor& input, Size2 output_size) {
  MT_CHECK(output_size.h >= 0 && output_size.w >= 0, "adaptive_avg_pool2d: elements of ",
           "output_size must be greater than or equal to 0 but received {", output_size.h, ", ",
           output_size.w, "}");
  for (int64_t d = 1; d < 4; ++d) {
    MT_CHECK(input.size(d) > 0, "adaptive_avg_pool2d: Expected input to have non-zero size for ",
             "non-batch dimensions, but input has sizes ", input.shape(), " with dimension ", d,
             " being empty");
  }
  const Shape out_shape{input.size(0), input.size(1), output_size.h, output_size.w};
  Tensor out = ops::empty_as(out_shape, input);
  adaptive_avg_pool2d_forward_kernel(input.device())(out, dense(input));
  if (Recorder rec{"AdaptiveAvgPool2DBackward0", {&input}}) {
    rec.finish(out, [xs = input.shape()](BackwardContext& ctx) -> Grads {
      const Tensor g = dense(ctx.grad());
      Tensor gx = ops::empty_as(xs, g);
      adaptive_avg_pool2d_backward_kernel(g.device())(gx, g);
      return {gx};
    });
  }
  return out;
}

}  // namespace

ValuesIndices max_pool2d_with_indices_op(const Tensor& input, Size2 kernel_size,
                                         std::optional<Size2> stride, Size2 padding, Size2 dilation,
                                         bool ceil_mode) {
  const bool unbatched = is_unbatched("max_pool2d", input);
  const PoolArgs a{kernel_size, stride.value_or(kernel_size), padding, dilation};
  if (!unbatched) return max_pool2d_batched(input, a, ceil_mode);
  auto [out, indices] = max_pool2d_batched(input.unsqueeze(0), a, ceil_mode);
  return {out.squeeze(0), indices.squeeze(0)};
}

Tensor max_pool2d_op(const Tensor& input, Size2 kernel_size, std::optional<Size2> stride,
                     Size2 padding, Size2 dilation, bool ceil_mode) {
  return max_pool2d_with_indices(input, kernel_size, stride, padding, dilation, ceil_mode).values;
}

Tensor avg_pool2d_op(const Tensor& input, Size2 kernel_size, std::optional<Size2> stride,
                     Size2 padding, bool ceil_mode, bool count_include_pad,
                     std::optional<int64_t> divisor_override) {
  const bool unbatched = is_unbatched("avg_pool2d", input);
  MT_CHECK(!divisor_override || *divisor_override != 0, "avg_pool2d: divisor must be not zero");
  const PoolArgs a{kernel_size, stride.value_or(kernel_size), padding, Size2(1)};
  const int64_t divisor = divisor_override.value_or(0);
  if (unbatched) {
    return avg_pool2d_batched(input.unsqueeze(0), a, ceil_mode, count_include_pad, divisor)
        .squeeze(0);
  }
  return avg_pool2d_batched(input, a, ceil_mode, count_include_pad, divisor);
}

Tensor adaptive_avg_pool2d_op(const Tensor& input, Size2 output_size) {
  MT_CHECK(input.defined(), "adaptive_avg_pool2d: expected a defined input");
  MT_CHECK(input.dim() == 3 || input.dim() == 4, "adaptive_avg_pool2d: Expected 3D or 4D tensor, ",
           "but got ", input.shape());
  MT_CHECK(is_floating(input.dtype()), "adaptive_avg_pool2d: expected a floating-point input, ",
           "but got ", input.dtype());
  if (input.dim() == 3)
    return adaptive_avg_pool2d_batched(input.unsqueeze(0), output_size).squeeze(0);
  return adaptive_avg_pool2d_batched(input, output_size);
}

}  // namespace mantissa
