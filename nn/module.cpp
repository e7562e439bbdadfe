#include "nn/module.h"

#include <cstdlib>
#include <ostream>
#include <sstream>
#include <typeinfo>
#include <unordered_set>
#if __has_include(<cxxabi.h>)
#include <cxxabi.h>
#endif

#include "autograd/node.h"

namespace mantissa::nn {

bool name_matches(std::string_view pattern, std::string_view name) {
  size_t p = 0, n = 0, star = std::string_view::npos, mark = 0;
  while (n < name.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = n;
    } else if (p < pattern.size() && pattern[p] == name[n]) {
      ++p, ++n;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      n = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

// ---- StateDict ------------------------------------------------------------------------------
void StateDict::insert(const std::string& key, const Tensor& value) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    items_[it->second].second = value;
    return;
  }
  index_.emplace(key, items_.size());
  items_.emplace_back(key, value);
}

const Tensor& StateDict::at(const std::string& key) const {
  auto it = index_.find(key);
  MT_CHECK(it != index_.end(), "state dict has no key '", key, "'");
  return items_[it->second].second;
}

std::vector<std::string> StateDict::keys() const {
  std::vector<std::string> k;
  for (const auto& [name, _] : items_) k.push_back(name);
  return k;
}

// ---- registration ---------------------------------------------------------------------------
namespace {
// The unqualified class name of `m`'s dynamic type ("ToyModel" for ns::ToyModel).
std::string class_name(const Module& m) {
  std::string name = typeid(m).name();
#if __has_include(<cxxabi.h>)
  int status = 0;
  if (char* d = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status); d != nullptr) {
    if (status == 0) name = d;
    std::free(d);
  }
#endif
  const size_t colon = name.rfind("::");
  return colon == std::string::npos ? name : name.substr(colon + 2);
}

void check_name(const std::string& name, const char* what) {
  MT_CHECK(!name.empty() && name.find('.') == std::string::npos, "register_", what, ": name '",
           name, "' must be non-empty and must not contain '.'");
}
}  // namespace

std::string Module::type_name() const {
  return type_name_.empty() ? class_name(*this) : type_name_;
}

Tensor& Module::register_parameter(const std::string& name, Tensor tensor, bool requires_grad) {
  check_name(name, "parameter");
  for (auto& [n, t] : parameters_)
    MT_CHECK(n != name, "register_parameter: '", name, "' already exists");
  if (tensor.defined() && requires_grad) tensor.requires_grad_(true);
  parameters_.emplace_back(name, tensor);
  return parameters_.back().second;
}

Tensor& Module::register_buffer(const std::string& name, Tensor tensor) {
  check_name(name, "buffer");
  for (auto& [n, t] : buffers_) MT_CHECK(n != name, "register_buffer: '", name, "' already exists");
  buffers_.emplace_back(name, tensor);
  return buffers_.back().second;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> child) {
  check_name(name, "module");
  MT_CHECK(child != nullptr, "register_module: module '", name, "' is empty");
  for (auto& [n, c] : children_)
    MT_CHECK(n != name, "register_module: '", name, "' already exists");
  children_.emplace_back(name, std::move(child));
}

// ---- traversal ------------------------------------------------------------------------------
// Each tensor is reported once, under its first name, so tied weights (one module registered
// twice, or one tensor in two modules) are optimized once, as PyTorch's remove_duplicate.
template <typename F>
void Module::collect(const std::string& prefix, bool recurse, bool params, F&& f) const {
  std::unordered_set<const TensorImpl*> seen;
  const auto visit = [&](const auto& self, const Module& m, const std::string& pre) -> void {
    for (const auto& [name, t] : params ? m.parameters_ : m.buffers_)
      if (t.defined() && seen.insert(t.unsafe_impl()).second) f(pre + name, t);
    if (!recurse) return;
    for (const auto& [name, child] : m.children_) self(self, *child, pre + name + ".");
  };
  visit(visit, *this, prefix);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", recurse, true,
          [&](const std::string& n, const Tensor& t) { out.emplace_back(n, t); });
  return out;
}
std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  collect("", recurse, true, [&](const std::string&, const Tensor& t) { out.push_back(t); });
  return out;
}
std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", recurse, false,
          [&](const std::string& n, const Tensor& t) { out.emplace_back(n, t); });
  return out;
}
std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  collect("", recurse, false, [&](const std::string&, const Tensor& t) { out.push_back(t); });
  return out;
}
std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& [_, c] : children_) out.push_back(c);
  return out;
}
std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const {
  return children_;
}
std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules() {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  // A module that no shared_ptr owns (a model on the stack) is returned as a non-owning handle.
  std::shared_ptr<Module> self = weak_from_this().lock();
  if (!self) self = std::shared_ptr<Module>(std::shared_ptr<Module>(), this);
  out.emplace_back("", std::move(self));
  for (const auto& [name, child] : children_) {
    for (auto& [sub, m] : child->named_modules())
      out.emplace_back(sub.empty() ? name : name + "." + sub, m);
  }
  return out;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [_, c] : children_) c->train(on);
}

// ---- conversion -----------------------------------------------------------------------------
namespace {
// Points `t`'s own TensorImpl at converted data, keeping its identity (and autograd flags), so
// every handle to the parameter — a layer's member, an optimizer's list — sees the change.
void convert_in_place(const Tensor& t, Device device, std::optional<DType> dtype) {
  const DType target = dtype && is_floating(t.dtype()) ? *dtype : t.dtype();
  if (t.device() == device && t.dtype() == target) return;
  Tensor converted;
  {
    autograd::NoGradGuard no_grad;
    converted = t.detach().to(device).to(target).contiguous();
  }
  TensorImpl* impl = t.unsafe_impl();
  TensorImpl* src = converted.unsafe_impl();
  impl->storage = src->storage;
  impl->sizes = src->sizes;
  impl->strides = src->strides;
  impl->offset = src->offset;
  impl->dtype = src->dtype;
  impl->refresh_contiguous();
  if (auto* m = autograd::meta(t); m && m->grad.defined()) convert_in_place(m->grad, device, dtype);
}
}  // namespace

void Module::convert(Device device, std::optional<DType> dtype) {
  check_device_exists(device);
  for (auto& [_, t] : parameters_)
    if (t.defined()) convert_in_place(t, device, dtype);
  for (auto& [_, t] : buffers_)
    if (t.defined()) convert_in_place(t, device, dtype);
  for (auto& [_, c] : children_) c->convert(device, dtype);
}

namespace {
Device first_device(const Module& m) {
  auto params = m.parameters();
  if (!params.empty()) return params[0].device();
  auto bufs = m.buffers();
  return bufs.empty() ? Device::cpu() : bufs[0].device();
}
}  // namespace

void Module::to(Device device) { convert(device, std::nullopt); }
void Module::to(DType dtype) {
  MT_CHECK(is_floating(dtype), "Module::to: only floating point dtypes are accepted, got ", dtype);
  convert(first_device(*this), dtype);
}
void Module::to(Device device, DType dtype) {
  MT_CHECK(is_floating(dtype), "Module::to: only floating point dtypes are accepted, got ", dtype);
  convert(device, dtype);
}

void Module::zero_grad(bool set_to_none) {
  for (const Tensor& p : parameters()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
    } else {
      autograd::NoGradGuard no_grad;
      g.zero_();
    }
  }
}

// ---- state dict -----------------------------------------------------------------------------
// PyTorch's order: each module's parameters, then its buffers, then its children's entries.
// Tied tensors appear under every name.
void Module::collect_state(const std::string& prefix, StateDict& out) const {
  for (const auto& [n, t] : parameters_)
    if (t.defined()) out.insert(prefix + n, t.detach());
  for (const auto& [n, t] : buffers_)
    if (t.defined()) out.insert(prefix + n, t.detach());
  for (const auto& [n, c] : children_) c->collect_state(prefix + n + ".", out);
}

StateDict Module::state_dict() const {
  StateDict out;
  collect_state("", out);
  return out;
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  std::vector<std::pair<std::string, Tensor>> own;
  for (const auto& [n, t] : state_dict()) own.emplace_back(n, t);
  std::vector<std::string> missing, unexpected;
  for (const auto& [name, t] : own)
    if (!state.contains(name)) missing.push_back(name);
  for (const auto& [name, _] : state) {
    bool found = false;
    for (const auto& [n, t] : own) found = found || n == name;
    if (!found) unexpected.push_back(name);
  }
  if (strict && (!missing.empty() || !unexpected.empty())) {
    std::ostringstream os;
    os << "load_state_dict: error(s) in loading state dict for " << type_name() << ":";
    if (!missing.empty()) {
      os << " missing key(s):";
      for (auto& k : missing) os << " \"" << k << "\"";
      os << ".";
    }
    if (!unexpected.empty()) {
      os << " unexpected key(s):";
      for (auto& k : unexpected) os << " \"" << k << "\"";
      os << ".";
    }
    MT_THROW(os.str());
  }
  autograd::NoGradGuard no_grad;
  for (const auto& [name, t] : own) {
    if (!state.contains(name)) continue;
    const Tensor& src = state.at(name);
    MT_CHECK(src.shape() == t.shape(), "load_state_dict: size mismatch for ", name,
             ": copying a param with shape ", src.shape(),
             " from checkpoint, the shape in "
             "current model is ",
             t.shape());
    MT_CHECK(is_floating(src.dtype()) == is_floating(t.dtype()),
             "load_state_dict: dtype mismatch "
             "for ",
             name, ": checkpoint has ", src.dtype(), ", the model has ", t.dtype());
    Tensor dst = t.detach();
    dst.copy_(src);
  }
}

// ---- hooks ----------------------------------------------------------------------------------
int Module::register_forward_hook(ForwardHook hook) {
  forward_hooks_.emplace_back(next_hook_handle_, std::move(hook));
  return next_hook_handle_++;
}

void Module::remove_forward_hook(int handle) {
  std::erase_if(forward_hooks_, [handle](const auto& h) { return h.first == handle; });
}

void Module::run_forward_hooks_slow(const Tensor& output) {
  const auto hooks = forward_hooks_;  // a hook may remove itself
  for (const auto& [_, hook] : hooks) hook(*this, output);
}

// ---- printing -------------------------------------------------------------------------------
std::string Module::repr(int indent) const {
  std::ostringstream os;
  os << type_name() << "(";
  if (children_.empty()) {
    os << extra_repr() << ")";
    return os.str();
  }
  os << "\n";
  const std::string pad(indent + 2, ' ');
  if (!extra_repr().empty()) os << pad << extra_repr() << "\n";
  for (const auto& [name, c] : children_)
    os << pad << "(" << name << "): " << c->repr(indent + 2) << "\n";
  os << std::string(indent, ' ') << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Module& m) { return os << m.repr(); }

}  // namespace mantissa::nn
