// conv2d and conv_transpose2d with their backward formulas.
//
// Each op validates its arguments with PyTorch's rules and messages (naming the offending
// shapes), computes the output size with PyTorch's formulas, and hands contiguous NCHW operands
// to the device kernels (engine/kernel_tables.h). Backward runs the matching backward kernels:
// convolution's input gradient is a transposed convolution of grad_out with the weight, its
// weight gradient correlates grad_out with the saved input, and the bias gradient sums grad_out
// over N, H and W. Unbatched [C, H, W] inputs run as a batch of one through recorded views.
#include "autograd/op_bodies.h"
#include "autograd/ops/elementwise_common.h"

namespace mantissa {

namespace ops {
// Checks that input is a 3-D (unbatched) or 4-D floating-point tensor; true when unbatched.
bool is_unbatched(const char* op, const Tensor& input) {
  MT_CHECK(input.defined(), op, ": expected a defined input");
  MT_CHECK(input.dim() == 3 || input.dim() == 4, op, ": Expected 3D (unbatched) or 4D (batched) ",
           "input to ", op, ", but got input of size: ", input.shape());
  MT_CHECK(is_floating(input.dtype()), op, ": expected a floating-point input, but got ",
           input.dtype());
  return input.dim() == 3;
}
}  // namespace ops

namespace {

using ops::is_unbatched;

using autograd::BackwardContext;
using autograd::Recorder;
using Grads = std::vector<Tensor>;

// A contiguous copy (or t itself) without recording: the op's own node covers the input.
using detail::dense;

// ---- conv2d ---------------------------------------------------------------------------------

void check_conv_args(const Tensor& input, const Tensor& weight, const Tensor& bias,
                     const Conv2dParams& p) {
  MT_CHECK(weight.defined(), "conv2d: expected a defined weight");
  MT_CHECK(weight.dim() == 4, "conv2d: expected a 4-D weight [out_channels, in_channels / groups, ",
           "kh, kw], but got weight of size ", weight.shape());
  ops::check_same_device("conv2d", input, weight);
  MT_CHECK(input.dtype() == weight.dtype(), "conv2d: Input type (", input.dtype(),
           ") and weight type (", weight.dtype(), ") should be the same");
  if (bias.defined()) {
    ops::check_same_device("conv2d", input, bias);
    MT_CHECK(input.dtype() == bias.dtype(), "conv2d: Input type (", input.dtype(),
             ") and bias type (", bias.dtype(), ") should be the same");
  }
  MT_CHECK(p.stride[0] > 0 && p.stride[1] > 0, "conv2d: non-positive stride is not supported, got ",
           "stride=(", p.stride[0], ", ", p.stride[1], ")");
  MT_CHECK(p.padding[0] >= 0 && p.padding[1] >= 0, "conv2d: negative padding is not supported, ",
           "got padding=(", p.padding[0], ", ", p.padding[1], ")");
  MT_CHECK(p.dilation[0] > 0 && p.dilation[1] > 0, "conv2d: dilation should be greater than zero, ",
           "got dilation=(", p.dilation[0], ", ", p.dilation[1], ")");
  MT_CHECK(p.groups > 0, "conv2d: non-positive groups is not supported, got groups=", p.groups);
  const int64_t groups = p.groups;
  MT_CHECK(weight.size(0) % groups == 0, "conv2d: Given groups=", groups, ", expected weight to ",
           "be divisible by ", groups, " at dimension 0, but got weight of size ", weight.shape(),
           " instead");
  MT_CHECK(weight.size(1) > 0 && weight.size(2) > 0 && weight.size(3) > 0, "conv2d: expected a ",
           "weight with non-zero channel and kernel sizes, but got weight of size ",
           weight.shape());
  MT_CHECK(input.size(1) == weight.size(1) * groups, "conv2d: Given groups=", groups,
           ", weight of size ", weight.shape(), ", expected input", input.shape(), " to have ",
           weight.size(1) * groups, " channels, but got ", input.size(1), " channels instead");
  MT_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == weight.size(0)),
           "conv2d: Given weight of size ", weight.shape(), ", expected bias to be 1-dimensional ",
           "with ", weight.size(0), " elements, but got bias of size ", bias.shape(), " instead");
  MT_CHECK(input.size(2) > 0 && input.size(3) > 0, "conv2d: expected an input with non-zero ",
           "height and width, but got input of size ", input.shape());
  const int64_t padded_h = input.size(2) + 2 * p.padding[0];
  const int64_t padded_w = input.size(3) + 2 * p.padding[1];
  const int64_t kernel_h = p.dilation[0] * (weight.size(2) - 1) + 1;
  const int64_t kernel_w = p.dilation[1] * (weight.size(3) - 1) + 1;
  MT_CHECK(padded_h >= kernel_h && padded_w >= kernel_w, "conv2d: Calculated padded input size ",
           "per channel: (", padded_h, " x ", padded_w, "). Kernel size: (", kernel_h, " x ",
           kernel_w, "). Kernel size can't be greater than actual input size (input ",
           input.shape(), ", weight ", weight.shape(), ")");
}

int64_t conv_output_size(int64_t in, int64_t kernel, int64_t pad, int64_t stride,
                         int64_t dilation) {
  return (in + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1;
}

// Gradients of conv2d from the saved (input, weight): each read only for the other's gradient.
Grads conv2d_backward(BackwardContext& ctx, const Conv2dParams& p, const Shape& input_shape,
                      const Shape& weight_shape) {
  const Tensor g = dense(ctx.grad());
  Tensor gx, gw, gb;
  if (ctx.needs(0)) {
    gx = ops::empty_as(input_shape, g);
    conv2d_backward_input_kernel(g.device())(gx, g, dense(ctx.saved(1)), p);
  }
  if (ctx.needs(1)) {
    gw = ops::empty_as(weight_shape, g);
    conv2d_backward_weight_kernel(g.device())(gw, g, dense(ctx.saved(0)), p);
  }
  if (ctx.needs(2)) gb = g.sum(Shape{0, 2, 3});
  return {gx, gw, gb};
}

Tensor conv2d_batched(const Tensor& input, const Tensor& weight, const Tensor& bias,
                      const Conv2dParams& p) {
  check_conv_args(input, weight, bias, p);
  const Shape out_shape{
      input.size(0), weight.size(0),
      conv_output_size(input.size(2), weight.size(2), p.padding[0], p.stride[0], p.dilation[0]),
      conv_output_size(input.size(3), weight.size(3), p.padding[1], p.stride[1], p.dilation[1])};
  Tensor out = ops::empty_as(out_shape, input);
  conv2d_forward_kernel(input.device())(out, dense(input), dense(weight), dense(bias), p);

  if (Recorder rec{"ConvolutionBackward0", {&input, &weight, &bias}}) {
    rec.save(weight.requires_grad() ? input : Tensor());
    rec.save(input.requires_grad() ? weight : Tensor());
    rec.finish(out, [p, xs = input.shape(), ws = weight.shape()](BackwardContext& ctx) {
      return conv2d_backward(ctx, p, xs, ws);
    });
  }
  return out;
}

// ---- conv_transpose2d -------------------------------------------------------------------------
// conv_transpose2d(x, w) is the input gradient of conv2d(y, w) for a y of the transposed output's
// shape: the forward runs conv2d's backward-input kernel, the input gradient conv2d's forward and
// the weight gradient conv2d's backward-weight kernel with the roles of input and grad_out
// swapped.

void check_conv_transpose_args(const Tensor& input, const Tensor& weight, const Tensor& bias,
                               const Conv2dParams& p, Size2 output_padding) {
  MT_CHECK(weight.defined() && weight.dim() == 4, "conv_transpose2d: expected a 4-D weight ",
           "[in_channels, out_channels / groups, kh, kw], but got weight of size ",
           weight.defined() ? weight.shape() : Shape{});
  ops::check_same_device("conv_transpose2d", input, weight);
  MT_CHECK(input.dtype() == weight.dtype(), "conv_transpose2d: Input type (", input.dtype(),
           ") and weight type (", weight.dtype(), ") should be the same");
  MT_CHECK(p.stride[0] > 0 && p.stride[1] > 0, "conv_transpose2d: non-positive stride is not ",
           "supported, got stride=(", p.stride[0], ", ", p.stride[1], ")");
  MT_CHECK(p.padding[0] >= 0 && p.padding[1] >= 0, "conv_transpose2d: negative padding is not ",
           "supported, got padding=(", p.padding[0], ", ", p.padding[1], ")");
  MT_CHECK(p.dilation[0] > 0 && p.dilation[1] > 0, "conv_transpose2d: dilation should be greater ",
           "than zero, got dilation=(", p.dilation[0], ", ", p.dilation[1], ")");
  MT_CHECK(p.groups > 0,
           "conv_transpose2d: non-positive groups is not supported, got groups=", p.groups);
  MT_CHECK(output_padding.h >= 0 && output_padding.w >= 0 &&
               (output_padding.h < p.stride[0] || output_padding.h < p.dilation[0]) &&
               (output_padding.w < p.stride[1] || output_padding.w < p.dilation[1]),
           "conv_transpose2d: output padding must be smaller than either stride or dilation, ",
           "but got output_padding=(", output_padding.h, ", ", output_padding.w, "), stride=(",
           p.stride[0], ", ", p.stride[1], "), dilation=(", p.dilation[0], ", ", p.dilation[1],
           ")");
  MT_CHECK(weight.size(0) % p.groups == 0, "conv_transpose2d: Given groups=", p.groups,
           ", expected weight to be divisible by ", p.groups, " at dimension 0, but got weight ",
           "of size ", weight.shape(), " instead");
  MT_CHECK(input.size(1) == weight.size(0), "conv_transpose2d: Given transposed=1, weight of ",
           "size ", weight.shape(), ", expected input", input.shape(), " to have ", weight.size(0),
           " channels, but got ", input.size(1), " channels instead");
  MT_CHECK(weight.size(1) > 0 && weight.size(2) > 0 && weight.size(3) > 0,
           "conv_transpose2d: expected a weight with non-zero channel and kernel sizes, but got ",
           "weight of size ", weight.shape());
  const int64_t out_channels = weight.size(1) * p.groups;
  if (bias.defined()) {
    ops::check_same_device("conv_transpose2d", input, bias);
    MT_CHECK(input.dtype() == bias.dtype(), "conv_transpose2d: Input type (", input.dtype(),
             ") and bias type (", bias.dtype(), ") should be the same");
    MT_CHECK(bias.dim() == 1 && bias.size(0) == out_channels, "conv_transpose2d: Given weight ",
             "of size ", weight.shape(), " and groups=", p.groups, ", expected bias to be ",
             "1-dimensional with ", out_channels, " elements, but got bias of size ", bias.shape(),
             " instead");
  }
  MT_CHECK(input.size(2) > 0 && input.size(3) > 0, "conv_transpose2d: expected an input with ",
           "non-zero height and width, but got input of size ", input.shape());
}

int64_t conv_transpose_output_size(int64_t in, int64_t kernel, int64_t pad, int64_t stride,
                                   int64_t dilation, int64_t output_padding) {
  return (in - 1) * stride - 2 * pad + dilation * (kernel - 1) + output_padding + 1;
}

Tensor conv_transpose2d_batched(const Tensor& input, const Tensor& weight, const Tensor& bias,
                                const Conv2dParams& p, Size2 output_padding) {
  check_conv_transpose_args(input, weight, bias, p, output_padding);
  const int64_t Ho = conv_transpose_output_size(input.size(2), weight.size(2), p.padding[0],
                                                p.stride[0], p.dilation[0], output_padding.h);
  const int64_t Wo = conv_transpose_output_size(input.size(3), weight.size(3), p.padding[1],
                                                p.stride[1], p.dilation[1], output_padding.w);
  MT_CHECK(Ho > 0 && Wo > 0, "conv_transpose2d: Given input size per channel: (", input.size(2),
           " x ", input.size(3), "). Calculated output size per channel: (", Ho, " x ", Wo,
           "). Output size is too small");
  const Shape out_shape{input.size(0), weight.size(1) * p.groups, Ho, Wo};
  Tensor out = ops::empty_as(out_shape, input);
  conv2d_backward_input_kernel(input.device())(out, dense(input), dense(weight), p);
  if (bias.defined()) {
    autograd::NoGradGuard no_grad;
    out = add(out, bias.view(Shape{1, out_shape[1], 1, 1}));
  }
  if (Recorder rec{"ConvolutionBackward0", {&input, &weight, &bias}}) {
    rec.save(weight.requires_grad() ? input : Tensor());
    rec.save(input.requires_grad() ? weight : Tensor());
    rec.finish(out, [p, xs = input.shape(), ws = weight.shape()](BackwardContext& ctx) -> Grads {
      const Tensor g = dense(ctx.grad());
      Tensor gx, gw, gb;
      if (ctx.needs(0)) {
        gx = ops::empty_as(xs, g);
        conv2d_forward_kernel(g.device())(gx, g, dense(ctx.saved(1)), Tensor(), p);
      }
      if (ctx.needs(1)) {
        gw = ops::empty_as(ws, g);
        conv2d_backward_weight_kernel(g.device())(gw, dense(ctx.saved(0)), g, p);
      }
      if (ctx.needs(2)) gb = g.sum(Shape{0, 2, 3});
      return {gx, gw, gb};
    });
  }
  return out;
}

}  // namespace

Tensor conv_transpose2d_op(const Tensor& input, const Tensor& weight, const Tensor& bias,
                           Size2 stride, Size2 padding, Size2 output_padding, int64_t groups,
                           Size2 dilation) {
  const bool unbatched = is_unbatched("conv_transpose2d", input);
  const Conv2dParams p{
      {stride.h, stride.w}, {padding.h, padding.w}, {dilation.h, dilation.w}, groups};
  if (unbatched) {
    return conv_transpose2d_batched(input.unsqueeze(0), weight, bias, p, output_padding).squeeze(0);
  }
  return conv_transpose2d_batched(input, weight, bias, p, output_padding);
}

Tensor conv2d_op(const Tensor& input, const Tensor& weight, const Tensor& bias, Size2 stride,
                 Size2 padding, Size2 dilation, int64_t groups) {
  const bool unbatched = is_unbatched("conv2d", input);
  const Conv2dParams p{
      {stride.h, stride.w}, {padding.h, padding.w}, {dilation.h, dilation.w}, groups};
  if (unbatched) return conv2d_batched(input.unsqueeze(0), weight, bias, p).squeeze(0);
  return conv2d_batched(input, weight, bias, p);
}

}  // namespace mantissa
