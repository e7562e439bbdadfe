// Pooling layers: MaxPool2d, AvgPool2d, AdaptiveAvgPool2d (NCHW, as torch.nn). Each is a
// UnaryModule, so they chain in Sequential; the math is in autograd/ops/pooling.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "nn/layers.h"

namespace mantissa::nn {

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
  // The values and int64 flat indices (h * W + w per plane), as PyTorch's forward with
  // return_indices=True.
  ValuesIndices forward_with_indices(const Tensor& x);
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

class AdaptiveAvgPool2dImpl : public UnaryModule {
 public:
  explicit AdaptiveAvgPool2dImpl(Size2 output_size)
      : UnaryModule("AdaptiveAvgPool2d"), output_size(output_size) {}
  Tensor forward(const Tensor& x) override { return adaptive_avg_pool2d(x, output_size); }
  std::string extra_repr() const override;
  Size2 output_size;
};
MANTISSA_MODULE(AdaptiveAvgPool2d);

}  // namespace mantissa::nn
