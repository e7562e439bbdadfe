#include "nn/layers.h"

#include <cmath>
#include <sstream>
#include <typeinfo>

#include "autograd/linear_act.h"
#include "nn/init.h"

namespace mantissa::nn {

LinearImpl::LinearImpl(int64_t in, int64_t out, bool with_bias)
    : UnaryModule("Linear"), in_features(in), out_features(out) {
  MT_CHECK(in > 0 && out > 0, "Linear: in_features and out_features must be positive, got ", in,
           " and ", out);
  weight = register_parameter("weight", empty({out, in}));
  if (with_bias) bias = register_parameter("bias", empty({out}));
  reset_parameters();
}

void LinearImpl::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor LinearImpl::forward(const Tensor& x) {
  MT_CHECK(x.dim() >= 1 && x.size(-1) == in_features,
           "Linear: expected input with last "
           "dimension ",
           in_features, ", got input of shape ", x.shape());
  return linear(x, weight, bias);
}

std::string LinearImpl::extra_repr() const {
  std::ostringstream os;
  os << "in_features=" << in_features << ", out_features=" << out_features
     << ", bias=" << (bias.defined() ? "True" : "False");
  return os.str();
}

GELUImpl::GELUImpl(std::string approx) : UnaryModule("GELU"), approximate(std::move(approx)) {
  MT_CHECK(approximate == "none" || approximate == "tanh",
           "GELU: approximate must be 'none' or "
           "'tanh', got '",
           approximate, "'");
}

DropoutImpl::DropoutImpl(double prob) : UnaryModule("Dropout"), p(prob) {
  MT_CHECK(p >= 0.0 && p <= 1.0, "Dropout: dropout probability has to be between 0 and 1, but got ",
           p);
}
std::string DropoutImpl::extra_repr() const {
  std::ostringstream os;
  os << "p=" << p;
  return os.str();
}

LayerNormImpl::LayerNormImpl(Shape shape, double e, bool affine)
    : UnaryModule("LayerNorm"), normalized_shape(shape), eps(e) {
  if (affine) {
    weight = register_parameter("weight", ones(shape));
    bias = register_parameter("bias", zeros(shape));
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
     << ", elementwise_affine=" << (weight.defined() ? "True" : "False");
  return os.str();
}

void SequentialImpl::push_back(std::shared_ptr<UnaryModule> module) {
  push_back(std::to_string(layers_.size()), std::move(module));
}
void SequentialImpl::push_back(const std::string& name, std::shared_ptr<UnaryModule> module) {
  register_module(name, module);
  layers_.push_back(std::move(module));
}

Tensor SequentialImpl::try_linear_relu_linear(size_t i, const Tensor& x) const {
  // Exact classes only: a subclass may override forward.
  const auto is = [&](size_t k, const std::type_info& type) {
    const UnaryModule& m = *layers_[k];
    return typeid(m) == type;
  };
  if (i + 2 >= layers_.size() || !is(i, typeid(LinearImpl)) || !is(i + 1, typeid(ReLUImpl)) ||
      !is(i + 2, typeid(LinearImpl))) {
    return {};
  }
  const auto& l1 = static_cast<const LinearImpl&>(*layers_[i]);
  const auto& act = *layers_[i + 1];
  const auto& l2 = static_cast<const LinearImpl&>(*layers_[i + 2]);
  if (l1.has_forward_hooks() || act.has_forward_hooks() || l2.has_forward_hooks()) return {};
  // Anything unusual takes the module-by-module path, which owns the error messages.
  // CPU only: there the fused op computes exactly what the modules do. On CUDA it rides in
  // cuBLASLt epilogues, which add the bias before rounding a half-precision result.
  if (!x.defined() || !x.device().is_cpu() || !is_floating(x.dtype()) || x.dim() < 1 ||
      x.size(-1) != l1.in_features || l1.out_features != l2.in_features) {
    return {};
  }
  for (const Tensor* t : {&l1.weight, &l1.bias, &l2.weight, &l2.bias}) {
    if (t->defined() && (t->dtype() != x.dtype() || !(t->device() == x.device()))) return {};
  }
  return linear_act_linear(x, l1.weight, l1.bias, LinearActivation::Relu, l2.weight, l2.bias);
}

Tensor SequentialImpl::forward(const Tensor& x) {
  Tensor y = x;
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (Tensor fused = try_linear_relu_linear(i, y); fused.defined()) {
      y = std::move(fused);
      i += 2;
      continue;
    }
    y = layers_[i]->forward(y);
    layers_[i]->run_forward_hooks(y);
  }
  return y;
}

}  // namespace mantissa::nn
