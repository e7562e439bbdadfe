#include "autograd/recorder.h"

#include "autograd/saved_tensor_hooks.h"
#include "autograd/view_history.h"

#include "engine/factory.h"
#include "engine/small_pool.h"

namespace mantissa::autograd {

Tensor BackwardContext::grad(size_t i) const {
  if (!grads_[i].defined()) {
    const auto& info = node_.outputs[i];
    grads_[i] = zeros(info.shape, TensorOptions(info.device).dtype(info.dtype));
  }
  return grads_[i];
}

Tensor BackwardContext::saved(size_t i) const {
  const SavedTensor& s = node_.saved[i];
  Tensor t = s.unpack(node_.name_);
  if (s.output_nr() == SavedTensor::kNotOutput || !create_graph() || !t.defined()) return t;
  MT_CHECK(s.output_nr() != SavedTensor::kViewOfOutput, "backward: op ", node_.name_,
           " does not support create_graph (double backward): it saved a view of its output");
  Tensor alias = t.detach();
  set_history(alias, node_.shared_from_this(), static_cast<uint32_t>(s.output_nr()));
  return alias;
}

bool BackwardContext::needs(size_t input) const {
  return input < node_.next_edges.size() && node_.next_edges[input].fn != nullptr;
}

std::vector<Tensor> FunctionNode::apply(std::vector<Tensor>&& grad_outputs) {
  BackwardContext ctx(*this, grad_outputs);
  std::vector<Tensor> grads = fn_(ctx);
  MT_ASSERT(grads.size() == next_edges.size(), name_, " returned ", grads.size(), " gradients for ",
            next_edges.size(), " inputs");
  return grads;
}

void FunctionNode::release_saved() {
  saved.for_each([](SavedTensor& s) { s.release(); });
}

namespace {
template <typename Range>
bool any_requires_grad(const Range& inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor* t : inputs)
    if (t != nullptr && t->defined() && t->requires_grad()) return true;
  return false;
}
}  // namespace

bool needs_grad(std::initializer_list<const Tensor*> inputs) { return any_requires_grad(inputs); }
bool needs_grad(const std::vector<const Tensor*>& inputs) { return any_requires_grad(inputs); }

void check_inplace(const char* op, const Tensor& self,
                   std::initializer_list<const Tensor*> others) {
  MT_CHECK(!has_internal_overlap(self), op,
           ": unsupported operation: more than one element of the written-to tensor (shape ",
           self.shape(), ", strides ", self.strides(),
           ") refers to a single memory location; clone() the tensor before the in-place op");
  if (!GradMode::is_enabled()) return;
  const bool self_requires_grad = self.requires_grad();  // brings a view's history up to date
  const TensorImpl& impl = *self.unsafe_impl();
  if (impl.view_base != nullptr) {
    const Tensor base(impl.view_base);
    MT_CHECK(!(impl.view_differentiable && base.requires_grad() && base.is_leaf()), op,
             ": a view of a leaf tensor that requires grad is being used in an in-place operation "
             "(view shape ",
             self.shape(), ", leaf shape ", base.shape(), "); wrap it in NoGradGuard");
    bool recorded = self_requires_grad || base.requires_grad();
    for (const Tensor* t : others) recorded = recorded || (t->defined() && t->requires_grad());
    MT_CHECK(impl.view_differentiable || !recorded, op,
             ": a view made with grad mode off, of a tensor that requires grad (or written with "
             "one), is being modified in place with grad mode on "
             "(view shape ",
             self.shape(),
             "); make the view and the in-place op both inside NoGradGuard (not recorded) or "
             "both outside it (recorded)");
  }
  if (self_requires_grad && self.is_leaf()) {
    MT_THROW(op,
             ": a leaf tensor that requires grad is being used in an in-place operation "
             "(shape ",
             self.shape(), "); wrap parameter updates in NoGradGuard");
  }
}

Recorder::Recorder(const char* name, std::initializer_list<const Tensor*> inputs) {
  init(name, inputs);
}
Recorder::Recorder(const char* name, const std::vector<const Tensor*>& inputs) {
  init(name, inputs);
}

template <typename Range>
void Recorder::init(const char* name, const Range& inputs) {
  if (!any_requires_grad(inputs)) return;
  node_ = ::mantissa::detail::make_pooled<FunctionNode>(name, nullptr);
  node_->next_edges.reserve(inputs.size());
  for (const Tensor* t : inputs)
    node_->next_edges.push_back(t != nullptr && t->defined() ? gradient_edge(*t) : Edge{});
}

Recorder& Recorder::save(const Tensor& t) {
  const PackHook* hook = current_pack_hook();
  std::shared_ptr<PackedSaved> packed = hook != nullptr && t.defined() ? (*hook)(t) : nullptr;
  if (packed != nullptr) {
    node_->saved.emplace_back(std::move(packed));
  } else {
    node_->saved.emplace_back(t);
  }
  return *this;
}

namespace {
void attach(const std::shared_ptr<FunctionNode>& node, const Tensor& out, uint32_t i) {
  node->outputs.push_back({out.shape(), out.dtype(), out.device()});
  node->saved.for_each([&](SavedTensor& s) { s.detach_if_output(out, i); });
  if (!is_floating(out.dtype())) return;  // integer outputs (indices) carry no gradient
  set_history(out, node, i);
}
}  // namespace

// The one-output form skips building a vector: nearly every op records through it.
void Recorder::finish(const Tensor& out, BackwardFn fn, DoubleBackward twice) {
  node_->fn_ = std::move(fn);
  node_->double_backward_ = twice == DoubleBackward::Supported;
  node_->num_outputs = 1;
  attach(node_, out, 0);
}

void Recorder::finish_inplace(const Tensor& self, BackwardFn fn) {
  node_->fn_ = std::move(fn);
  node_->num_outputs = 1;
  if (self.unsafe_impl()->view_base == nullptr) {
    attach(node_, self, 0);
    return;
  }
  node_->outputs.push_back({self.shape(), self.dtype(), self.device()});
  node_->saved.for_each([&](SavedTensor& s) { s.detach_if_output(self, 0); });
  rebase_view_history(self, std::move(node_));
}

void Recorder::finish(const std::vector<Tensor>& outs, BackwardFn fn, DoubleBackward twice) {
  node_->fn_ = std::move(fn);
  node_->double_backward_ = twice == DoubleBackward::Supported;
  node_->num_outputs = static_cast<uint32_t>(outs.size());
  for (uint32_t i = 0; i < outs.size(); ++i) attach(node_, outs[i], i);
}

}  // namespace mantissa::autograd
