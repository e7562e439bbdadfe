#include "nn/conv.h"

#include <cmath>
#include <sstream>

#include "nn/init.h"
#include "nn/repr_format.h"

namespace mantissa::nn {
namespace {

using repr::pair;

std::string padding_str(const ConvPadding& p, bool one_dim) {
  if (p.same) return "same";
  if (p.valid) return "valid";
  if (!one_dim) return pair(p.size);
  std::ostringstream os;
  os << "(" << p.size.w << ",)";
  return os.str();
}

bool prints_padding(const ConvPadding& p) { return p.same || p.valid || !(p.size == Size2(0)); }

// PyTorch's padding="same" (aten's _convolution_same): d * (k - 1) zeros in total per dim, half
// on each side through conv2d's padding, and an odd one at the bottom/right as a zero row/column
// joined to the input first.
Tensor conv2d_same(const Tensor& x, const Tensor& weight, const Tensor& bias, Size2 stride,
                   Size2 dilation, int64_t groups) {
  MT_CHECK(stride == Size2(1), "Conv: padding='same' is not supported for strided convolutions, ",
           "got stride=", pair(stride));
  MT_CHECK(weight.dim() == 4, "Conv: expected a 4-D weight, got ", weight.shape());
  const int64_t total[2] = {dilation.h * (weight.size(2) - 1), dilation.w * (weight.size(3) - 1)};
  Tensor input = x;
  for (int d = 0; d < 2; ++d) {
    if (total[d] % 2 == 0) continue;
    Shape extra = input.shape();
    extra[input.dim() - 2 + d] = 1;
    const Tensor pad = zeros(extra, TensorOptions(input.device()).dtype(input.dtype()));
    input = cat({input, pad}, input.dim() - 2 + d);
  }
  return conv2d(input, weight, bias, stride, Size2(total[0] / 2, total[1] / 2), dilation, groups);
}

void init_conv(Tensor& weight, Tensor& bias) {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const int64_t fan_in = init::fan_in_and_fan_out(weight).first;
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    init::uniform_(bias, -bound, bound);
  }
}

void check_channels(const char* layer, int64_t in, int64_t out, int64_t groups) {
  MT_CHECK(groups > 0, layer, ": groups must be a positive integer, got ", groups);
  MT_CHECK(in > 0 && out > 0, layer, ": in_channels and out_channels must be positive, got ", in,
           " and ", out);
  MT_CHECK(in % groups == 0, layer, ": in_channels must be divisible by groups, got ",
           "in_channels=", in, " and groups=", groups);
  MT_CHECK(out % groups == 0, layer, ": out_channels must be divisible by groups, got ",
           "out_channels=", out, " and groups=", groups);
}

}  // namespace

ConvPadding::ConvPadding(const char* mode) : size(0) {
  const std::string m = mode == nullptr ? "" : mode;
  MT_CHECK(m == "same" || m == "valid", "Conv: Invalid padding string '", m,
           "', should be one of {'valid', 'same'}");
  same = m == "same";
  valid = m == "valid";
}

Conv2dImpl::Conv2dImpl(int64_t in, int64_t out, Size2 kernel, Conv2dOptions o)
    : UnaryModule("Conv2d"), in_channels(in), out_channels(out), kernel_size(kernel), options(o) {
  check_channels("Conv2d", in, out, o.groups);
  MT_CHECK(kernel.h > 0 && kernel.w > 0, "Conv2d: kernel_size must be positive, got ",
           pair(kernel));
  weight = register_parameter("weight", empty({out, in / o.groups, kernel.h, kernel.w}));
  if (o.bias) bias = register_parameter("bias", empty({out}));
  reset_parameters();
}

void Conv2dImpl::reset_parameters() { init_conv(weight, bias); }

Tensor Conv2dImpl::forward(const Tensor& x) {
  if (options.padding.same)
    return conv2d_same(x, weight, bias, options.stride, options.dilation, options.groups);
  return conv2d(x, weight, bias, options.stride, options.padding.size, options.dilation,
                options.groups);
}

std::string Conv2dImpl::extra_repr() const {
  std::ostringstream os;
  os << in_channels << ", " << out_channels << ", kernel_size=" << pair(kernel_size)
     << ", stride=" << pair(options.stride);
  if (prints_padding(options.padding)) os << ", padding=" << padding_str(options.padding, false);
  if (!(options.dilation == Size2(1))) os << ", dilation=" << pair(options.dilation);
  if (options.groups != 1) os << ", groups=" << options.groups;
  if (!bias.defined()) os << ", bias=False";
  return os.str();
}

Conv1dImpl::Conv1dImpl(int64_t in, int64_t out, int64_t kernel, Conv1dOptions o)
    : UnaryModule("Conv1d"), in_channels(in), out_channels(out), kernel_size(kernel), options(o) {
  check_channels("Conv1d", in, out, o.groups);
  MT_CHECK(kernel > 0, "Conv1d: kernel_size must be positive, got ", kernel);
  weight = register_parameter("weight", empty({out, in / o.groups, kernel}));
  if (o.bias) bias = register_parameter("bias", empty({out}));
  reset_parameters();
}

void Conv1dImpl::reset_parameters() { init_conv(weight, bias); }

Tensor Conv1dImpl::forward(const Tensor& x) {
  MT_CHECK(x.dim() == 2 || x.dim() == 3, "Conv1d: Expected 2D (unbatched) or 3D (batched) input ",
           "to conv1d, but got input of size: ", x.shape());
  const Tensor x2 = x.unsqueeze(-2), w2 = weight.unsqueeze(2);
  const Size2 stride(1, options.stride), dilation(1, options.dilation);
  const Tensor y = options.padding.same
                       ? conv2d_same(x2, w2, bias, stride, dilation, options.groups)
                       : conv2d(x2, w2, bias, stride, Size2(0, options.padding.size.w), dilation,
                                options.groups);
  return y.squeeze(-2);
}

std::string Conv1dImpl::extra_repr() const {
  std::ostringstream os;
  os << in_channels << ", " << out_channels << ", kernel_size=(" << kernel_size << ",), stride=("
     << options.stride << ",)";
  if (prints_padding(options.padding)) os << ", padding=" << padding_str(options.padding, true);
  if (options.dilation != 1) os << ", dilation=(" << options.dilation << ",)";
  if (options.groups != 1) os << ", groups=" << options.groups;
  if (!bias.defined()) os << ", bias=False";
  return os.str();
}

ConvTranspose2dImpl::ConvTranspose2dImpl(int64_t in, int64_t out, Size2 kernel,
                                         ConvTranspose2dOptions o)
    : UnaryModule("ConvTranspose2d"),
      in_channels(in),
      out_channels(out),
      kernel_size(kernel),
      options(o) {
  check_channels("ConvTranspose2d", in, out, o.groups);
  MT_CHECK(kernel.h > 0 && kernel.w > 0, "ConvTranspose2d: kernel_size must be positive, got ",
           pair(kernel));
  weight = register_parameter("weight", empty({in, out / o.groups, kernel.h, kernel.w}));
  if (o.bias) bias = register_parameter("bias", empty({out}));
  reset_parameters();
}

void ConvTranspose2dImpl::reset_parameters() { init_conv(weight, bias); }

Tensor ConvTranspose2dImpl::forward(const Tensor& x) {
  return conv_transpose2d(x, weight, bias, options.stride, options.padding, options.output_padding,
                          options.groups, options.dilation);
}

std::string ConvTranspose2dImpl::extra_repr() const {
  std::ostringstream os;
  os << in_channels << ", " << out_channels << ", kernel_size=" << pair(kernel_size)
     << ", stride=" << pair(options.stride);
  if (!(options.padding == Size2(0))) os << ", padding=" << pair(options.padding);
  if (!(options.dilation == Size2(1))) os << ", dilation=" << pair(options.dilation);
  if (!(options.output_padding == Size2(0)))
    os << ", output_padding=" << pair(options.output_padding);
  if (options.groups != 1) os << ", groups=" << options.groups;
  if (!bias.defined()) os << ", bias=False";
  return os.str();
}

}  // namespace mantissa::nn
