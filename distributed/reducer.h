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

class Reducer : public std::enable_shared_from_this<Reducer> {
 public:
  Reducer(std::vector<std::pair<std::string, Tensor>> params,
          std::shared_ptr<distributed::ProcessGroup> pg, const DistributedDataParallelOptions& o);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Registers the parameters' post-accumulate-grad hooks (needs the shared_ptr to exist).
  void install_hooks();
  // Before a forward: reports an unfinished previous iteration, rebuilds the buckets once, and,
  // when `sync` (and grad mode is on), arms the hooks for the coming backward.
  void prepare_forward(bool sync);

  std::vector<std::vector<std::string>> bucket_parameter_names() const;
  bool rebuilt() const { return rebuilt_; }
  int64_t iterations() const { return iterations_; }

 private:
  struct Bucket {
    std::vector<size_t> params;   // indices into params_
    std::vector<int64_t> offset;  // of each in flat
    Tensor flat;
    size_t pending = 0;  // gradients not ready yet this iteration
    bool launched = false;
    std::shared_ptr<distributed::Work> work;
  };

  void build_buckets(const std::vector<size_t>& order);
  void on_grad_ready(size_t index);
  void mark_ready(size_t index, bool used);
  void launch_ready_buckets();
  void launch(Bucket& bucket);
  void finalize();
  std::string unready_names() const;

  std::vector<std::pair<std::string, Tensor>> params_;  // those that require grad
  std::vector<int> hook_handles_;
  std::shared_ptr<distributed::ProcessGroup> pg_;
  DistributedDataParallelOptions options_;
  bool on_cuda_ = false;

  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;
  size_t next_bucket_ = 0;

  // The iteration in progress.
  bool armed_ = false;  // a synced forward ran; its backward reduces
  bool finalize_queued_ = false;
  std::vector<char> ready_;          // per parameter: its gradient is in this iteration
  std::vector<char> used_;           // per parameter: it got a gradient (not just marked ready)
  std::vector<size_t> ready_order_;  // the first iteration's, for the rebuild

  bool rebuilt_ = false;
  bool have_order_ = false;
  std::vector<char> static_unused_;  // static_graph: the parameters unused in iteration 1
  int64_t iterations_ = 0;
  std::string unfinished_;  // the error the next forward reports
};

}  // namespace mantissa::nn::detail
