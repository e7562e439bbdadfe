// Recording an op on the tape. Ops write their backward formula as a lambda next to the forward:
//
//   Tensor out = ...forward...;
//   if (autograd::Recorder rec{"MulBackward0", {&a, &b}}) {
//     rec.save(a).save(b);
//     rec.finish(out, [](autograd::BackwardContext& ctx) -> std::vector<Tensor> {
//       return {ctx.needs(0) ? ctx.grad() * ctx.saved(1) : Tensor(),
//               ctx.needs(1) ? ctx.grad() * ctx.saved(0) : Tensor()};
//     });
//   }
//
// The Recorder is a no-op (and allocates nothing) unless grad mode is on and an input requires
// grad. ctx.needs(i) lets a formula skip inputs that need no gradient.
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <vector>

#include "autograd/node.h"
#include "engine/inline_vector.h"

namespace mantissa::autograd {

class FunctionNode;

class BackwardContext {
 public:
  BackwardContext(FunctionNode& node, std::vector<Tensor>& grads) : node_(node), grads_(grads) {}
  // Gradient w.r.t. forward output i (zeros if that output received none).
  Tensor grad(size_t i = 0) const;
  Tensor saved(size_t i) const;
  bool needs(size_t input) const;

 private:
  FunctionNode& node_;
  std::vector<Tensor>& grads_;
};

using BackwardFn = std::function<std::vector<Tensor>(BackwardContext&)>;

class FunctionNode final : public Node {
 public:
  FunctionNode(const char* name, BackwardFn fn) : name_(name), fn_(std::move(fn)) {}
  std::string name() const override { return name_; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) override;
  void release_saved() override;
  // A gradient has its output's dtype.
  std::optional<DType> grad_dtype(uint32_t output_nr) const override {
    if (output_nr < outputs.size()) return outputs[output_nr].dtype;
    return std::nullopt;
  }

  struct OutputInfo {
    Shape shape;
    DType dtype;
    Device device;
  };
  const char* name_;
  BackwardFn fn_;
  ::mantissa::detail::InlineVector<SavedTensor, 4> saved;
  ::mantissa::detail::InlineVector<OutputInfo, 1> outputs;
};

class Recorder {
 public:
  Recorder(const char* name, std::initializer_list<const Tensor*> inputs);
  // For ops with a variable number of inputs (cat, stack).
  Recorder(const char* name, const std::vector<const Tensor*>& inputs);
  explicit operator bool() const { return node_ != nullptr; }
  // Saves a tensor for backward; ctx.saved(i) returns them in save order. Undefined is allowed.
  Recorder& save(const Tensor& t);
  // Attaches the node to the op's outputs (for in-place ops: to `self`).
  void finish(const Tensor& out, BackwardFn fn);
  void finish(const std::vector<Tensor>& outs, BackwardFn fn);

 private:
  template <typename Range>
  void init(const char* name, const Range& inputs);
  std::shared_ptr<FunctionNode> node_;
};

// True when an op on these inputs must be recorded.
bool needs_grad(std::initializer_list<const Tensor*> inputs);
bool needs_grad(const std::vector<const Tensor*>& inputs);
// Refuses in-place ops on leaves that require grad (in grad mode), as PyTorch does.
void check_inplace(const Tensor& self, const char* op);

}  // namespace mantissa::autograd
