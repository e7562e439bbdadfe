// DistributedDataParallel's gradient reduction: buckets of parameters, flat per-bucket buffers,
// autograd hooks that start each bucket's allreduce once its gradients are in, and the end of
// backward that waits for them and copies the averages back into .grad. Internal to ddp.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "distributed/ddp.h"
#include "distributed/process_group.h"
#include "engine/tensor.h"

namespace mantissa::nn::detail {

// Throws unless DDP can reduce parameters on these devices with this backend: Gloo takes CPU
// tensors only, NCCL CUDA tensors only, and every parameter must be on one device (one device
// per process). `params` holds each parameter's name and device.
void check_parameter_devices(const std::string& backend,
                             const std::vector<std::pair<std::string, Device>>& params);

// Groups parameters into buckets as PyTorch's compute_bucket_assignment_by_size: `order` gives
// the parameters (indices into `params`) in the order they fill buckets; one open bucket per
// (dtype, device), closed once it holds at least its limit (first_mb for the first of each,
// cap_mb after; none if `unlimited`). Buckets come back in the order of their first parameter.
std::vector<std::vector<size_t>> assign_buckets(const std::vector<Tensor>& params,
                                                const std::vector<size_t>& order, double first_mb,
                                                double cap_mb, bool unlimited);

class Reducer : public std::enable_shared_from_this<Reducer> {
 public:
  Reducer(std::vector<std::pair<std::string, Tensor>> params,
          std::shared_ptr<distributed::ProcessGroup> pg, const DistributedDataParallelOptions& o);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Registers the parameters' post-accumulate-grad hooks (needs the shared_ptr to exist).
  void install_hooks();
  // Before a forward with grad mode on: reports a previous iteration that did not finish (or
  // whose collectives failed), rebuilds the buckets once and, when `sync`, arms the hooks for
  // the coming backward. A forward with grad mode off changes nothing.
  void prepare_forward(bool sync);

  std::vector<std::vector<std::string>> bucket_parameter_names() const;
  bool rebuilt() const { return rebuilt_; }
  std::vector<GradientBucket> gradient_buckets() const;
  int64_t iterations() const { return iterations_; }

 private:
  struct Bucket {
    std::vector<size_t> params;   // indices into params_
    std::vector<int64_t> offset;  // of each in flat
    Tensor flat;                  // reduce_scatter_gradients: made at launch, dropped once reduced
    Tensor shard;  // reduce_scatter_gradients: this rank's slice of the reduced bucket
    int64_t padded = 0;
    size_t pending = 0;  // gradients not ready yet this iteration
    bool launched = false;
    bool captured = false;  // its allreduce was queued into a CUDA graph being captured
    std::shared_ptr<distributed::Work> work;
  };

  void build_buckets(const std::vector<size_t>& order, bool unlimited);
  void on_grad_ready(size_t index);
  void mark_ready(size_t index, bool got_grad);
  void launch_ready_buckets();
  void launch(Bucket& bucket);
  void finalize();
  std::vector<char> used_on_any_rank();
  void check_previous_iteration();
  void poll_in_flight();
  std::string unready_names() const;

  std::vector<std::pair<std::string, Tensor>> params_;  // those that require grad
  std::vector<int> hook_handles_;
  std::shared_ptr<distributed::ProcessGroup> pg_;
  DistributedDataParallelOptions options_;
  bool on_cuda_ = false;
  bool scatter_ = false;  // options_.reduce_scatter_gradients

  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;
  size_t next_bucket_ = 0;

  // The iteration in progress.
  bool armed_ = false;               // a synced forward ran; its backward reduces
  bool started_ = false;             // its backward began (finalize is queued)
  std::vector<char> ready_;          // per parameter: its gradient is in this iteration
  std::vector<char> got_grad_;       // per parameter: a hook saw its gradient this iteration
  std::vector<char> used_;           // per parameter: it got a gradient since the last synced
                                     // backward finished (no_sync micro-batches included)
  std::vector<size_t> ready_order_;  // the first iteration's, for the rebuild

  bool rebuilt_ = false;
  bool have_order_ = false;
  // static_graph, from the first iteration: the parameters this rank leaves unused (marked
  // ready when backward starts) and those some rank used (whose averages go back into .grad).
  std::vector<char> static_unused_;
  std::vector<char> static_used_anywhere_;
  int64_t iterations_ = 0;
  std::string unfinished_;  // the error the next forward reports

  // NCCL: the collectives of earlier iterations that the host has not seen complete, checked
  // (without blocking) at each forward so that a failed or stuck peer becomes an error.
  std::vector<std::shared_ptr<distributed::Work>> in_flight_;
};

}  // namespace mantissa::nn::detail
