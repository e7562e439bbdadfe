#include "nn/checkpoint.h"

#include <memory>
#include <utility>

#include "autograd/autocast_wrapper.h"
#include "autograd/node.h"
#include "autograd/saved_tensor_hooks.h"
#include "engine/error.h"
#include "engine/generator.h"
#include "engine/precision.h"

namespace mantissa::nn {
namespace {

// One checkpointed call: what it needs to run fn again, and the tensors the recomputation saved.
class Frame {
 public:
  Frame(CheckpointFn fn, std::vector<Tensor> inputs)
      : fn_(std::move(fn)),
        inputs_(std::move(inputs)),
        rng_(get_rng_states()),
        autocast_(autocast_state::current()) {}

  // Counts a tensor the forward saved; its number in the order of saving.
  size_t pack() { return packed_++; }

  Tensor get(size_t i) {
    MT_CHECK(!autograd::GradMode::is_enabled(),
             "checkpoint: backward with create_graph=true through a checkpointed function is not "
             "supported; run it without nn::checkpoint to take higher-order gradients");
    if (i >= saved_.size() || !saved_[i].defined()) recompute();
    return saved_[i];
  }

  // Backward is done with tensor i: it is freed as soon as every node has used its own.
  void release(size_t i) {
    if (i < saved_.size()) saved_[i] = Tensor();
  }

 private:
  // The state fn ran under in the forward, put back for its scope (restored on exceptions too).
  class ForwardState {
   public:
    explicit ForwardState(const Frame& f)
        : rng_(get_rng_states()), autocast_(autocast_state::current()) {
      set_rng_states(f.rng_);
      autocast_state::current() = f.autocast_;
    }
    ~ForwardState() {
      // Weight casts cached while the forward's autocast state was in force must not outlive it
      // (a later step's weights would hit them).
      if (autocast_.depth == 0) autograd::clear_autocast_cache();
      autocast_state::current() = autocast_;
      set_rng_states(rng_);
    }
    ForwardState(const ForwardState&) = delete;
    ForwardState& operator=(const ForwardState&) = delete;

   private:
    std::vector<GeneratorState> rng_;
    autocast_state::ThreadState autocast_;
  };

  void recompute() {
    std::vector<Tensor> in;
    in.reserve(inputs_.size());
    for (const Tensor& x : inputs_) {
      // The same inputs, cut from the graph before them: the recomputation records nodes (so
      // that its ops save what they save in the forward) but its graph is thrown away.
      Tensor d = x.defined() ? x.detach() : Tensor();
      if (x.defined() && x.requires_grad()) d.requires_grad_(true);
      in.push_back(std::move(d));
    }
    std::vector<Tensor> saved;
    {
      ForwardState state(*this);
      autograd::EnableGradGuard grad;
      autograd::SavedTensorHooksGuard hooks([&saved](const Tensor& t) {
        saved.push_back(t.detach());
        return std::shared_ptr<autograd::PackedSaved>();
      });
      (void)fn_(in);
    }
    MT_CHECK(saved.size() == packed_, "checkpoint: recomputing the function saved ", saved.size(),
             " tensors for backward, but its forward saved ", packed_,
             "; a checkpointed function must run the same ops every time");
    saved_ = std::move(saved);
  }

  CheckpointFn fn_;
  std::vector<Tensor> inputs_;
  std::vector<GeneratorState> rng_;
  autocast_state::ThreadState autocast_;
  size_t packed_ = 0;
  std::vector<Tensor> saved_;  // by number; undefined: not recomputed yet, or released
};

class Handle final : public autograd::PackedSaved {
 public:
  Handle(std::shared_ptr<Frame> frame, size_t index) : frame_(std::move(frame)), index_(index) {}
  Tensor unpack() override { return frame_->get(index_); }
  void release() override { frame_->release(index_); }

 private:
  std::shared_ptr<Frame> frame_;
  size_t index_;
};

}  // namespace

std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs) {
  MT_CHECK(fn != nullptr, "checkpoint: no function given");
  if (!autograd::GradMode::is_enabled()) return fn(inputs);  // nothing is saved anyway
  auto frame = std::make_shared<Frame>(fn, inputs);
  autograd::SavedTensorHooksGuard hooks([frame](const Tensor&) {
    return std::shared_ptr<autograd::PackedSaved>(std::make_shared<Handle>(frame, frame->pack()));
  });
  return fn(inputs);
}

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input) {
  MT_CHECK(fn != nullptr, "checkpoint: no function given");
  std::vector<Tensor> out = checkpoint(
      [fn](const std::vector<Tensor>& in) { return std::vector<Tensor>{fn(in[0])}; }, {input});
  return out[0];
}

}  // namespace mantissa::nn
