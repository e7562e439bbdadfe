// nn::functional: the stateless forms of the layers and losses (torch.nn.functional).
#pragma once

#include <string_view>

#include "autograd/functions.h"
#include "autograd/linear_act.h"

namespace mantissa::nn {

using Reduction = ::mantissa::Reduction;
// "none", "mean" or "sum".
Reduction parse_reduction(std::string_view name);
using KlDivReduction = ::mantissa::KlDivReduction;
// "none", "batchmean", "sum" or "mean" (kl_div's reduction strings).
KlDivReduction parse_kl_div_reduction(std::string_view name);

namespace functional {

inline Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = Tensor()) {
  return mantissa::linear(x, w, b);
}
// The activation a linear layer fuses into its GEMM (cuBLASLt epilogues on CUDA; docs/kernels.md).
using Activation = LinearActivation;
// act(x @ w^T + b) in one fused op; Activation::GeluTanh is gelu(x, "tanh").
inline Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b, Activation act) {
  return mantissa::linear_act(x, w, b, act);
}
// linear(act(linear(x, w1, b1)), w2, b2) with the activation's backward and b1's gradient fused
// into the hidden layer's gradient GEMM.
inline Tensor linear_act_linear(const Tensor& x, const Tensor& w1, const Tensor& b1, Activation act,
                                const Tensor& w2, const Tensor& b2) {
  return mantissa::linear_act_linear(x, w1, b1, act, w2, b2);
}
inline Tensor relu(const Tensor& x) { return mantissa::relu(x); }
inline Tensor gelu(const Tensor& x, std::string_view approximate = "none") {
  return mantissa::gelu(x, approximate);
}
inline Tensor silu(const Tensor& x) { return mantissa::silu(x); }
inline Tensor sigmoid(const Tensor& x) { return mantissa::sigmoid(x); }
inline Tensor tanh(const Tensor& x) { return mantissa::tanh(x); }
inline Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01) {
  return mantissa::leaky_relu(x, negative_slope);
}
inline Tensor elu(const Tensor& x, double alpha = 1.0) { return mantissa::elu(x, alpha); }
inline Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0) {
  return mantissa::softplus(x, beta, threshold);
}
inline Tensor softmax(const Tensor& x, int64_t dim) { return mantissa::softmax(x, dim); }
inline Tensor log_softmax(const Tensor& x, int64_t dim) { return mantissa::log_softmax(x, dim); }
inline Tensor dropout(const Tensor& x, double p = 0.5, bool training = true) {
  return mantissa::dropout(x, p, training);
}

inline Tensor layer_norm(const Tensor& x, const Shape& normalized_shape,
                         const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                         double eps = 1e-5) {
  return mantissa::layer_norm(x, normalized_shape, weight, bias, eps);
}
inline Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                         const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                         bool training = false, double momentum = 0.1, double eps = 1e-5) {
  return mantissa::batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps);
}
inline Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = Tensor(),
                         const Tensor& bias = Tensor(), double eps = 1e-5) {
  return mantissa::group_norm(x, num_groups, weight, bias, eps);
}
inline Tensor rms_norm(const Tensor& x, const Shape& normalized_shape,
                       const Tensor& weight = Tensor(), std::optional<double> eps = std::nullopt) {
  return mantissa::rms_norm(x, normalized_shape, weight, eps);
}

// The losses (autograd/functions.h documents their arguments).
inline Tensor mse_loss(const Tensor& input, const Tensor& target,
                       Reduction reduction = Reduction::Mean) {
  return mantissa::mse_loss(input, target, reduction);
}
inline Tensor l1_loss(const Tensor& input, const Tensor& target,
                      Reduction reduction = Reduction::Mean) {
  return mantissa::l1_loss(input, target, reduction);
}
inline Tensor cross_entropy(const Tensor& input, const Tensor& target,
                            Reduction reduction = Reduction::Mean, double label_smoothing = 0.0,
                            int64_t ignore_index = -100, const Tensor& weight = Tensor()) {
  return mantissa::cross_entropy(input, target, reduction, label_smoothing, ignore_index, weight);
}
inline Tensor nll_loss(const Tensor& input, const Tensor& target,
                       Reduction reduction = Reduction::Mean, int64_t ignore_index = -100,
                       const Tensor& weight = Tensor()) {
  return mantissa::nll_loss(input, target, reduction, ignore_index, weight);
}
inline Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                               Reduction reduction = Reduction::Mean,
                                               const Tensor& pos_weight = Tensor(),
                                               const Tensor& weight = Tensor()) {
  return mantissa::binary_cross_entropy_with_logits(input, target, reduction, pos_weight, weight);
}
inline Tensor smooth_l1_loss(const Tensor& input, const Tensor& target,
                             Reduction reduction = Reduction::Mean, double beta = 1.0) {
  return mantissa::smooth_l1_loss(input, target, reduction, beta);
}
inline Tensor huber_loss(const Tensor& input, const Tensor& target,
                         Reduction reduction = Reduction::Mean, double delta = 1.0) {
  return mantissa::huber_loss(input, target, reduction, delta);
}
inline Tensor binary_cross_entropy(const Tensor& input, const Tensor& target,
                                   Reduction reduction = Reduction::Mean,
                                   const Tensor& weight = Tensor()) {
  return mantissa::binary_cross_entropy(input, target, reduction, weight);
}
inline Tensor kl_div(const Tensor& input, const Tensor& target,
                     KlDivReduction reduction = KlDivReduction::Mean, bool log_target = false) {
  return mantissa::kl_div(input, target, reduction, log_target);
}

}  // namespace functional
}  // namespace mantissa::nn
