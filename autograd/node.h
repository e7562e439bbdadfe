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
#include <vector>

#include "engine/tensor.h"

namespace mantissa::autograd {

class Node;

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
  std::weak_ptr<Node> grad_accumulator;                        // leaves only, created on first use
  std::vector<std::function<void(const Tensor&)>> leaf_hooks;  // leaves: see register_hook
};

// A tensor saved for backward: the values (no history, so no reference cycles) and the version
// counter at save time.
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t);
  // Throws if the graph was freed (second backward) or the tensor was modified in place.
  Tensor unpack(const char* node_name) const;
  void release() {
    data_ = Tensor();
    released_ = true;
  }
  bool defined() const { return data_.defined() || released_; }

 private:
  Tensor data_;
  uint32_t version_ = 0;
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
  // The dtype a gradient for output `output_nr` must have, when the node requires one: the
  // engine converts a gradient of another floating dtype before handing it over (as PyTorch's
  // engine casts a gradient to its input's dtype).
  virtual std::optional<DType> grad_dtype(uint32_t /*output_nr*/) const { return std::nullopt; }

  std::vector<Edge> next_edges;
  uint32_t num_outputs = 1;
  uint64_t sequence_nr;
  // Non-leaf outputs that asked for retain_grad(), by output number.
  std::vector<std::pair<uint32_t, std::weak_ptr<TensorImpl>>> retained;
  // Hooks on the gradient of an output (Tensor::register_hook), by output number. They see the
  // summed gradient before this node's backward runs.
  std::vector<std::pair<uint32_t, std::function<void(const Tensor&)>>> grad_hooks;
};

// The node for a leaf: adds the incoming gradient into leaf.grad.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(Tensor variable);
  std::string name() const override { return "AccumulateGrad"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) override;
  // A leaf's gradient has the leaf's dtype (ops that round a float32 weight to an autocast dtype
  // themselves send their gradient in that dtype).
  std::optional<DType> grad_dtype(uint32_t) const override { return variable.dtype(); }
  Tensor variable;
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

// Reduces a broadcast gradient back to `shape` by summing the expanded dims.
Tensor sum_to(const Tensor& grad, const Shape& shape);

}  // namespace mantissa::autograd
