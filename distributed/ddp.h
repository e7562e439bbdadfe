// nn::DistributedDataParallel: torch.nn.parallel.DistributedDataParallel for mantissa modules.
//
//   auto pg = mt::distributed::init_process_group();
//   auto net = std::make_shared<Net>();
//   mt::nn::DistributedDataParallel ddp(net, pg);     // checks shapes, broadcasts rank 0's state
//   for (...) {
//     opt.zero_grad();
//     Tensor loss = loss_fn(ddp(x), y);               // calls net->forward(x)
//     loss.backward();                                // gradients averaged over ranks on return
//     opt.step();
//   }
//
// Semantics follow PyTorch's (docs/distributed.md lists them and the guarantees):
// - Construction checks the device layout (all parameters on one device: the CPU for Gloo, a
//   GPU for NCCL), then that every rank has the same parameters (names, shapes, dtypes; an
//   error names the parameter and the ranks that differ) and broadcasts rank 0's parameters and
//   buffers to the others.
// - Each forward through this object first broadcasts rank 0's buffers (broadcast_buffers).
// - Gradients are grouped into buckets: in the first iteration one per dtype (as PyTorch), then
//   rebuilt once from the order gradients became ready (rank 0's order, so every rank agrees)
//   with first_bucket_mb for the first and bucket_cap_mb for the others. With
//   find_unused_parameters alone, those sizes in reverse registration order, never rebuilt.
//   A bucket's allreduce starts from an autograd hook the moment its last gradient has been
//   accumulated, while backward goes on; the backward pass returns once every bucket is reduced
//   and its results are back in the parameters' .grad.
// - Gradients are averaged: each is divided by the world size into its bucket, and the buckets
//   are summed over ranks (as PyTorch's default reduction).
// - Under no_sync() a forward/backward only accumulates into .grad locally; the next forward and
//   backward outside it reduce the accumulated sum.
// - An iteration whose backward leaves a parameter without a gradient cannot complete its
//   buckets: without find_unused_parameters the next forward throws, naming the parameters (as
//   PyTorch does), instead of hanging. With it, such parameters count as zero gradients at the
//   end of backward. static_graph: the set of used parameters found in the first iteration is
//   assumed for every later one.
// - A forward with grad mode off leaves the pending iteration alone. A backward that threw is
//   reported by the next forward; on NCCL, that forward also reports failed or timed-out
//   allreduces of earlier iterations.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "distributed/process_group.h"
#include "engine/tensor.h"
#include "nn/module.h"

namespace mantissa::nn {

namespace detail {
class Reducer;
}

struct DistributedDataParallelOptions {
  double bucket_cap_mb = 25;   // MiB per bucket (after the first)
  double first_bucket_mb = 1;  // MiB of the first bucket, so communication starts early
  bool find_unused_parameters = false;
  bool static_graph = false;
  bool broadcast_buffers = true;
  // ZeRO stage 2 (distributed/zero.h): each bucket is reduce-scattered instead of allreduced.
  // Rank r keeps slice r of every reduced bucket (gradient_buckets()) and the parameters' .grad
  // is released as its bucket is sent, so no rank holds the whole averaged gradient. The
  // buckets are fixed at construction (sizes as above, in reverse registration order, each
  // padded to a multiple of the world size) and never rebuilt: they define which rank owns
  // which elements.
  bool reduce_scatter_gradients = false;
};

// A bucket of reduce_scatter_gradients: the parameters it holds, where each starts in it, and
// this rank's slice of the reduced bucket (elements [rank * n, (rank + 1) * n) of padded_numel,
// n = padded_numel / world size), valid after each synced backward.
struct GradientBucket {
  std::vector<size_t> params;  // indices into the parameters that require grad (registration order)
  std::vector<int64_t> offsets;
  int64_t padded_numel = 0;
  Tensor shard;
};

class DistributedDataParallel {
 public:
  using Options = DistributedDataParallelOptions;
  using ForwardFn = std::function<Tensor(const Tensor& input)>;

  // `forward` runs the module on an input (Module::forward is not virtual); without it, only
  // forward(run) can be used.
  DistributedDataParallel(std::shared_ptr<Module> module,
                          std::shared_ptr<distributed::ProcessGroup> process_group,
                          Options options = {}, ForwardFn forward = nullptr);
  // A module type with `Tensor forward(const Tensor&)`, or a ModuleHolder (nn::Linear, ...):
  // operator()(x) calls its forward (and its forward hooks, through the holder).
  template <typename Impl>
  requires std::is_base_of_v<Module, Impl> && requires(Impl& m, const Tensor& x) {
    { m.forward(x) } -> std::convertible_to<Tensor>;
  }
  DistributedDataParallel(std::shared_ptr<Impl> module,
                          std::shared_ptr<distributed::ProcessGroup> process_group,
                          Options options = {})
      : DistributedDataParallel(
            std::shared_ptr<Module>(module), std::move(process_group), options,
            [m = module.get()](const Tensor& x) -> Tensor { return m->forward(x); }) {}
  template <typename Holder>
  requires requires(const Holder& h, const Tensor& x) {
    {h.ptr()};
    { h(x) } -> std::convertible_to<Tensor>;
  }
  DistributedDataParallel(const Holder& module,
                          std::shared_ptr<distributed::ProcessGroup> process_group,
                          Options options = {})
      : DistributedDataParallel(std::shared_ptr<Module>(module.ptr()), std::move(process_group),
                                options, [h = module](const Tensor& x) -> Tensor { return h(x); }) {
  }
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // One iteration's forward: prepares the iteration (buffers, buckets, the previous iteration's
  // check), runs the module's forward on `input` and returns its output; backward from the output
  // then reduces the gradients.
  Tensor operator()(const Tensor& input);
  Tensor forward(const Tensor& input) { return (*this)(input); }
  // The same around any forward computation (several inputs, a loss computed inside, ...): every
  // parameter gradient the following backward produces is reduced.
  Tensor forward(const std::function<Tensor()>& run);
  // A forward function for runner::Trainer (its ForwardFn): each call goes through this object.
  // The object must outlive the function.
  ForwardFn forward_fn();

  // While the guard lives, forwards through this object (and their backward) do not reduce;
  // gradients accumulate locally until the next forward outside it.
  class [[nodiscard]] NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp);
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool prev_;
  };
  NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  Module& module() const { return *module_; }
  const std::shared_ptr<Module>& module_ptr() const { return module_; }
  distributed::ProcessGroup& process_group() const { return *process_group_; }
  const std::shared_ptr<distributed::ProcessGroup>& process_group_ptr() const {
    return process_group_;
  }
  const Options& options() const { return options_; }

  // Introspection: the parameter names of each bucket, in the order buckets are reduced, and
  // whether the buckets have been rebuilt from the observed gradient order yet.
  std::vector<std::vector<std::string>> bucket_parameter_names() const;
  bool buckets_rebuilt() const;
  // With reduce_scatter_gradients: the buckets (empty otherwise).
  std::vector<GradientBucket> gradient_buckets() const;
  // Synced iterations begun so far (forwards outside no_sync()).
  int64_t num_iterations() const;

 private:
  void prepare_forward();

  std::shared_ptr<Module> module_;
  std::shared_ptr<distributed::ProcessGroup> process_group_;
  Options options_;
  ForwardFn forward_;
  Device comm_device_ = Device::cpu();  // where buffers travel: see comm_device in ddp.cpp
  bool require_sync_ = true;
  std::shared_ptr<detail::Reducer> reducer_;
};

}  // namespace mantissa::nn
