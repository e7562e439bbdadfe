#include "nn/conv.h"

#include <cmath>
#include <sstream>

#include "nn/init.h"

namespace mantissa::nn {
namespace {

std::string pair_str(Size2 s) {
  std::ostringstream os;
  os << "(" << s.h << ", " << s.w << ")";
  return os.str();
}
// Pooling layers print a square size as one number, as PyTorch does for an int argument.
std::string size_str(Size2 s) { return s.h == s.w ? std::to_string(s.h) : pair_str(s); }
const char* bool_str(bool b) { return b ? "True" : "False"; }

}  // namespace

Conv2dImpl::Conv2dImpl(int64_t in, int64_t out, Size2 kernel, Conv2dOptions o)
    : UnaryModule("Conv2d"), in_channels(in), out_channels(out), kernel_size(kernel), options(o) {
  MT_CHECK(o.groups > 0, "Conv2d: groups must be a positive integer, got ", o.groups);
  MT_CHECK(in > 0 && out > 0, "Conv2d: in_channels and out_channels must be positive, got ", in,
           " and ", out);
  MT_CHECK(in % o.groups == 0, "Conv2d: in_channels must be divisible by groups, got ",
           "in_channels=", in, " and groups=", o.groups);
  MT_CHECK(out % o.groups == 0, "Conv2d: out_channels must be divisible by groups, got ",
           "out_channels=", out, " and groups=", o.groups);
  MT_CHECK(kernel.h > 0 && kernel.w > 0, "Conv2d: kernel_size must be positive, got ",
           pair_str(kernel));
  weight = register_parameter("weight", empty({out, in / o.groups, kernel.h, kernel.w}));
  if (o.bias) bias = register_parameter("bias", empty({out}));
  reset_parameters();
}

void Conv2dImpl::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const int64_t fan_in = init::fan_in_and_fan_out(weight).first;
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Conv2dImpl::forward(const Tensor& x) {
  return conv2d(x, weight, bias, options.stride, options.padding, options.dilation, options.groups);
}

std::string Conv2dImpl::extra_repr() const {
  std::ostringstream os;
  os << in_channels << ", " << out_channels << ", kernel_size=" << pair_str(kernel_size)
     << ", stride=" << pair_str(options.stride);
  if (!(options.padding == Size2(0))) os << ", padding=" << pair_str(options.padding);
  if (!(options.dilation == Size2(1))) os << ", dilation=" << pair_str(options.dilation);
  if (options.groups != 1) os << ", groups=" << options.groups;
  if (!bias.defined()) os << ", bias=False";
  return os.str();
}

MaxPool2dImpl::MaxPool2dImpl(Size2 kernel, MaxPool2dOptions o)
    : UnaryModule("MaxPool2d"),
      kernel_size(kernel),
      stride(o.stride.value_or(kernel)),
      options(o) {}

Tensor MaxPool2dImpl::forward(const Tensor& x) {
  return max_pool2d(x, kernel_size, stride, options.padding, options.dilation, options.ceil_mode);
}

std::string MaxPool2dImpl::extra_repr() const {
  std::ostringstream os;
  os << "kernel_size=" << size_str(kernel_size) << ", stride=" << size_str(stride)
     << ", padding=" << size_str(options.padding) << ", dilation=" << size_str(options.dilation)
     << ", ceil_mode=" << bool_str(options.ceil_mode);
  return os.str();
}

AvgPool2dImpl::AvgPool2dImpl(Size2 kernel, AvgPool2dOptions o)
    : UnaryModule("AvgPool2d"),
      kernel_size(kernel),
      stride(o.stride.value_or(kernel)),
      options(o) {}

Tensor AvgPool2dImpl::forward(const Tensor& x) {
  return avg_pool2d(x, kernel_size, stride, options.padding, options.ceil_mode,
                    options.count_include_pad, options.divisor_override);
}

std::string AvgPool2dImpl::extra_repr() const {
  std::ostringstream os;
  os << "kernel_size=" << size_str(kernel_size) << ", stride=" << size_str(stride)
     << ", padding=" << size_str(options.padding);
  return os.str();
}

}  // namespace mantissa::nn
