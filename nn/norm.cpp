#include "nn/norm.h"

#include <sstream>
#include <utility>

#include "autograd/node.h"
#include "nn/repr_format.h"

namespace mantissa::nn {
using repr::py_bool;

LayerNormImpl::LayerNormImpl(Shape shape, double e, bool affine, bool with_bias)
    : UnaryModule("LayerNorm"), normalized_shape(shape), eps(e) {
  if (affine) {
    weight = register_parameter("weight", ones(shape));
    if (with_bias) bias = register_parameter("bias", zeros(shape));
  }
}
Tensor LayerNormImpl::forward(const Tensor& x) {
  return functional::layer_norm(x, normalized_shape, weight, bias, eps);
}
std::string LayerNormImpl::extra_repr() const {
  std::ostringstream os;
  os << "(";
  for (int64_t i = 0; i < normalized_shape.size(); ++i)
    os << (i ? ", " : "") << normalized_shape[i];
  os << (normalized_shape.size() == 1 ? ",)" : ")") << ", eps=" << eps
     << ", elementwise_affine=" << py_bool(weight.defined());
  return os.str();
}

BatchNormImpl::BatchNormImpl(std::string type_name, int64_t dims_lo, int64_t dims_hi,
                             int64_t features, double e, std::optional<double> m, bool aff,
                             bool track)
    : UnaryModule(std::move(type_name)),
      num_features(features),
      eps(e),
      momentum(m),
      affine(aff),
      track_running_stats(track),
      dims_lo_(dims_lo),
      dims_hi_(dims_hi) {
  MT_CHECK(features > 0, this->type_name(), ": num_features must be positive, got ", features);
  if (affine) {
    weight = register_parameter("weight", ones({features}));
    bias = register_parameter("bias", zeros({features}));
  }
  if (track_running_stats) {
    running_mean = register_buffer("running_mean", zeros({features}));
    running_var = register_buffer("running_var", ones({features}));
    num_batches_tracked =
        register_buffer("num_batches_tracked", zeros(Shape{}, TensorOptions().dtype(kInt64)));
  }
}

void BatchNormImpl::reset_running_stats() {
  if (!track_running_stats) return;
  autograd::NoGradGuard no_grad;
  running_mean.zero_();
  running_var.fill_(1);
  num_batches_tracked.zero_();
}

void BatchNormImpl::reset_parameters() {
  reset_running_stats();
  if (!affine) return;
  autograd::NoGradGuard no_grad;
  weight.fill_(1);
  bias.zero_();
}

Tensor BatchNormImpl::forward(const Tensor& x) {
  MT_CHECK(x.dim() >= dims_lo_ && x.dim() <= dims_hi_, type_name(), ": expected ",
           dims_lo_ == dims_hi_
               ? std::to_string(dims_lo_) + "D"
               : std::to_string(dims_lo_) + "D or " + std::to_string(dims_hi_) + "D",
           " input, got ", x.dim(), "D input of shape ", x.shape());
  double factor = momentum.value_or(0.0);
  if (is_training() && track_running_stats) {
    autograd::NoGradGuard no_grad;
    num_batches_tracked.add_(1);
    if (!momentum) factor = 1.0 / static_cast<double>(num_batches_tracked.item<int64_t>());
  }
  const bool use_batch_stats = is_training() || !track_running_stats;
  const bool pass_running = !is_training() || track_running_stats;
  return functional::batch_norm(x, pass_running ? running_mean : Tensor(),
                                pass_running ? running_var : Tensor(), weight, bias,
                                use_batch_stats, factor, eps);
}

std::string BatchNormImpl::extra_repr() const {
  std::ostringstream os;
  os << num_features << ", eps=" << eps << ", momentum=";
  if (momentum) {
    os << *momentum;
  } else {
    os << "None";
  }
  os << ", affine=" << py_bool(affine) << ", track_running_stats=" << py_bool(track_running_stats);
  return os.str();
}

GroupNormImpl::GroupNormImpl(int64_t groups, int64_t channels, double e, bool affine)
    : UnaryModule("GroupNorm"), num_groups(groups), num_channels(channels), eps(e) {
  MT_CHECK(groups > 0 && channels % groups == 0,
           "GroupNorm: num_channels must be divisible by num_groups, got ", channels, " and ",
           groups);
  if (affine) {
    weight = register_parameter("weight", ones({channels}));
    bias = register_parameter("bias", zeros({channels}));
  }
}
Tensor GroupNormImpl::forward(const Tensor& x) {
  return functional::group_norm(x, num_groups, weight, bias, eps);
}
std::string GroupNormImpl::extra_repr() const {
  std::ostringstream os;
  os << num_groups << ", " << num_channels << ", eps=" << eps
     << ", affine=" << py_bool(weight.defined());
  return os.str();
}

RMSNormImpl::RMSNormImpl(Shape shape, std::optional<double> e, bool affine)
    : UnaryModule("RMSNorm"), normalized_shape(shape), eps(e) {
  if (affine) weight = register_parameter("weight", ones(shape));
}
Tensor RMSNormImpl::forward(const Tensor& x) {
  return functional::rms_norm(x, normalized_shape, weight, eps);
}
std::string RMSNormImpl::extra_repr() const {
  std::ostringstream os;
  os << "(";
  for (int64_t i = 0; i < normalized_shape.size(); ++i)
    os << (i ? ", " : "") << normalized_shape[i];
  os << (normalized_shape.size() == 1 ? ",)" : ")") << ", eps=";
  if (eps) {
    os << *eps;
  } else {
    os << "None";
  }
  os << ", elementwise_affine=" << py_bool(weight.defined());
  return os.str();
}

}  // namespace mantissa::nn
