#include "autograd/node.h"

#include <cstdint>

#include "autograd/backward.h"
#include "autograd/saved_tensor_hooks.h"
#include "autograd/view_history.h"
#include "engine/factory.h"
#include "engine/small_pool.h"

namespace mantissa {
namespace autograd {
namespace {
thread_local bool grad_mode_enabled = true;  // checked by every op
// Per thread, as in PyTorch: a graph is recorded on one thread, and its order is what counts.
thread_local uint64_t next_sequence_nr = 0;
}  // namespace

bool GradMode::is_enabled() { return grad_mode_enabled; }
void GradMode::set_enabled(bool enabled) { grad_mode_enabled = enabled; }

Node::Node() : sequence_nr(next_sequence_nr++) {}

Tensor SavedTensor::unpack(const char* node_name) const {
  MT_CHECK(!released_,
           "Trying to backward through the graph a second time (or directly access "
           "saved tensors after they have already been freed). Saved intermediate values of the "
           "graph are freed when you call backward() or autograd::grad(). Pass retain_graph=true "
           "if you need to backward through the graph a second time (node: ",
           node_name, ")");
  if (packed_ != nullptr) return packed_->unpack();
  if (data_.defined()) {
    MT_CHECK(data_.version() == version_,
             "one of the tensors needed for gradient computation has been modified by an "
             "in-place operation: a tensor of shape ",
             data_.shape(), " and dtype ", data_.dtype(), " saved by ", node_name,
             " is at version ", data_.version(), "; expected version ", version_, " instead");
  }
  return data_;
}

void SavedTensor::release() {
  data_ = Tensor();
  if (packed_ != nullptr) packed_->release();
  packed_.reset();
  released_ = true;
}

AccumulateGrad::AccumulateGrad(const Tensor& v) : variable_(v.impl_ptr()), dtype_(v.dtype()) {
  num_outputs = 1;
  sequence_nr = UINT64_MAX;
}

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>&& grads) {
  Tensor& g = grads[0];
  if (!g.defined()) return {};
  std::shared_ptr<TensorImpl> impl = variable_.lock();
  if (impl == nullptr) return {};
  const Tensor variable(std::move(impl));
  AutogradMeta& m = ensure_meta(variable);
  // The engine runs with grad mode on exactly when it builds a graph (create_graph).
  const bool create_graph = GradMode::is_enabled();
  for (const auto& hook : m.leaf_hooks) apply_grad_hook(hook, g);
  MT_ASSERT(g.shape() == variable.shape(), "gradient of shape ", g.shape(), " for a leaf of shape ",
            variable.shape());
  if (create_graph) {
    // Out of place and recorded, so that .grad can be differentiated: a clone of the first
    // gradient, the sum for later ones.
    const Tensor ng = g.to(variable.dtype());
    m.grad = m.grad.defined() ? m.grad + ng : ng.clone();
  } else {
    NoGradGuard no_grad;
    if (!m.grad.defined()) {
      // Take ownership when nothing else references the gradient; otherwise copy, so that two
      // leaves never share one .grad buffer.
      const bool exclusive = g.impl_ptr().use_count() == 1 && g.storage().use_count() == 1 &&
                             g.is_contiguous() && g.dtype() == variable.dtype();
      m.grad = exclusive ? std::move(g) : g.to(variable.dtype()).clone();
    } else {
      m.grad.add_(g);
    }
  }
  if (!m.post_accumulate_hooks.empty()) {
    // A copy: a hook may register or remove hooks.
    const auto hooks = m.post_accumulate_hooks;
    for (const auto& [handle, hook] : hooks) hook(variable);
  }
  return {};
}

AutogradMeta* meta(const Tensor& t) {
  return t.defined() ? t.unsafe_impl()->autograd.get() : nullptr;
}

AutogradMeta& ensure_meta(const Tensor& t) {
  auto& slot = t.unsafe_impl()->autograd;
  if (!slot) slot = ::mantissa::detail::make_pooled<AutogradMeta>();
  return *slot;
}

Edge gradient_edge(const Tensor& t) {
  sync_view(t);
  AutogradMeta* m = meta(t);
  if (m == nullptr || !m->requires_grad) return {};
  if (m->grad_fn) return {m->grad_fn, m->output_nr};
  if (!m->grad_accumulator)
    m->grad_accumulator = ::mantissa::detail::make_pooled<AccumulateGrad>(t);
  return {m->grad_accumulator, 0};
}

void apply_grad_hook(const std::function<Tensor(const Tensor&)>& hook, Tensor& grad) {
  Tensor replacement = hook(grad);
  if (!replacement.defined()) return;
  MT_CHECK(replacement.shape() == grad.shape(),
           "register_hook: a hook returned a gradient of shape ", replacement.shape(),
           " for a gradient of shape ", grad.shape());
  MT_CHECK(replacement.device() == grad.device(), "register_hook: a hook returned a gradient on ",
           replacement.device(), " for a gradient on ", grad.device());
  grad = std::move(replacement);
}

void set_history(const Tensor& t, std::shared_ptr<Node> fn, uint32_t output_nr) {
  AutogradMeta& m = ensure_meta(t);
  m.requires_grad = true;
  m.grad_fn = std::move(fn);
  m.output_nr = output_nr;
  m.retains_grad = false;
}

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  const int64_t lead = grad.dim() - shape.size();
  Shape dims;
  for (int64_t i = 0; i < grad.dim(); ++i) {
    if (i < lead || (shape[i - lead] == 1 && grad.size(i) != 1)) dims.push_back(i);
  }
  Tensor r = dims.empty() ? grad : grad.sum(dims, /*keepdim=*/true);
  return r.shape() == shape ? r : r.reshape(shape);
}

}  // namespace autograd

// ---- Tensor's autograd methods --------------------------------------------------------------
bool Tensor::requires_grad() const {
  autograd::sync_view(*this);
  const auto* m = autograd::meta(*this);
  return m != nullptr && m->requires_grad;
}

Tensor& Tensor::requires_grad_(bool enabled) {
  if (!enabled && !is_leaf()) {
    MT_THROW(
        "requires_grad_: you can only change requires_grad flags of leaf tensors; use "
        "detach() to get a tensor without history (grad_fn: ",
        grad_fn()->name(), ")");
  }
  MT_CHECK(!enabled || is_floating(dtype()),
           "requires_grad_: only tensors of floating point dtype can require gradients, got ",
           dtype());
  if (enabled || autograd::meta(*this)) autograd::ensure_meta(*this).requires_grad = enabled;
  return *this;
}

Tensor Tensor::grad() const {
  const auto* m = autograd::meta(*this);
  return m ? m->grad : Tensor();
}

void Tensor::set_grad(const Tensor& g) const {
  if (g.defined()) {
    MT_CHECK(g.shape() == shape() && g.device() == device(), "set_grad: assigned grad of shape ",
             g.shape(), " on ", g.device(), " to a tensor of shape ", shape(), " on ", device());
  }
  autograd::ensure_meta(*this).grad = g;
}

bool Tensor::is_leaf() const {
  autograd::sync_view(*this);
  const auto* m = autograd::meta(*this);
  return m == nullptr || m->grad_fn == nullptr;
}

std::shared_ptr<autograd::Node> Tensor::grad_fn() const {
  autograd::sync_view(*this);
  const auto* m = autograd::meta(*this);
  return m ? m->grad_fn : nullptr;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  autograd::backward_from(*this, gradient, retain_graph, create_graph);
}

void Tensor::retain_grad() const {
  MT_CHECK(requires_grad(),
           "retain_grad: can't retain_grad on a tensor that has requires_grad=false");
  if (is_leaf()) return;
  auto& m = autograd::ensure_meta(*this);
  if (m.retains_grad) return;
  m.retains_grad = true;
  m.grad_fn->retained.emplace_back(m.output_nr, impl_ptr());
}

int Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const {
  MT_CHECK(requires_grad() && is_leaf(),
           "register_post_accumulate_grad_hook: the tensor must be a leaf that requires grad "
           "(a parameter)");
  autograd::AutogradMeta& m = autograd::ensure_meta(*this);
  const int handle = m.next_post_accumulate_handle++;
  m.post_accumulate_hooks.emplace_back(handle, std::move(hook));
  return handle;
}

void Tensor::remove_post_accumulate_grad_hook(int handle) const {
  autograd::AutogradMeta* m = autograd::meta(*this);
  if (m == nullptr) return;
  std::erase_if(m->post_accumulate_hooks, [&](const auto& h) { return h.first == handle; });
}

void Tensor::add_grad_hook(std::function<Tensor(const Tensor&)> hook) const {
  MT_CHECK(requires_grad(),
           "register_hook: cannot register a hook on a tensor that doesn't "
           "require gradient");
  if (is_leaf()) {
    autograd::ensure_meta(*this).leaf_hooks.push_back(std::move(hook));
    return;
  }
  autograd::Edge e = autograd::gradient_edge(*this);
  e.fn->grad_hooks.emplace_back(e.input_nr, std::move(hook));
}

Tensor Tensor::detach() const {
  return detail::make_view(*this, shape(), strides(), storage_offset());
}

namespace detail {
std::string grad_fn_name(const Tensor& t) {
  auto fn = t.grad_fn();
  return fn ? fn->name() : std::string();
}
}  // namespace detail

}  // namespace mantissa
