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
//
// Double backward: a formula that, when ctx.create_graph(), computes with the differentiable ops
// only (mul, mm, sum, expand, where, ...) declares it by finishing with DoubleBackward::Supported;
// it may keep a faster kernel call for the ordinary pass. A backward with create_graph that
// reaches a node without it throws.
#pragma once

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "autograd/node.h"
#include "engine/inline_vector.h"

namespace mantissa::autograd {

class FunctionNode;

// Whether a formula is correct, and recorded, when run under create_graph.
enum class DoubleBackward : bool { Unsupported, Supported };

// Inside a backward formula: true when the pass records (create_graph). The engine runs formulas
// with grad mode on exactly then.
inline bool creating_graph() { return GradMode::is_enabled(); }

class BackwardContext {
 public:
  BackwardContext(FunctionNode& node, std::vector<Tensor>& grads) : node_(node), grads_(grads) {}
  // Gradient w.r.t. forward output i (zeros if that output received none).
  Tensor grad(size_t i = 0) const;
  // Saved tensor i. Under create_graph a saved output of this node comes back with the node as
  // its history, so that a formula reading it is differentiated through the forward again.
  Tensor saved(size_t i) const;
  bool needs(size_t input) const;
  bool create_graph() const { return creating_graph(); }

 private:
  FunctionNode& node_;
  std::vector<Tensor>& grads_;
};

// A backward formula: a move-only callable that keeps captures of up to kInline bytes inside
// itself. Formulas capture shapes, flags and dtypes, a few hundred bytes, which std::function
// would put in a heap block for every recorded op.
class BackwardFn {
 public:
  BackwardFn() = default;
  BackwardFn(std::nullptr_t) {}  // NOLINT: no formula yet
  template <typename F,
            typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, BackwardFn> &&
                                        !std::is_same_v<std::decay_t<F>, std::nullptr_t>>>
  BackwardFn(F&& f) {  // NOLINT: implicit from a lambda, like std::function
    using Fn = std::decay_t<F>;
    if constexpr (sizeof(Fn) <= kInline && alignof(Fn) <= alignof(std::max_align_t) &&
                  std::is_nothrow_move_constructible_v<Fn>) {
      new (storage_) Fn(std::forward<F>(f));
      ops_ = &kInlineOps<Fn>;
    } else {
      *reinterpret_cast<Fn**>(storage_) = new Fn(std::forward<F>(f));
      ops_ = &kHeapOps<Fn>;
    }
  }
  BackwardFn(BackwardFn&& o) noexcept { take(o); }
  BackwardFn& operator=(BackwardFn&& o) noexcept {
    if (this != &o) {
      reset();
      take(o);
    }
    return *this;
  }
  BackwardFn(const BackwardFn&) = delete;
  BackwardFn& operator=(const BackwardFn&) = delete;
  ~BackwardFn() { reset(); }

  explicit operator bool() const { return ops_ != nullptr; }
  std::vector<Tensor> operator()(BackwardContext& ctx) { return ops_->call(storage_, ctx); }

 private:
  static constexpr size_t kInline = 256;
  struct Ops {
    std::vector<Tensor> (*call)(void* storage, BackwardContext& ctx);
    void (*move)(void* dst, void* src);  // into dst's raw storage; src is then destroyed
    void (*destroy)(void* storage);
  };
  template <typename Fn>
  static constexpr Ops kInlineOps{
      [](void* s, BackwardContext& ctx) { return (*static_cast<Fn*>(s))(ctx); },
      [](void* d, void* s) {
        new (d) Fn(std::move(*static_cast<Fn*>(s)));
        static_cast<Fn*>(s)->~Fn();
      },
      [](void* s) { static_cast<Fn*>(s)->~Fn(); }};
  template <typename Fn>
  static constexpr Ops kHeapOps{
      [](void* s, BackwardContext& ctx) { return (**static_cast<Fn**>(s))(ctx); },
      [](void* d, void* s) { *static_cast<Fn**>(d) = *static_cast<Fn**>(s); },
      [](void* s) { delete *static_cast<Fn**>(s); }};

  void take(BackwardFn& o) noexcept {
    if (o.ops_ == nullptr) return;
    o.ops_->move(storage_, o.storage_);
    ops_ = std::exchange(o.ops_, nullptr);
  }
  void reset() noexcept {
    if (ops_ != nullptr) ops_->destroy(storage_);
    ops_ = nullptr;
  }

  alignas(std::max_align_t) unsigned char storage_[kInline];
  const Ops* ops_ = nullptr;
};

class FunctionNode final : public Node {
 public:
  FunctionNode(const char* name, BackwardFn fn) : name_(name), fn_(std::move(fn)) {}
  std::string name() const override { return name_; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) override;
  void release_saved() override;
  bool supports_create_graph() const override { return double_backward_; }
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
  bool double_backward_ = false;
  ::mantissa::detail::InlineVector<SavedTensor, 6> saved;
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
  // Attaches the node to the op's outputs.
  void finish(const Tensor& out, BackwardFn fn, DoubleBackward twice = DoubleBackward::Unsupported);
  void finish(const std::vector<Tensor>& outs, BackwardFn fn,
              DoubleBackward twice = DoubleBackward::Unsupported);
  // For an in-place op, after it has written `self` and bumped its version: the node becomes
  // self's history, and when self is a view, its base's too (autograd/view_history.h).
  void finish_inplace(const Tensor& self, BackwardFn fn);

 private:
  template <typename Range>
  void init(const char* name, const Range& inputs);
  std::shared_ptr<FunctionNode> node_;
};

// True when an op on these inputs must be recorded.
bool needs_grad(std::initializer_list<const Tensor*> inputs);
bool needs_grad(const std::vector<const Tensor*>& inputs);
// Refuses, as PyTorch does and before anything is written: an in-place op on a tensor whose
// elements overlap (an expanded tensor); and in grad mode, one on a leaf that requires grad or a
// view of one, or one that must be recorded on a view made with grad mode off. `others` are the
// op's other inputs.
void check_inplace(const char* op, const Tensor& self,
                   std::initializer_list<const Tensor*> others = {});

}  // namespace mantissa::autograd
