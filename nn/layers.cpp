#include "nn/layers.h"

#include <charconv>
#include <cmath>
#include <sstream>

#include "autograd/node.h"
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
  if (float8) {
    // The layer's float8 state follows its weight.
    for (Tensor* t : {&float8_amax_history, &float8_scale, &float8_stats})
      if (t->defined() && t->device() != weight.device()) *t = t->to(weight.device());
    if (is_training())
      return float8_linear(x, weight, bias, *float8, float8_amax_history, float8_scale,
                           float8_stats);
    // Evaluation casts with the held scales and leaves the history and the stats as they are.
    const Tensor history = float8_amax_history.defined() ? float8_amax_history.clone() : Tensor();
    return float8_linear(x, weight, bias, *float8, history, float8_scale);
  }
  return linear(x, weight, bias);
}

std::string LinearImpl::extra_repr() const {
  std::ostringstream os;
  os << "in_features=" << in_features << ", out_features=" << out_features
     << ", bias=" << (bias.defined() ? "True" : "False") << (float8 ? ", float8=True" : "");
  return os.str();
}

GELUImpl::GELUImpl(std::string approx) : UnaryModule("GELU"), approximate(std::move(approx)) {
  MT_CHECK(approximate == "none" || approximate == "tanh",
           "GELU: approximate must be 'none' or "
           "'tanh', got '",
           approximate, "'");
}

namespace {
// A double as Python's repr writes a float (shortest round trip, "1.0" rather than "1").
std::string py_float(double v) {
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), v);
  std::string s(buf, res.ptr);
  if (s.find_first_of(".ein") == std::string::npos) s += ".0";
  return s;
}
// Softplus's defaults are Python ints (beta=1, threshold=20): whole values print without ".0".
std::string py_number(double v) {
  return v == std::floor(v) && std::fabs(v) < 1e15 ? std::to_string(static_cast<int64_t>(v))
                                                   : py_float(v);
}
// The listed activations' modules (nn/layers.h): a parameter the op refuses (celu's alpha of 0)
// is refused when the module is made.
void check_module_param(const char* module, const char* param, bool ok, double v) {
  MT_CHECK(ok, module, ": ", param, " cannot be ", v, " (ZeroDivisionError in PyTorch)");
}
}  // namespace
#define MT_PARAM_OK_any(v) true
#define MT_PARAM_OK_positive(v) true
#define MT_PARAM_OK_nonzero(v) ((v) != 0.0)
#define MT_ACTIVATION1(name, Module, Math, node, policy, p0, d0, c0, r0, doc0)   \
  Module##Impl::Module##Impl(double value0) : UnaryModule(#Module), p0(value0) { \
    check_module_param(#Module, #p0, MT_PARAM_OK_##c0(p0), p0);                  \
  }                                                                              \
  std::string Module##Impl::extra_repr() const { return #p0 "=" + r0(p0); }
#define MT_ACTIVATION2(name, Module, Math, node, policy, p0, d0, c0, r0, doc0, p1, d1, c1, r1, \
                       doc1)                                                                   \
  Module##Impl::Module##Impl(double value0, double value1)                                     \
      : UnaryModule(#Module), p0(value0), p1(value1) {                                         \
    check_module_param(#Module, #p0, MT_PARAM_OK_##c0(p0), p0);                                \
    check_module_param(#Module, #p1, MT_PARAM_OK_##c1(p1), p1);                                \
  }                                                                                            \
  std::string Module##Impl::extra_repr() const { return #p0 "=" + r0(p0) + ", " #p1 "=" + r1(p1); }
#include "engine/activations.def"
#undef MT_PARAM_OK_any
#undef MT_PARAM_OK_positive
#undef MT_PARAM_OK_nonzero

DropoutImpl::DropoutImpl(double prob) : UnaryModule("Dropout"), p(prob) {
  MT_CHECK(p >= 0.0 && p <= 1.0, "Dropout: dropout probability has to be between 0 and 1, but got ",
           p);
}
std::string DropoutImpl::extra_repr() const {
  std::ostringstream os;
  os << "p=" << p;
  return os.str();
}

EmbeddingImpl::EmbeddingImpl(int64_t num, int64_t dim, std::optional<int64_t> pad)
    : UnaryModule("Embedding"), num_embeddings(num), embedding_dim(dim) {
  MT_CHECK(num > 0 && dim > 0, "Embedding: num_embeddings and embedding_dim must be positive, ",
           "got ", num, " and ", dim);
  if (pad) {
    MT_CHECK(*pad < num && *pad >= -num, "Embedding: Padding_idx must be within num_embeddings, ",
             "got padding_idx=", *pad, " and num_embeddings=", num);
    padding_idx = *pad < 0 ? *pad + num : *pad;
  }
  weight = register_parameter("weight", empty({num, dim}));
  reset_parameters();
}

void EmbeddingImpl::reset_parameters() {
  init::normal_(weight);
  if (padding_idx) {
    autograd::NoGradGuard no_grad;
    weight.select(0, *padding_idx).fill_(0);
  }
}

Tensor EmbeddingImpl::forward(const Tensor& indices) {
  return embedding(indices, weight, padding_idx);
}

std::string EmbeddingImpl::extra_repr() const {
  std::ostringstream os;
  os << num_embeddings << ", " << embedding_dim;
  if (padding_idx) os << ", padding_idx=" << *padding_idx;
  return os.str();
}

void SequentialImpl::push_back(std::shared_ptr<UnaryModule> module) {
  push_back(std::to_string(layers_.size()), std::move(module));
}
void SequentialImpl::push_back(const std::string& name, std::shared_ptr<UnaryModule> module) {
  register_module(name, module);
  layers_.push_back(std::move(module));
}

Tensor SequentialImpl::forward(const Tensor& x) {
  Tensor y = x;
  for (const auto& layer : layers_) {
    y = layer->forward(y);
    layer->run_forward_hooks(y);
  }
  return y;
}

FusedMLPImpl::FusedMLPImpl(int64_t in, int64_t hidden, int64_t out, LinearActivation act,
                           bool with_bias)
    : UnaryModule("FusedMLP"), activation(act) {
  MT_CHECK(act != LinearActivation::None,
           "FusedMLP: activation must be LinearActivation::Relu or GeluTanh, got None (for "
           "two layers without an activation, use two Linear modules)");
  // "0" first: one seed then gives the weights of a Sequential built layer by layer.
  fc1 = register_module("0", Linear(in, hidden, with_bias));
  fc2 = register_module("2", Linear(hidden, out, with_bias));
}

Tensor FusedMLPImpl::forward(const Tensor& x) {
  MT_CHECK(x.dim() >= 1 && x.size(-1) == fc1->in_features,
           "FusedMLP: expected input with last dimension ", fc1->in_features,
           ", got input of shape ", x.shape());
  MT_CHECK(!fc1->has_forward_hooks() && !fc2->has_forward_hooks(),
           "FusedMLP: its Linear children run inside one fused op, so their forward hooks would "
           "never run; register the hook on the FusedMLP, or build a Sequential");
  if (fc1->float8 || fc2->float8) {
    // Float8 layers (nn/float8.h) have no fused form: each layer's own forward, the activation
    // between them.
    const Tensor h = fc1->forward(x);
    return fc2->forward(activation == LinearActivation::Relu ? relu(h) : gelu(h, "tanh"));
  }
  return linear_act_linear(x, fc1->weight, fc1->bias, activation, fc2->weight, fc2->bias);
}

std::string FusedMLPImpl::extra_repr() const {
  std::ostringstream os;
  os << "in_features=" << fc1->in_features << ", hidden_features=" << fc1->out_features
     << ", out_features=" << fc2->out_features
     << ", activation=" << (activation == LinearActivation::Relu ? "relu" : "gelu_tanh");
  return os.str();
}

void ModuleListImpl::push_back(std::shared_ptr<Module> module) {
  register_module(std::to_string(modules_.size()), module);
  modules_.push_back(std::move(module));
}

const std::shared_ptr<Module>& ModuleListImpl::operator[](size_t i) const {
  MT_CHECK(i < modules_.size(), "ModuleList: index ", i, " is out of range for a list of ",
           modules_.size(), " modules");
  return modules_[i];
}

void ModuleDictImpl::insert(const std::string& key, std::shared_ptr<Module> module) {
  register_module(key, module);
  items_.emplace_back(key, std::move(module));
}

bool ModuleDictImpl::contains(const std::string& key) const {
  for (const auto& [k, _] : items_)
    if (k == key) return true;
  return false;
}

const std::shared_ptr<Module>& ModuleDictImpl::operator[](const std::string& key) const {
  for (const auto& [k, m] : items_)
    if (k == key) return m;
  MT_THROW("ModuleDict: no module under key '", key, "'");
}

std::vector<std::string> ModuleDictImpl::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, _] : items_) out.push_back(k);
  return out;
}

}  // namespace mantissa::nn
