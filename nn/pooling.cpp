#include "nn/pooling.h"

#include <sstream>

#include "nn/repr_format.h"

namespace mantissa::nn {

MaxPool2dImpl::MaxPool2dImpl(Size2 kernel, MaxPool2dOptions o)
    : UnaryModule("MaxPool2d"),
      kernel_size(kernel),
      stride(o.stride.value_or(kernel)),
      options(o) {}

Tensor MaxPool2dImpl::forward(const Tensor& x) {
  return max_pool2d(x, kernel_size, stride, options.padding, options.dilation, options.ceil_mode);
}

ValuesIndices MaxPool2dImpl::forward_with_indices(const Tensor& x) {
  return max_pool2d_with_indices(x, kernel_size, stride, options.padding, options.dilation,
                                 options.ceil_mode);
}

std::string MaxPool2dImpl::extra_repr() const {
  std::ostringstream os;
  os << "kernel_size=" << repr::size(kernel_size) << ", stride=" << repr::size(stride)
     << ", padding=" << repr::size(options.padding) << ", dilation=" << repr::size(options.dilation)
     << ", ceil_mode=" << repr::py_bool(options.ceil_mode);
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
  os << "kernel_size=" << repr::size(kernel_size) << ", stride=" << repr::size(stride)
     << ", padding=" << repr::size(options.padding);
  return os.str();
}

std::string AdaptiveAvgPool2dImpl::extra_repr() const {
  std::ostringstream os;
  os << "output_size=" << repr::size(output_size);
  return os.str();
}

}  // namespace mantissa::nn
