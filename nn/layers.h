// Layers: Linear, activations, Dropout, Softmax/LogSoftmax, Flatten, Identity, Embedding, and the
// containers Sequential, ModuleList and ModuleDict (convolution, pooling and normalisation have
// headers of their own: nn/conv.h, nn/pooling.h, nn/norm.h).
// Each is a `NameImpl` module with a `Name` holder, as in PyTorch's C++ frontend.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nn/functional.h"
#include "nn/module.h"

namespace mantissa::nn {

// A module computing Tensor -> Tensor; what Sequential chains.
class UnaryModule : public Module {
 public:
  using Module::Module;
  virtual Tensor forward(const Tensor& x) = 0;
};

class LinearImpl : public UnaryModule {
 public:
  // weight [out, in] ~ kaiming_uniform(a = sqrt(5)), bias ~ U(-1/sqrt(in), 1/sqrt(in)).
  LinearImpl(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override;
  void reset_parameters();
  std::string extra_repr() const override;
  int64_t in_features, out_features;
  Tensor weight, bias;
  // Set: the layer's products run in float8 as this says (float8_linear; nn/float8.h sets it on
  // the Linear layers of a model).
  std::optional<Float8LinearConfig> float8;
  // Delayed scaling's state (float8_linear's amax_history [len, 3] and scale [3], float32: the
  // input, the weight and the output's gradient), made by convert_to_float8_training and moved
  // on by update_float8_scales (nn/float8.h). Not in the state_dict: training checkpoints hold it
  // (runner/training/checkpoint.h). It follows the weight's device.
  Tensor float8_amax_history, float8_scale;
  // float8_linear's stats, when asked for (track_float8_stats, nn/float8.h).
  Tensor float8_stats;
};
MANTISSA_MODULE(Linear);

#define MANTISSA_ACTIVATION(Name, expr)                       \
  class Name##Impl : public UnaryModule {                     \
   public:                                                    \
    Name##Impl() : UnaryModule(#Name) {}                      \
    Tensor forward(const Tensor& x) override { return expr; } \
  };                                                          \
  MANTISSA_MODULE(Name)
MANTISSA_ACTIVATION(ReLU, relu(x));
MANTISSA_ACTIVATION(Sigmoid, sigmoid(x));
MANTISSA_ACTIVATION(Tanh, tanh(x));

// The modules of the listed activations (engine/activations.def): SiLU, Mish, Hardswish, SELU,
// Softsign, LogSigmoid, LeakyReLU, ELU, CELU, Softplus, Hardtanh, with their parameters as
// members (defaults as torch.nn's) and printed as PyTorch prints them.
#define MT_ACTIVATION(name, Module, Math, node, policy) MANTISSA_ACTIVATION(Module, name(x));
#define MT_ACTIVATION1(name, Module, Math, node, policy, p0, d0, c0, r0, doc0) \
  class Module##Impl : public UnaryModule {                                    \
   public:                                                                     \
    explicit Module##Impl(double p0 = d0);                                     \
    Tensor forward(const Tensor& x) override { return name(x, p0); }           \
    std::string extra_repr() const override;                                   \
    double p0;                                                                 \
  };                                                                           \
  MANTISSA_MODULE(Module);
#define MT_ACTIVATION2(name, Module, Math, node, policy, p0, d0, c0, r0, doc0, p1, d1, c1, r1, \
                       doc1)                                                                   \
  class Module##Impl : public UnaryModule {                                                    \
   public:                                                                                     \
    explicit Module##Impl(double p0 = d0, double p1 = d1);                                     \
    Tensor forward(const Tensor& x) override { return name(x, p0, p1); }                       \
    std::string extra_repr() const override;                                                   \
    double p0, p1;                                                                             \
  };                                                                                           \
  MANTISSA_MODULE(Module);
#include "engine/activations.def"
#undef MANTISSA_ACTIVATION

class GELUImpl : public UnaryModule {
 public:
  explicit GELUImpl(std::string approximate = "none");
  Tensor forward(const Tensor& x) override { return gelu(x, approximate); }
  std::string extra_repr() const override { return "approximate='" + approximate + "'"; }
  std::string approximate;
};
MANTISSA_MODULE(GELU);

class DropoutImpl : public UnaryModule {
 public:
  explicit DropoutImpl(double p = 0.5);
  Tensor forward(const Tensor& x) override { return dropout(x, p, is_training()); }
  std::string extra_repr() const override;
  double p;
};
MANTISSA_MODULE(Dropout);

class SoftmaxImpl : public UnaryModule {
 public:
  explicit SoftmaxImpl(int64_t dim) : UnaryModule("Softmax"), dim(dim) {}
  Tensor forward(const Tensor& x) override { return softmax(x, dim); }
  std::string extra_repr() const override { return "dim=" + std::to_string(dim); }
  int64_t dim;
};
MANTISSA_MODULE(Softmax);

class LogSoftmaxImpl : public UnaryModule {
 public:
  explicit LogSoftmaxImpl(int64_t dim) : UnaryModule("LogSoftmax"), dim(dim) {}
  Tensor forward(const Tensor& x) override { return log_softmax(x, dim); }
  std::string extra_repr() const override { return "dim=" + std::to_string(dim); }
  int64_t dim;
};
MANTISSA_MODULE(LogSoftmax);

class FlattenImpl : public UnaryModule {
 public:
  explicit FlattenImpl(int64_t start_dim = 1, int64_t end_dim = -1)
      : UnaryModule("Flatten"), start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& x) override { return flatten(x, start_dim, end_dim); }
  std::string extra_repr() const override {
    return "start_dim=" + std::to_string(start_dim) + ", end_dim=" + std::to_string(end_dim);
  }
  int64_t start_dim, end_dim;
};
MANTISSA_MODULE(Flatten);

// Returns its input (the same tensor), as torch.nn.Identity.
class IdentityImpl : public UnaryModule {
 public:
  IdentityImpl() : UnaryModule("Identity") {}
  Tensor forward(const Tensor& x) override { return x; }
};
MANTISSA_MODULE(Identity);

// A lookup table: int64/int32 indices of any shape -> indices.shape + [embedding_dim] rows of
// weight [num_embeddings, embedding_dim] ~ N(0, 1). padding_idx (negative counts from the end)
// names a row initialised to zero whose gradient stays zero.
class EmbeddingImpl : public UnaryModule {
 public:
  EmbeddingImpl(int64_t num_embeddings, int64_t embedding_dim,
                std::optional<int64_t> padding_idx = std::nullopt);
  Tensor forward(const Tensor& indices) override;
  void reset_parameters();
  std::string extra_repr() const override;
  int64_t num_embeddings, embedding_dim;
  std::optional<int64_t> padding_idx;  // normalised to [0, num_embeddings)
  Tensor weight;
};
MANTISSA_MODULE(Embedding);

// Runs its children in order, each through its own forward and hooks; children are named "0",
// "1", ... unless given a name. Nothing is fused behind the user's back: a fused block is asked
// for by name (FusedMLP, or nn::functional::linear with an Activation).
class SequentialImpl : public UnaryModule {
 public:
  SequentialImpl() : UnaryModule("Sequential") {}
  template <typename... Modules>
  requires(sizeof...(Modules) > 0) explicit SequentialImpl(Modules&&... modules)
      : UnaryModule("Sequential") {
    (push_back(std::forward<Modules>(modules)), ...);
  }
  void push_back(std::shared_ptr<UnaryModule> module);
  void push_back(const std::string& name, std::shared_ptr<UnaryModule> module);
  template <typename Holder>
  requires requires(Holder h) { h.ptr(); }
  void push_back(const Holder& holder) {
    push_back(std::static_pointer_cast<UnaryModule>(holder.ptr()));
  }
  template <typename Holder>
  requires requires(Holder h) { h.ptr(); }
  void push_back(const std::string& name, const Holder& holder) {
    push_back(name, std::static_pointer_cast<UnaryModule>(holder.ptr()));
  }
  Tensor forward(const Tensor& x) override;
  size_t size() const { return layers_.size(); }
  std::shared_ptr<UnaryModule> operator[](size_t i) const { return layers_.at(i); }

 private:
  std::vector<std::shared_ptr<UnaryModule>> layers_;
};
MANTISSA_MODULE(Sequential);

// Linear(in, hidden) -> activation -> Linear(hidden, out) as one linear_act_linear op, on every
// device: one autograd node, the activation applied in the first layer's GEMM epilogue, and in
// backward its derivative and the first bias's gradient fused into the GEMM that computes the
// hidden gradient (docs/kernels.md). `activation` is LinearActivation::Relu or GeluTanh
// (gelu(x, "tanh")).
//
// The two layers are Linear children named "0" and "2", so the state_dict keys ("0.weight",
// "0.bias", "2.weight", "2.bias") are those of Sequential(Linear, ReLU, Linear): checkpoints move
// between the two, and to PyTorch's nn.Sequential. "0" is created first, so one seed gives the
// initial values of a Sequential built layer by layer. The outputs are linear_act_linear's,
// which on the CPU equal the module-by-module composition's bits; where the bias is added
// relative to a half type's rounding on each device is in docs/kernels.md. The children's own
// forward hooks cannot run (the hidden layer is never a separate output), so forward refuses them.
class FusedMLPImpl : public UnaryModule {
 public:
  FusedMLPImpl(int64_t in_features, int64_t hidden_features, int64_t out_features,
               LinearActivation activation = LinearActivation::Relu, bool bias = true);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Linear fc1{nullptr}, fc2{nullptr};
  LinearActivation activation;
};
MANTISSA_MODULE(FusedMLP);

// Holds modules in a list, registered as children "0", "1", ..., so parameters(),
// named_parameters() and state_dict() see them ("0.weight"), as torch.nn.ModuleList. It has no
// forward.
class ModuleListImpl : public Module {
 public:
  ModuleListImpl() : Module("ModuleList") {}
  template <typename... Modules>
  requires(sizeof...(Modules) > 0) explicit ModuleListImpl(Modules&&... modules)
      : Module("ModuleList") {
    (push_back(std::forward<Modules>(modules)), ...);
  }
  void push_back(std::shared_ptr<Module> module);
  template <typename Holder>
  requires requires(Holder h) { h.ptr(); }
  void push_back(const Holder& holder) { push_back(std::shared_ptr<Module>(holder.ptr())); }
  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  const std::shared_ptr<Module>& operator[](size_t i) const;
  // The i-th module as its implementation type (nullptr if it is another type).
  template <typename Impl>
  std::shared_ptr<Impl> at(size_t i) const {
    return std::dynamic_pointer_cast<Impl>((*this)[i]);
  }
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};
MANTISSA_MODULE(ModuleList);

// Holds modules by name in insertion order, each registered as a child under its key, so
// state_dict() names their tensors "key.weight", as torch.nn.ModuleDict. Keys follow
// register_module's rule (non-empty, no '.'). It has no forward.
class ModuleDictImpl : public Module {
 public:
  ModuleDictImpl() : Module("ModuleDict") {}
  void insert(const std::string& key, std::shared_ptr<Module> module);
  template <typename Holder>
  requires requires(Holder h) { h.ptr(); }
  void insert(const std::string& key, const Holder& holder) {
    insert(key, std::shared_ptr<Module>(holder.ptr()));
  }
  bool contains(const std::string& key) const;
  const std::shared_ptr<Module>& operator[](const std::string& key) const;
  template <typename Impl>
  std::shared_ptr<Impl> at(const std::string& key) const {
    return std::dynamic_pointer_cast<Impl>((*this)[key]);
  }
  std::vector<std::string> keys() const;
  size_t size() const { return items_.size(); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> items_;
};
MANTISSA_MODULE(ModuleDict);

}  // namespace mantissa::nn
