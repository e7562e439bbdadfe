// The tape: graph nodes, saved tensors, and the per-tensor autograd state.
//
// Each differentiable op that runs with grad mode on and an input requiring grad creates one
// Node holding what its backward needs (SavedTensor, checked against in-place changes) and
// edges to the nodes of its inputs. Leaves that require grad feed an AccumulateGrad node.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/small_pool.h"
#include "engine/tensor.h"

namespace mantissa::autograd {

class Node;
class PackedSaved;  // autograd/saved_tensor_hooks.h

struct Edge {
  std::shared_ptr<Node> fn;  // null: this input needs no gradient
  uint32_t input_nr = 0;     // which output of `fn` the gradient flows into
};

struct AutogradMeta {
  bool requires_grad = false;
  bool retains_grad = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;  // null for leaves
  uint32_t output_nr = 0;
  // Leaves only, created on first use and kept for the leaf's lifetime (it refers back to the
  // leaf weakly), so that a training step does not build a new one for every parameter.
  std::shared_ptr<Node> grad_accumulator;
  std::vector<std::function<Tensor(const Tensor&)>> leaf_hooks;  // leaves: see register_hook
  // Leaves: register_post_accumulate_grad_hook's hooks, by handle.
  std::vector<std::pair<int, std::function<void(const Tensor&)>>> post_accumulate_hooks;
  int next_post_accumulate_handle = 0;
};

// A tensor saved for backward, and its version counter at save time. Saved as it is, as PyTorch
// saves a node's inputs: its history is older than the node, so it cannot lead back to it. An
// output of the node itself is swapped for a detached alias when the node is attached to it
// (detach_if_output), as is a view of one, which keeps node -> tensor -> grad_fn == node cycles
// out. Which output it was is kept: under create_graph the formula needs the output with its
// history, which BackwardContext::saved gives back on a fresh alias (as PyTorch's SavedVariable
// does for an output), so that no cycle is stored.
class SavedTensor {
 public:
  static constexpr int16_t kNotOutput = -1;
  static constexpr int16_t kViewOfOutput = -2;
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t) : data_(t), version_(t.defined() ? t.version() : 0) {}
  // A tensor a saved-tensor hook packed (autograd/saved_tensor_hooks.h): its handle gives it
  // back, unchecked for in-place changes (as PyTorch's hooks' tensors are).
  explicit SavedTensor(std::shared_ptr<PackedSaved> packed) : packed_(std::move(packed)) {}
  void detach_if_output(const Tensor& output, uint32_t output_nr) {
    if (!data_.defined() || output_nr_ != kNotOutput) return;
    const bool same = data_.is_same(output);
    if (!same && data_.unsafe_impl()->view_base != output.impl_ptr()) return;
    data_ = data_.detach();
    output_nr_ = same ? static_cast<int16_t>(output_nr) : kViewOfOutput;
  }
  // The output number of the node this tensor is, kNotOutput, or kViewOfOutput.
  int16_t output_nr() const { return output_nr_; }
  // Throws if the graph was freed (second backward) or the tensor was modified in place.
  Tensor unpack(const char* node_name) const;
  void release();
  bool defined() const { return data_.defined() || packed_ != nullptr || released_; }
  // The tensor as held, for accounting (autograd/graph_memory.h): undefined when a pack hook
  // holds it instead (packed()) or the graph was freed.
  const Tensor& held() const { return data_; }
  bool packed() const { return packed_ != nullptr; }

 private:
  Tensor data_;
  std::shared_ptr<PackedSaved> packed_;
  uint32_t version_ = 0;
  int16_t output_nr_ = kNotOutput;  // int16: keeps the size of a saved slot unchanged
  bool released_ = false;
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node();
  virtual ~Node() = default;
  // "MulBackward0", "AccumulateGrad", ...
  virtual std::string name() const = 0;
  // Gradients w.r.t. each forward output -> gradients w.r.t. each input (undefined = zero).
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) = 0;
  // Frees saved tensors once backward has used them (unless retain_graph).
  virtual void release_saved() {}
  // Whether apply() records a differentiable graph when grad mode is on, which is how the engine
  // runs it under create_graph. A node that says no makes such a backward throw, naming it,
  // rather than return gradients with a silently missing history.
  virtual bool supports_create_graph() const { return false; }
  // The dtype a gradient for output `output_nr` must have, when the node requires one: the
  // engine converts a gradient of another floating dtype before handing it over (as PyTorch's
  // engine casts a gradient to its input's dtype).
  virtual std::optional<DType> grad_dtype(uint32_t /*output_nr*/) const { return std::nullopt; }

  std::vector<Edge, ::mantissa::detail::PoolAllocator<Edge>> next_edges;
  uint32_t num_outputs = 1;
  uint64_t sequence_nr;
  // Non-leaf outputs that asked for retain_grad(), by output number.
  std::vector<std::pair<uint32_t, std::weak_ptr<TensorImpl>>> retained;
  // Hooks on the gradient of an output (Tensor::register_hook), by output number; a defined
  // result replaces the gradient (apply_grad_hook). They see the
  // summed gradient before this node's backward runs.
  std::vector<std::pair<uint32_t, std::function<Tensor(const Tensor&)>>> grad_hooks;
};

// The node for a leaf: adds the incoming gradient into leaf.grad. The leaf owns it (its
// AutogradMeta) and it refers to the leaf weakly; a gradient arriving after the leaf is gone
// has nowhere to go and is dropped. Ready accumulators run before any other ready node, as in
// PyTorch, so a leaf's .grad is final as soon as its last gradient has arrived.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(const Tensor& variable);
  std::string name() const override { return "AccumulateGrad"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) override;
  // Under create_graph .grad is built out of place, keeping its history (as in PyTorch).
  bool supports_create_graph() const override { return true; }
  // A leaf's gradient has the leaf's dtype, as every input's has in PyTorch's engine.
  std::optional<DType> grad_dtype(uint32_t) const override { return dtype_; }

 private:
  std::weak_ptr<TensorImpl> variable_;
  DType dtype_;
};

// ---- grad mode ---------------------------------------------------------------------------
class GradMode {
 public:
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// Disables recording in its scope (thread-local), like torch.no_grad().
class NoGradGuard {
 public:
  NoGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

class EnableGradGuard {
 public:
  EnableGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(true); }
  ~EnableGradGuard() { GradMode::set_enabled(prev_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

// ---- helpers for ops ----------------------------------------------------------------------
AutogradMeta* meta(const Tensor& t);  // null when t has none
AutogradMeta& ensure_meta(const Tensor& t);
Edge gradient_edge(const Tensor& t);  // where a gradient for t must flow
// Makes output `output_nr` of `fn` t's history (t then requires grad and is no leaf).
void set_history(const Tensor& t, std::shared_ptr<Node> fn, uint32_t output_nr = 0);

// Runs a tensor hook on `grad`, replacing it with the hook's result when that is defined.
void apply_grad_hook(const std::function<Tensor(const Tensor&)>& hook, Tensor& grad);

// Reduces a broadcast gradient back to `shape` by summing the expanded dims.
Tensor sum_to(const Tensor& grad, const Shape& shape);

}  // namespace mantissa::autograd
