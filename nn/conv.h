// Convolution and pooling layers: Conv2d, MaxPool2d, AvgPool2d (NCHW, as torch.nn). Each is a
// UnaryModule, so they chain in Sequential; the math is in autograd/ops/conv.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "nn/layers.h"

namespace mantissa::nn {

struct Conv2dOptions {
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};

class Conv2dImpl : public UnaryModule {
 public:
  // weight [out, in / groups, kh, kw] ~ kaiming_uniform(a = sqrt(5)); bias [out] ~
  // U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = in / groups * kh * kw.
  Conv2dImpl(int64_t in_channels, int64_t out_channels, Size2 kernel_size,
             Conv2dOptions options = {});
  Tensor forward(const Tensor& x) override;
  void reset_parameters();
  std::string extra_repr() const override;
  int64_t in_channels, out_channels;
  Size2 kernel_size;
  Conv2dOptions options;
  Tensor weight, bias;
};
MANTISSA_MODULE(Conv2d);

struct MaxPool2dOptions {
  std::optional<Size2> stride = std::nullopt;  // default: kernel_size
  Size2 padding = 0;
  Size2 dilation = 1;
  bool ceil_mode = false;
};

class MaxPool2dImpl : public UnaryModule {
 public:
  explicit MaxPool2dImpl(Size2 kernel_size, MaxPool2dOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Size2 kernel_size, stride;
  MaxPool2dOptions options;
};
MANTISSA_MODULE(MaxPool2d);

struct AvgPool2dOptions {
  std::optional<Size2> stride = std::nullopt;  // default: kernel_size
  Size2 padding = 0;
  bool ceil_mode = false;
  bool count_include_pad = true;
  std::optional<int64_t> divisor_override = std::nullopt;
};

class AvgPool2dImpl : public UnaryModule {
 public:
  explicit AvgPool2dImpl(Size2 kernel_size, AvgPool2dOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Size2 kernel_size, stride;
  AvgPool2dOptions options;
};
MANTISSA_MODULE(AvgPool2d);

}  // namespace mantissa::nn
