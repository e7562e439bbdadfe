// Convolution layers: Conv1d, Conv2d, ConvTranspose2d (NCL / NCHW, as torch.nn; pooling is in
// nn/pooling.h). Each is a UnaryModule, so they chain in Sequential; the math is in
// autograd/ops/conv.cpp.
#pragma once

#include <concepts>
#include <cstdint>
#include <optional>
#include <string>

#include "nn/layers.h"

namespace mantissa::nn {

// A convolution's padding: a size (one value means both dims), or "same" / "valid" as PyTorch's
// string forms. "same" pads d * (k - 1) in total per dim, half on each side and the odd one at
// the bottom/right, as PyTorch; it needs stride 1.
struct ConvPadding {
  template <std::integral I>
  ConvPadding(I v) : size(static_cast<int64_t>(v)) {}  // NOLINT: `1` means (1, 1)
  ConvPadding(Size2 s) : size(s) {}                    // NOLINT
  ConvPadding(const char* mode);                       // NOLINT: "same" or "valid"
  Size2 size;
  bool same = false;
  bool valid = false;  // padding 0, printed as PyTorch prints padding="valid"
};

struct Conv2dOptions {
  Size2 stride = 1;
  ConvPadding padding = 0;
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

// Conv2d over [N, C, L] or [C, L] as a conv2d of height 1 (a recorded unsqueeze of the input and
// weight), so the gradients are conv2d's. padding: a size, "same" or "valid".
struct Conv1dOptions {
  int64_t stride = 1;
  ConvPadding padding = 0;  // the width component is used
  int64_t dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};

class Conv1dImpl : public UnaryModule {
 public:
  // weight [out, in / groups, k] and bias [out], initialised as Conv2d's.
  Conv1dImpl(int64_t in_channels, int64_t out_channels, int64_t kernel_size,
             Conv1dOptions options = {});
  Tensor forward(const Tensor& x) override;
  void reset_parameters();
  std::string extra_repr() const override;
  int64_t in_channels, out_channels, kernel_size;
  Conv1dOptions options;
  Tensor weight, bias;
};
MANTISSA_MODULE(Conv1d);

struct ConvTranspose2dOptions {
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 output_padding = 0;
  int64_t groups = 1;
  bool bias = true;
  Size2 dilation = 1;
};

class ConvTranspose2dImpl : public UnaryModule {
 public:
  // weight [in, out / groups, kh, kw] ~ kaiming_uniform(a = sqrt(5)); bias [out] ~
  // U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = out / groups * kh * kw (PyTorch reads the
  // fan from the weight's dim 1).
  ConvTranspose2dImpl(int64_t in_channels, int64_t out_channels, Size2 kernel_size,
                      ConvTranspose2dOptions options = {});
  Tensor forward(const Tensor& x) override;
  void reset_parameters();
  std::string extra_repr() const override;
  int64_t in_channels, out_channels;
  Size2 kernel_size;
  ConvTranspose2dOptions options;
  Tensor weight, bias;
};
MANTISSA_MODULE(ConvTranspose2d);

}  // namespace mantissa::nn
