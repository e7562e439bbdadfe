// ZeRO (Rajbhandari et al., 2020) over a data-parallel process group: each rank keeps the
// optimizer state (and float32 master weights) of 1/N of the parameters' elements and steps only
// those; the updated parameters are then all-gathered. Stage 1 shards the optimizer state; stage 2
// also the gradients, which DistributedDataParallel then reduce-scatters instead of allreducing
// (its reduce_scatter_gradients option). As torch.distributed.optim.ZeroRedundancyOptimizer, but
// sharded by element rather than by whole parameter, so every rank holds the same share.
//
//   auto pg = mt::distributed::init_process_group();
//   mt::nn::DistributedDataParallel ddp(net, pg, {.reduce_scatter_gradients = true});  // stage 2
//   mt::distributed::ZeroRedundancyOptimizer zero(
//       ddp, {mt::optim::ParamGroup(net->parameters())},
//       [](std::vector<mt::optim::ParamGroup> g) { return std::make_shared<mt::optim::AdamW>(g); },
//       2);
//   for (...) {
//     zero.zero_grad();
//     ddp(x) ... loss.backward();          // gradients reduced (stage 2: scattered) over ranks
//     zero.prepare_gradients();            // this rank's slice of them, for its optimizer
//     zero.clip_grad_norm_(1.0);           // optional: the norm of the whole gradient
//     scaler.step(zero.optimizer());       // with scaler.set_found_inf_hook(zero.found_inf_hook())
//     scaler.update();
//     zero.gather_parameters();            // every rank gets every updated parameter
//   }
//
// The layout: the buckets of DistributedDataParallel (stage 2: its own, fixed ones; stage 1 the
// same sizes, in reverse registration order), each padded to a multiple of the world size N and
// cut into N equal slices; rank r owns slice r of every bucket. Within a slice, the part of each
// parameter is a "shard" tensor, a 1-D view of the parameter's own storage, and the optimizer()
// is the user's optimizer type built (by the factory) over the shards, group by group. Its steps
// write the parameters' owned elements in place; gather_parameters() spreads them.
//
// Whole parameters: a group whose update reads each parameter at once (Muon's orthogonalisation:
// Optimizer::updates_whole_parameters) is not cut into element shards. Each of its parameters is
// given whole to one rank, largest first to the rank with the fewest such elements so far, so
// the ranks' shares are balanced by size; the owner keeps its state and steps it whole, and
// gather_parameters() all-gathers these parameters from their owners. Stage 1 reads the
// parameter's reduced .grad; stage 2 all-gathers the reduced slices of each bucket that holds
// such a parameter (a second transfer of that bucket) so that its owner has the whole gradient.
//
// Elementwise optimizers step each element alone, so the parameters equal those of plain DDP
// whenever the reduced gradients do (docs/distributed.md says when that is bitwise); so does a
// whole parameter, stepped by its owner as DDP steps it on every rank. Stochastic
// rounding draws its bits per shard (deterministic, and bitwise on a resume with the same world
// size, but not the bits of an unsharded run). NAdam is refused: its state has a per-parameter
// scalar that elements cannot be sharded by.
//
// state_dict: consolidated_state_dict() (a collective) returns the state an unsharded optimizer of
// the same type over the whole model would have (the layout of reference()); checkpoints hold it,
// so a run resumes on any world size, and load_consolidated_state_dict() takes this rank's part.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distributed/ddp.h"
#include "distributed/process_group.h"
#include "engine/tensor.h"
#include "nn/optim/optimizer.h"

namespace mantissa::distributed {

class ZeroRedundancyOptimizer {
 public:
  // Builds an optimizer of the user's type over the given groups (options as given; the
  // factory must not add or drop parameters).
  using Factory = std::function<std::shared_ptr<optim::Optimizer>(std::vector<optim::ParamGroup>)>;

  // `groups`: the parameters of ddp's module that require grad, each exactly once, with their
  // groups' options. Stage 1 needs ddp without reduce_scatter_gradients, stage 2 with it.
  // `make` is called for the whole model (reference()) and for this rank's shards (optimizer()).
  ZeroRedundancyOptimizer(nn::DistributedDataParallel& ddp, std::vector<optim::ParamGroup> groups,
                          const Factory& make, int stage);
  ~ZeroRedundancyOptimizer();
  ZeroRedundancyOptimizer(const ZeroRedundancyOptimizer&) = delete;
  ZeroRedundancyOptimizer& operator=(const ZeroRedundancyOptimizer&) = delete;

  int stage() const { return stage_; }
  ProcessGroup& process_group() const { return *pg_; }
  // The optimizer over this rank's shards: step it (directly or through a GradScaler), set its
  // learning rate, drive a scheduler with it. Its master-weight, state-dtype and stochastic-
  // rounding settings are the run's.
  optim::Optimizer& optimizer() const { return *local_; }
  const std::shared_ptr<optim::Optimizer>& optimizer_ptr() const { return local_; }
  // The same optimizer type over the whole model, never stepped (it holds no state): the layout
  // of consolidated_state_dict(), for checkpoints.
  const optim::Optimizer& reference() const { return *reference_; }

  // Clears the gradients of the model's parameters and of the shards.
  void zero_grad(bool set_to_none = true);
  // After the backward that reduced the gradients: points each shard's .grad at its slice of
  // the reduced gradient (stage 1: of the parameter's .grad; stage 2: of ddp's bucket slice).
  void prepare_gradients();
  // clip_grad_norm_ over the whole gradient: the shards' squared norms summed over the ranks
  // (float64), then every shard's gradient scaled by max_norm / (norm + 1e-6) when below 1.
  // Returns the norm (every rank gets the same). A collective.
  double clip_grad_norm_(double max_norm);
  // For GradScaler::set_found_inf_hook: makes found_inf the maximum over the ranks, so that an
  // inf in one rank's shard skips the step everywhere. A collective.
  std::function<void(const Tensor&)> found_inf_hook();
  // After the optimizer's step (taken or skipped): every rank's updated elements to every rank.
  // A collective.
  void gather_parameters();

  // Collectives: every rank calls them at the same point.
  optim::OptimizerState consolidated_state_dict() const;
  // Not a collective: takes this rank's slices of a consolidated state (any world size's).
  void load_consolidated_state_dict(const optim::OptimizerState& state);

  // Elements of the model's parameters this rank owns (its share, padding excluded), and the
  // bytes of gradient it keeps between backward and step: the whole .grad for stage 1, its
  // slices for stage 2.
  int64_t owned_numel() const;
  int64_t gradient_bytes() const;

 private:
  struct Shard {
    size_t param;        // index into params_
    bool whole = false;  // the whole parameter (its tensor has the parameter's shape); not in a
                         // bucket's shards
    int64_t begin = 0;   // element offset in the parameter
    int64_t numel = 0;
    size_t bucket = 0;
    int64_t slice_offset = 0;  // in this rank's slice of the bucket
    Tensor tensor;             // the view of the parameter's storage the local optimizer steps
  };
  struct Bucket {
    std::vector<size_t> params;
    std::vector<int64_t> offsets;
    int64_t padded = 0;
    Tensor slice;                // stage 2: ddp's reduced slice
    std::vector<size_t> shards;  // this rank's shards in the bucket (indices into shards_)
  };
  // Every rank's slice of bucket `b` in `dtype`, gathered into one [padded] tensor on the group's
  // device: this rank's slice holds part(k) of each of its shards k (undefined: zeros). A
  // collective.
  Tensor gather_bucket(size_t b, DType dtype,
                       const std::function<Tensor(size_t shard)>& part) const;

  // Every rank's whole parameters of `ids` (indices into params_, whose owners' parts of one
  // dtype `mine(i)` gives), in one all-gather: each rank packs the ones it owns, in order, into a
  // buffer as long as the largest rank's share. `store(i, flat)` receives each one's elements
  // (a view of the gathered buffer). A collective.
  void gather_whole(const std::vector<size_t>& ids, DType dtype,
                    const std::function<Tensor(size_t i)>& mine,
                    const std::function<void(size_t i, const Tensor& flat)>& store) const;

  std::shared_ptr<ProcessGroup> pg_;
  int stage_;
  std::vector<Tensor> params_;  // the module's parameters that require grad
  std::vector<Bucket> buckets_;
  std::vector<Shard> shards_;      // in the local optimizer's order (group by group)
  std::vector<int64_t> param_id_;  // per params_ entry: its id in the reference optimizer
  std::vector<int> owner_;         // per params_ entry: its owner when whole, else -1
  std::vector<size_t> whole_;      // the whole parameters (indices into params_), in order
  std::shared_ptr<optim::Optimizer> reference_;
  std::shared_ptr<optim::Optimizer> local_;
};

}  // namespace mantissa::distributed
