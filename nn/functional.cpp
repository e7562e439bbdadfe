#include "nn/functional.h"

#include "autograd/autocast_seam.h"
#include "engine/logging.h"

namespace mantissa::nn {

Reduction parse_reduction(std::string_view name) {
  if (name == "none") return Reduction::None;
  if (name == "mean") return Reduction::Mean;
  if (name == "sum") return Reduction::Sum;
  MT_THROW("invalid reduction '", name, "' (expected none, mean or sum)");
}

namespace functional {
namespace {

Tensor reduce(const Tensor& loss, Reduction r) {
  switch (r) {
    case Reduction::None:
      return loss;
    case Reduction::Sum:
      return loss.sum();
    case Reduction::Mean:
      return loss.mean();
  }
  return loss;
}

void check_floating(const char* op, const Tensor& t, const char* what) {
  MT_CHECK(is_floating(t.dtype()), op, ": expected a floating point ", what, ", got ", t.dtype());
}

void warn_if_broadcast(const char* op, const Tensor& input, const Tensor& target) {
  if (!(input.shape() == target.shape())) {
    log().warn(
        "{}: using a target size ({}) that is different to the input size ({}); this will "
        "likely lead to incorrect results due to broadcasting",
        op, detail::str_cat(target.shape()), detail::str_cat(input.shape()));
  }
}

}  // namespace

Tensor layer_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight_in,
                  const Tensor& bias_in, double eps) {
  const Tensor x = autocast::cast_input(OpId::layer_norm, x_in);
  const Tensor weight = autocast::cast_input(OpId::layer_norm, weight_in);
  const Tensor bias = autocast::cast_input(OpId::layer_norm, bias_in);
  const int64_t k = normalized_shape.size();
  MT_CHECK(k >= 1 && k <= x.dim(), "layer_norm: normalized_shape ", normalized_shape,
           " does not fit an input of shape ", x.shape());
  for (int64_t i = 0; i < k; ++i) {
    MT_CHECK(x.size(x.dim() - k + i) == normalized_shape[i],
             "layer_norm: given normalized_shape=", normalized_shape,
             ", expected input with shape [*, ...", normalized_shape, "], but got input of size ",
             x.shape());
  }
  if (weight.defined()) {
    MT_CHECK(weight.shape() == normalized_shape, "layer_norm: weight of shape ", weight.shape(),
             " does not match normalized_shape ", normalized_shape);
  }
  if (bias.defined()) {
    MT_CHECK(bias.shape() == normalized_shape, "layer_norm: bias of shape ", bias.shape(),
             " does not match normalized_shape ", normalized_shape);
  }
  Shape dims;
  for (int64_t i = x.dim() - k; i < x.dim(); ++i) dims.push_back(i);
  const Tensor mu = mean(x, dims, /*keepdim=*/true);
  const Tensor centered = x - mu;
  const Tensor variance = mean(centered * centered, dims, /*keepdim=*/true);
  Tensor y = centered * rsqrt(variance + eps);
  if (weight.defined()) y = y * weight;
  if (bias.defined()) y = y + bias;
  return y;
}

Tensor mse_loss(const Tensor& input_in, const Tensor& target_in, Reduction reduction) {
  const Tensor input = autocast::cast_input(OpId::mse_loss, input_in);
  const Tensor target = autocast::cast_input(OpId::mse_loss, target_in);
  check_floating("mse_loss", input, "input");
  warn_if_broadcast("mse_loss", input, target);
  const Tensor diff = input - target;
  return reduce(diff * diff, reduction);
}

Tensor l1_loss(const Tensor& input_in, const Tensor& target_in, Reduction reduction) {
  const Tensor input = autocast::cast_input(OpId::l1_loss, input_in);
  const Tensor target = autocast::cast_input(OpId::l1_loss, target_in);
  check_floating("l1_loss", input, "input");
  warn_if_broadcast("l1_loss", input, target);
  return reduce(abs(input - target), reduction);
}

Tensor nll_loss(const Tensor& logp_in, const Tensor& target, Reduction reduction,
                int64_t ignore_index) {
  const Tensor logp = autocast::cast_input(OpId::nll_loss, logp_in);
  MT_CHECK(logp.dim() >= 1, "nll_loss: input must have at least 1 dimension");
  MT_CHECK(target.dtype() == kInt64 || target.dtype() == kInt32,
           "nll_loss: expected class index "
           "target of dtype int64, got ",
           target.dtype());
  // Unbatched [C] input with a 0-d target, or class dim 1 of [N, C, d1, ...].
  const bool unbatched = logp.dim() == 1;
  const Tensor lp = unbatched ? logp.unsqueeze(0) : logp;
  const Tensor tg = (unbatched ? target.reshape({1}) : target).to(kInt64);
  Shape expected = lp.shape();
  expected.erase(1);
  MT_CHECK(tg.shape() == expected, "nll_loss: expected target of shape ", expected,
           " for input of shape ", logp.shape(), ", got ", target.shape());
  const int64_t classes = lp.size(1);
  const Tensor valid = tg != ignore_index;
  const Tensor safe_target = where(valid, tg, zeros_like(tg));
  if (safe_target.numel() > 0) {
    const int64_t lo = amin(safe_target).item<int64_t>(), hi = amax(safe_target).item<int64_t>();
    MT_CHECK(lo >= 0 && hi < classes, "nll_loss: target ", lo < 0 ? lo : hi,
             " is out of bounds for ", classes, " classes");
  }
  const Tensor picked = gather(lp, 1, safe_target.unsqueeze(1)).squeeze(1);
  const Tensor weight = valid.to(lp.dtype());
  Tensor loss = -picked * weight;
  if (unbatched) loss = loss.squeeze(0);
  if (reduction == Reduction::Mean) return loss.sum() / weight.sum();
  return reduce(loss, reduction);
}

Tensor cross_entropy(const Tensor& input_in, const Tensor& target_in, Reduction reduction,
                     double label_smoothing, int64_t ignore_index) {
  const Tensor input = autocast::cast_input(OpId::cross_entropy, input_in);
  const Tensor target = autocast::cast_input(OpId::cross_entropy, target_in);
  check_floating("cross_entropy", input, "input");
  MT_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0,
           "cross_entropy: label_smoothing must "
           "be between 0.0 and 1.0, got ",
           label_smoothing);
  const int64_t class_dim = input.dim() == 1 ? 0 : 1;
  const Tensor logp = mantissa::log_softmax(input, class_dim);
  const int64_t classes = input.size(class_dim);
  if (is_floating(target.dtype())) {  // class probabilities
    MT_CHECK(target.shape() == input.shape(), "cross_entropy: probability target of shape ",
             target.shape(), " must match the input shape ", input.shape());
    Tensor t = target;
    if (label_smoothing > 0.0) t = t * (1.0 - label_smoothing) + label_smoothing / classes;
    return reduce(-sum(logp * t, {class_dim}), reduction);
  }
  Tensor loss = nll_loss(logp, target, Reduction::None, ignore_index);
  if (label_smoothing > 0.0) {
    const Tensor valid = (target != ignore_index).to(logp.dtype());
    const Tensor smooth = -sum(logp, {class_dim}) / static_cast<double>(classes) * valid;
    loss = loss * (1.0 - label_smoothing) + smooth * label_smoothing;
  }
  if (reduction == Reduction::Mean) {
    const Tensor valid = (target != ignore_index).to(logp.dtype());
    return loss.sum() / valid.sum();
  }
  return reduce(loss, reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& input_in, const Tensor& target_in,
                                        Reduction reduction, const Tensor& pos_weight_in) {
  constexpr OpId op = OpId::binary_cross_entropy_with_logits;
  const Tensor input = autocast::cast_input(op, input_in);
  const Tensor target = autocast::cast_input(op, target_in);
  const Tensor pos_weight = autocast::cast_input(op, pos_weight_in);
  check_floating("binary_cross_entropy_with_logits", input, "input");
  MT_CHECK(target.shape() == input.shape(), "binary_cross_entropy_with_logits: target size (",
           target.shape(), ") must be the same as input size (", input.shape(), ")");
  // log(1 + exp(-|x|)) + max(-x, 0) is log(1 + exp(-x)) without overflow. Both terms have a
  // kink at x = 0 that cancels; abs' (0) = 0 there, so max must split its gradient at the tie
  // (maximum does; relu' (0) = 0 would give d/dx = 0 instead of -1/2 at x = 0).
  const Tensor zero = zeros({}, TensorOptions(input.device()).dtype(input.dtype()));
  const Tensor log1p_exp_neg = log1p(exp(-abs(input))) + maximum(-input, zero);
  Tensor loss;
  if (pos_weight.defined()) {
    const Tensor log_weight = (pos_weight - 1.0) * target + 1.0;
    loss = (1.0 - target) * input + log_weight * log1p_exp_neg;
  } else {
    loss = (1.0 - target) * input + log1p_exp_neg;
  }
  return reduce(loss, reduction);
}

}  // namespace functional
}  // namespace mantissa::nn
