// Normalisation layers with per-channel or per-feature statistics: BatchNorm1d/2d, GroupNorm,
// LayerNorm and RMSNorm. Parameter and buffer names are PyTorch's, so state dicts
// move unchanged.
#pragma once

#include <optional>
#include <string>

#include "nn/layers.h"

namespace mantissa::nn {

// bias = false (PyTorch 2.1's argument) keeps the weight and drops the bias, as GPT models
// without biases have it.
class LayerNormImpl : public UnaryModule {
 public:
  explicit LayerNormImpl(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
                         bool bias = true);
  explicit LayerNormImpl(int64_t normalized_size, double eps = 1e-5, bool elementwise_affine = true,
                         bool bias = true)
      : LayerNormImpl(Shape{normalized_size}, eps, elementwise_affine, bias) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Shape normalized_shape;
  double eps;
  Tensor weight, bias;
};
MANTISSA_MODULE(LayerNorm);

// torch.nn.BatchNorm1d/2d. Buffers running_mean, running_var (float32) and num_batches_tracked
// (int64, 0-d) when track_running_stats. momentum = nullopt is PyTorch's momentum=None: a
// cumulative average, each batch weighted 1 / num_batches_tracked. Training (or no running
// statistics) normalises with the batch's statistics; eval with the running ones.
class BatchNormImpl : public UnaryModule {
 public:
  BatchNormImpl(std::string type_name, int64_t dims_lo, int64_t dims_hi, int64_t num_features,
                double eps, std::optional<double> momentum, bool affine, bool track_running_stats);
  Tensor forward(const Tensor& x) override;
  void reset_running_stats();
  void reset_parameters();
  std::string extra_repr() const override;
  int64_t num_features;
  double eps;
  std::optional<double> momentum;
  bool affine, track_running_stats;
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  int64_t dims_lo_, dims_hi_;  // the input ranks the layer accepts
};

// Input [N, C] or [N, C, L].
class BatchNorm1dImpl : public BatchNormImpl {
 public:
  explicit BatchNorm1dImpl(int64_t num_features, double eps = 1e-5,
                           std::optional<double> momentum = 0.1, bool affine = true,
                           bool track_running_stats = true)
      : BatchNormImpl("BatchNorm1d", 2, 3, num_features, eps, momentum, affine,
                      track_running_stats) {}
};
MANTISSA_MODULE(BatchNorm1d);

// Input [N, C, H, W].
class BatchNorm2dImpl : public BatchNormImpl {
 public:
  explicit BatchNorm2dImpl(int64_t num_features, double eps = 1e-5,
                           std::optional<double> momentum = 0.1, bool affine = true,
                           bool track_running_stats = true)
      : BatchNormImpl("BatchNorm2d", 4, 4, num_features, eps, momentum, affine,
                      track_running_stats) {}
};
MANTISSA_MODULE(BatchNorm2d);

// torch.nn.GroupNorm: input [N, C, *], weight (ones) and bias (zeros) [C] when affine.
class GroupNormImpl : public UnaryModule {
 public:
  GroupNormImpl(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  int64_t num_groups, num_channels;
  double eps;
  Tensor weight, bias;
};
MANTISSA_MODULE(GroupNorm);

// torch.nn.RMSNorm (PyTorch 2.4): y = x / sqrt(mean(x^2) + eps) * weight over the trailing
// normalized_shape dims; weight (ones) when elementwise_affine. eps = nullopt: the machine
// epsilon of the statistics' dtype (rms_norm in autograd/functions.h).
class RMSNormImpl : public UnaryModule {
 public:
  explicit RMSNormImpl(Shape normalized_shape, std::optional<double> eps = std::nullopt,
                       bool elementwise_affine = true);
  explicit RMSNormImpl(int64_t normalized_size, std::optional<double> eps = std::nullopt,
                       bool elementwise_affine = true)
      : RMSNormImpl(Shape{normalized_size}, eps, elementwise_affine) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Shape normalized_shape;
  std::optional<double> eps;
  Tensor weight;
};
MANTISSA_MODULE(RMSNorm);

}  // namespace mantissa::nn
