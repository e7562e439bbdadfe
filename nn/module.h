// nn::Module: the base of every layer and model, and ModuleHolder, the PyTorch-C++-style handle
// (`nn::Linear net{nullptr}; net = register_module("net", nn::Linear(10, 10)); net(x);`).
#pragma once

#include <concepts>
#include <cstddef>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "autograd/functions.h"
#include "engine/tensor.h"

namespace mantissa::nn {

// Name -> tensor, in insertion order (as PyTorch's state_dict: each module's parameters, then its
// buffers, then its children's entries).
class StateDict {
 public:
  void insert(const std::string& key, const Tensor& value);
  bool contains(const std::string& key) const { return index_.count(key) != 0; }
  const Tensor& at(const std::string& key) const;
  size_t size() const { return items_.size(); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }
  std::vector<std::string> keys() const;

 private:
  std::vector<std::pair<std::string, Tensor>> items_;
  std::unordered_map<std::string, size_t> index_;
};

// `name` matches `pattern`, `*` standing for any run of characters ("blocks.*.mlp.*"): how
// parameters and modules are chosen by name (Muon's groups, float8 layers).
bool name_matches(std::string_view pattern, std::string_view name);

class Module : public std::enable_shared_from_this<Module> {
 public:
  // Without a name, the dynamic class name is used (`struct ToyModel : Module` prints as
  // "ToyModel", as in PyTorch).
  explicit Module(std::string type_name = "") : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The class name shown when printing ("Linear", "ToyModel", ...).
  std::string type_name() const;

  // Registration returns the stored handle; a module keeps the same tensor objects for its
  // lifetime (to() converts them in place), so handles held elsewhere stay valid.
  Tensor& register_parameter(const std::string& name, Tensor tensor, bool requires_grad = true);
  Tensor& register_buffer(const std::string& name, Tensor tensor);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }
  template <typename Holder>
  requires requires(Holder h) { h.ptr(); }
  Holder register_module(const std::string& name, Holder holder) {
    add_child(name, holder.ptr());
    return holder;
  }

  // Each tensor once, under its first name (tied weights are not repeated), as PyTorch.
  std::vector<Tensor> parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  std::vector<std::shared_ptr<Module>> children() const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  // This module and every descendant, depth first, with dotted names ("" for this one).
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules();

  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Converts every parameter and buffer (and existing grads) in place, recursively. to(dtype)
  // only converts floating-point tensors, as PyTorch's Module.to does.
  void to(Device device);
  void to(DType dtype);
  void to(Device device, DType dtype);
  void zero_grad(bool set_to_none = true);

  StateDict state_dict() const;
  // strict: every key must match. Shapes and dtypes are checked; values are copied in place
  // (converted to each parameter's device).
  void load_state_dict(const StateDict& state, bool strict = true);

  // Forward hooks run after this module's forward when it is called through its holder (or by
  // Sequential), in registration order. Returns a handle for remove_forward_hook.
  using ForwardHook = std::function<void(Module& module, const Tensor& output)>;
  int register_forward_hook(ForwardHook hook);
  void remove_forward_hook(int handle);
  bool has_forward_hooks() const { return !forward_hooks_.empty(); }
  void run_forward_hooks(const Tensor& output) {
    if (!forward_hooks_.empty()) [[unlikely]]
      run_forward_hooks_slow(output);
  }

  // One line describing this module's own configuration ("in_features=10, out_features=5").
  virtual std::string extra_repr() const { return ""; }
  std::string repr(int indent = 0) const;

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> child);
  void convert(Device device, std::optional<DType> dtype);
  template <typename F>
  void collect(const std::string& prefix, bool recurse, bool params, F&& f) const;
  void collect_state(const std::string& prefix, StateDict& out) const;

  void run_forward_hooks_slow(const Tensor& output);

  std::string type_name_;
  bool training_ = true;
  std::vector<std::pair<int, ForwardHook>> forward_hooks_;
  int next_hook_handle_ = 0;
  std::vector<std::pair<std::string, Tensor>> parameters_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

std::ostream& operator<<(std::ostream& os, const Module& m);

// A shared handle to a module implementation, callable like the module itself.
template <typename Impl>
class ModuleHolder {
 public:
  using ImplType = Impl;
  ModuleHolder() requires std::default_initializable<Impl> : impl_(std::make_shared<Impl>()) {}
  ModuleHolder(std::nullptr_t) {}  // NOLINT: an empty holder, filled by register_module later
  ModuleHolder(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}  // NOLINT
  template <typename First, typename... Rest>
  requires(!std::same_as<std::remove_cvref_t<First>, ModuleHolder> &&
           !std::same_as<std::remove_cvref_t<First>, std::nullptr_t> &&
           !std::same_as<std::remove_cvref_t<First>, std::shared_ptr<Impl>> &&
           std::constructible_from<Impl, First, Rest...>) explicit ModuleHolder(First&& first,
                                                                                Rest&&... rest)
      : impl_(std::make_shared<Impl>(std::forward<First>(first), std::forward<Rest>(rest)...)) {}

  Impl* operator->() const { return &get(); }
  Impl& operator*() const { return get(); }
  Impl& get() const {
    MT_CHECK(impl_ != nullptr,
             "accessing an empty module holder (constructed from nullptr and "
             "never assigned)");
    return *impl_;
  }
  const std::shared_ptr<Impl>& ptr() const { return impl_; }
  bool is_empty() const { return impl_ == nullptr; }
  template <typename... Args>
  decltype(auto) operator()(Args&&... args) const {
    using Result = decltype(get().forward(std::forward<Args>(args)...));
    if constexpr (std::is_same_v<std::remove_cvref_t<Result>, Tensor>) {
      Tensor out = get().forward(std::forward<Args>(args)...);
      get().run_forward_hooks(out);
      return out;
    } else {
      return get().forward(std::forward<Args>(args)...);
    }
  }

 private:
  std::shared_ptr<Impl> impl_;
};

// Declares `Name` as the holder of `NameImpl`.
#define MANTISSA_MODULE(Name)                                     \
  class Name : public ::mantissa::nn::ModuleHolder<Name##Impl> {  \
   public:                                                        \
    using ::mantissa::nn::ModuleHolder<Name##Impl>::ModuleHolder; \
  }

}  // namespace mantissa::nn
