#include "nn/checkpoint.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "autograd/autocast_wrapper.h"
#include "autograd/kept_kernel_outputs.h"
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
  Frame(CheckpointFn fn, std::vector<Tensor> inputs, std::vector<std::string> save_ops)
      : fn_(std::move(fn)),
        inputs_(std::move(inputs)),
        rng_(get_rng_states()),
        autocast_(autocast_state::current()),
        kept_(std::move(save_ops)) {}

  // The kernel outputs the forward keeps (CheckpointOptions::save_ops).
  autograd::KeptKernelOutputs& kept() { return kept_; }

  // Counts a tensor the forward saved; its number in the order of saving.
  size_t pack() {
    released_.push_back(false);
    return released_.size() - 1;
  }

  Tensor get(size_t i) {
    MT_CHECK(!autograd::GradMode::is_enabled(),
             "checkpoint: backward with create_graph=true through a checkpointed function is not "
             "supported; run it without nn::checkpoint to take higher-order gradients");
    if (i >= saved_.size() || !saved_[i].defined()) recompute();
    return saved_[i];
  }

  // Backward is done with tensor i: it is freed as soon as every node has used its own, and the
  // kept kernel outputs once every node is done.
  void release(size_t i) {
    if (i < saved_.size()) saved_[i] = Tensor();
    if (i < released_.size() && !released_[i]) {
      released_[i] = true;
      if (++released_count_ == released_.size()) kept_.clear();
    }
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
      autograd::KeptKernelOutputsGuard replay(&kept_, /*replaying=*/true);
      kept_.start_replay();
      (void)fn_(in);
      kept_.finish_replay();
    }
    MT_CHECK(saved.size() == released_.size(), "checkpoint: recomputing the function saved ",
             saved.size(), " tensors for backward, but its forward saved ", released_.size(),
             "; a checkpointed function must run the same ops every time");
    saved_ = std::move(saved);
  }

  CheckpointFn fn_;
  std::vector<Tensor> inputs_;
  std::vector<GeneratorState> rng_;
  autocast_state::ThreadState autocast_;
  autograd::KeptKernelOutputs kept_;
  std::vector<Tensor> saved_;   // by number; undefined: not recomputed yet, or released
  std::vector<bool> released_;  // one per tensor the forward saved (packed), by number
  size_t released_count_ = 0;
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

void check_checkpoint_options(const CheckpointOptions& options) {
  const std::vector<std::string>& keepable = autograd::keepable_kernel_ops();
  for (const std::string& op : options.save_ops) {
    if (std::find(keepable.begin(), keepable.end(), op) == keepable.end()) {
      std::string names;
      for (const std::string& k : keepable) names += (names.empty() ? "" : ", ") + k;
      throw Error("checkpoint: save_ops names " + op + ", whose outputs cannot be kept; ops " +
                  "that can: " + names);
    }
  }
}

std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                               const CheckpointOptions& options) {
  MT_CHECK(fn != nullptr, "checkpoint: no function given");
  check_checkpoint_options(options);
  if (!autograd::GradMode::is_enabled()) return fn(inputs);  // nothing is saved anyway
  auto frame = std::make_shared<Frame>(fn, inputs, options.save_ops);
  autograd::SavedTensorHooksGuard hooks([frame](const Tensor&) {
    return std::shared_ptr<autograd::PackedSaved>(std::make_shared<Handle>(frame, frame->pack()));
  });
  autograd::KeptKernelOutputsGuard keep(&frame->kept(), /*replaying=*/false);
  return fn(inputs);
}

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input,
                  const CheckpointOptions& options) {
  MT_CHECK(fn != nullptr, "checkpoint: no function given");
  std::vector<Tensor> out =
      checkpoint([fn](const std::vector<Tensor>& in) { return std::vector<Tensor>{fn(in[0])}; },
                 {input}, options);
  return out[0];
}

}  // namespace mantissa::nn
