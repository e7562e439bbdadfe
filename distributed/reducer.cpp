#include "distributed/reducer.h"

#include <algorithm>
#include <limits>
#include <map>
#include <sstream>
#include <tuple>

#include "autograd/backward.h"
#include "autograd/node.h"
#include "cuda/stream.h"
#include "engine/error.h"
#include "engine/factory.h"

namespace mantissa::nn::detail {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

}  // namespace

void check_parameter_devices(const std::string& backend,
                             const std::vector<std::pair<std::string, Device>>& params) {
  if (params.empty()) return;
  const auto& [first_name, first] = params.front();
  for (const auto& [name, device] : params) {
    MT_CHECK(device == first, "DistributedDataParallel: parameter '", first_name, "' is on ", first,
             " but '", name, "' is on ", device,
             "; each process drives one device: put the whole module on it");
  }
  if (backend == "gloo") {
    MT_CHECK(!first.is_cuda(),
             "DistributedDataParallel: the gloo backend reduces CPU tensors, but ",
             "the parameters ('", first_name, "', ...) are on ", first,
             "; use the nccl backend for a module on a GPU");
  } else if (backend == "nccl") {
    MT_CHECK(first.is_cuda(),
             "DistributedDataParallel: the nccl backend reduces CUDA tensors, but ",
             "the parameters ('", first_name, "', ...) are on ", first,
             "; move the module to this rank's GPU or use the gloo backend");
  }
}

Reducer::Reducer(std::vector<std::pair<std::string, Tensor>> params,
                 std::shared_ptr<distributed::ProcessGroup> pg,
                 const DistributedDataParallelOptions& o)
    : pg_(std::move(pg)), options_(o) {
  MT_CHECK(o.bucket_cap_mb > 0 && o.first_bucket_mb > 0,
           "DistributedDataParallel: bucket_cap_mb and first_bucket_mb must be positive, got ",
           o.bucket_cap_mb, " and ", o.first_bucket_mb);
  for (auto& p : params)
    if (p.second.requires_grad()) params_.push_back(std::move(p));
  MT_CHECK(!params_.empty(),
           "DistributedDataParallel: the module has no parameter that requires grad");
  on_cuda_ = params_.front().second.is_cuda();
  scatter_ = o.reduce_scatter_gradients;
  ready_.assign(params_.size(), 0);
  got_grad_.assign(params_.size(), 0);
  used_.assign(params_.size(), 0);
  // Reverse registration order: gradients of the last layers are ready first. As PyTorch, the
  // first iteration uses one bucket (per dtype) when the buckets will be rebuilt from the
  // observed order: registration order may not be the order of backward, and a rank that leaves
  // a parameter unused could otherwise issue a bucket's allreduce early.
  std::vector<size_t> order(params_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = order.size() - 1 - i;
  // Sharded gradients keep their first buckets: they decide which rank owns which elements.
  build_buckets(order, !scatter_ && (options_.static_graph || !options_.find_unused_parameters));
}

Reducer::~Reducer() {
  for (size_t i = 0; i < hook_handles_.size(); ++i)
    params_[i].second.remove_post_accumulate_grad_hook(hook_handles_[i]);
}

void Reducer::install_hooks() {
  std::weak_ptr<Reducer> self = weak_from_this();
  for (size_t i = 0; i < params_.size(); ++i) {
    hook_handles_.push_back(
        params_[i].second.register_post_accumulate_grad_hook([self, i](const Tensor&) {
          if (auto r = self.lock()) r->on_grad_ready(i);
        }));
  }
}

std::vector<std::vector<size_t>> assign_buckets(const std::vector<Tensor>& params,
                                                const std::vector<size_t>& order, double first_mb,
                                                double cap_mb, bool unlimited) {
  struct Open {
    std::vector<size_t> params;
    int64_t bytes = 0;
    bool first = true;
  };
  std::map<std::pair<int, std::string>, Open> open;
  std::vector<std::vector<size_t>> done;
  for (size_t i : order) {
    const Tensor& t = params[i];
    std::ostringstream dev;
    dev << t.device();
    Open& b = open[{static_cast<int>(t.dtype()), dev.str()}];
    b.params.push_back(i);
    b.bytes += t.nbytes();
    const double limit =
        unlimited ? std::numeric_limits<double>::infinity() : (b.first ? first_mb : cap_mb) * kMiB;
    if (static_cast<double>(b.bytes) >= limit) {
      done.push_back(std::move(b.params));
      b = Open{};
      b.first = false;
    }
  }
  for (auto& [key, b] : open)
    if (!b.params.empty()) done.push_back(std::move(b.params));
  std::vector<size_t> position(params.size());
  for (size_t k = 0; k < order.size(); ++k) position[order[k]] = k;
  std::stable_sort(done.begin(), done.end(), [&](const auto& a, const auto& b) {
    return position[a.front()] < position[b.front()];
  });
  return done;
}

void Reducer::build_buckets(const std::vector<size_t>& order, bool unlimited) {
  std::vector<Tensor> tensors;
  for (const auto& p : params_) tensors.push_back(p.second);
  std::vector<std::vector<size_t>> done =
      assign_buckets(tensors, order, options_.first_bucket_mb, options_.bucket_cap_mb, unlimited);
  buckets_.clear();
  bucket_of_.assign(params_.size(), 0);
  for (auto& ps : done) {
    Bucket b;
    int64_t n = 0;
    for (size_t i : ps) {
      b.offset.push_back(n);
      n += params_[i].second.numel();
      bucket_of_[i] = buckets_.size();
    }
    const Tensor& first = params_[ps.front()].second;
    const TensorOptions o = TensorOptions(first.dtype()).device(first.device());
    if (scatter_) {
      const int64_t w = pg_->size();
      b.padded = (n + w - 1) / w * w;
      b.shard = zeros({b.padded / w}, o);
    } else {
      b.flat = empty({n}, o);
    }
    b.params = std::move(ps);
    buckets_.push_back(std::move(b));
  }
}

std::string Reducer::unready_names() const {
  std::ostringstream s;
  bool any = false;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (ready_[i]) continue;
    s << (any ? ", " : "") << params_[i].first;
    any = true;
  }
  return s.str();
}

// The previous iteration must have finished: its backward reached the end (else a hook or a
// node threw, and collectives may still be writing the buckets), every bucket was reduced, and
// no collective of an earlier iteration failed.
void Reducer::check_previous_iteration() {
  if (armed_ && started_) {
    std::string failures;
    for (Bucket& b : buckets_) {
      if (!b.launched) continue;
      try {
        b.work->wait();  // the collective must not write a bucket the next iteration fills
      } catch (const std::exception& e) {
        failures += std::string("; its allreduce failed: ") + e.what();
      }
      b.work.reset();
      b.launched = false;
    }
    armed_ = false;
    started_ = false;
    std::fill(used_.begin(), used_.end(), 0);
    MT_THROW(
        "DistributedDataParallel: expected to have finished reduction in the prior iteration "
        "before starting a new one. Rank ",
        pg_->rank(),
        "'s previous backward started but never finished (an exception escaped it), so its "
        "gradients were not reduced and the ranks' collectives may no longer pair up; this "
        "process group should not be used for further training",
        failures);
  }
  if (!unfinished_.empty()) {
    const std::string why = std::move(unfinished_);
    unfinished_.clear();
    MT_THROW(why);
  }
  poll_in_flight();
}

// NCCL's allreduces run on the stream while the host goes on; the host looks at each once per
// forward (an event query and the communicator's error state, no synchronisation) and forgets
// it once done. One that failed, or has been queued longer than the group's timeout, throws
// here (and aborts the communicator), so a dead or stuck peer is reported within the timeout of
// the iteration that waits on it. Inside a CUDA graph capture nothing is queried.
void Reducer::poll_in_flight() {
  if (in_flight_.empty() || cuda::is_current_stream_capturing()) return;
  std::vector<std::shared_ptr<distributed::Work>> still;
  try {
    for (auto& work : in_flight_)
      if (!work->poll()) still.push_back(std::move(work));
  } catch (const std::exception& e) {
    in_flight_.clear();
    MT_THROW(
        "DistributedDataParallel: a gradient allreduce of an earlier iteration failed on rank ",
        pg_->rank(), ": ", e.what());
  }
  in_flight_ = std::move(still);
}

void Reducer::prepare_forward(bool sync) {
  // A forward without grad builds no graph, so no backward follows it: the iteration in
  // progress, if any, is left alone (its backward still reduces), as in PyTorch.
  if (!autograd::GradMode::is_enabled()) return;
  check_previous_iteration();
  // The previous iteration's collectives: on the CPU the end of backward waited for them; on
  // CUDA the host never did, so they are checked at later forwards.
  for (Bucket& b : buckets_) {
    if (b.work && on_cuda_ && !b.captured) in_flight_.push_back(b.work);
    b.work.reset();
    b.launched = false;
  }
  // Once, after the first iteration, from the order its gradients became ready. Rank 0's order
  // is used everywhere, so that every rank reduces the same buckets in the same order.
  // find_unused_parameters without static_graph keeps the initial buckets, as PyTorch does.
  const bool may_rebuild = !scatter_ && (options_.static_graph || !options_.find_unused_parameters);
  if (may_rebuild && have_order_ && !rebuilt_) {
    Tensor order = empty({static_cast<int64_t>(params_.size())}, kFloat64);
    double* o = static_cast<double*>(order.data_ptr());
    for (size_t k = 0; k < ready_order_.size(); ++k) o[k] = static_cast<double>(ready_order_[k]);
    if (on_cuda_) {
      Tensor dev = order.to(params_.front().second.device());
      pg_->broadcast(dev, 0)->wait();
      order = dev.to(Device::cpu());
    } else {
      pg_->broadcast(order, 0)->wait();
    }
    o = static_cast<double*>(order.data_ptr());
    std::vector<size_t> rebuilt(params_.size());
    for (size_t k = 0; k < rebuilt.size(); ++k) rebuilt[k] = static_cast<size_t>(o[k]);
    build_buckets(rebuilt, false);
    rebuilt_ = true;
  }
  armed_ = sync;
  started_ = false;
  if (armed_) {
    std::fill(ready_.begin(), ready_.end(), 0);
    std::fill(got_grad_.begin(), got_grad_.end(), 0);
    for (Bucket& b : buckets_) b.pending = b.params.size();
    next_bucket_ = 0;
    if (iterations_ == 0) ready_order_.clear();  // an aborted first iteration's, if any
  }
}

void Reducer::on_grad_ready(size_t index) {
  // Recorded before the armed check: a parameter used only in no_sync() micro-batches has an
  // accumulated gradient that the next synced backward must average (PyTorch's local_used_map_).
  used_[index] = 1;
  if (!armed_) return;  // under no_sync, or a backward not preceded by a forward through DDP
  if (!started_) {
    started_ = true;
    std::weak_ptr<Reducer> self = weak_from_this();
    autograd::queue_callback([self] {
      if (auto r = self.lock()) r->finalize();
    });
    if (!static_unused_.empty()) {
      // static_graph: what this rank left unused in the first iteration is unused now; its
      // buckets need not wait for the end of backward.
      for (size_t i = 0; i < params_.size(); ++i)
        if (static_unused_[i] && !ready_[i]) mark_ready(i, false);
    }
  }
  MT_CHECK(!ready_[index], "DistributedDataParallel: parameter '", params_[index].first,
           "' got a gradient twice in one iteration. Each forward through DistributedDataParallel "
           "allows one backward (a second backward through the same graph, or a parameter "
           "used by a reentrant backward, is not supported); run the extra forward/backward "
           "under no_sync() or through another forward");
  mark_ready(index, true);
}

void Reducer::mark_ready(size_t index, bool got_grad) {
  ready_[index] = 1;
  if (got_grad) {
    got_grad_[index] = 1;
    if (iterations_ == 0) ready_order_.push_back(index);
  }
  Bucket& b = buckets_[bucket_of_[index]];
  --b.pending;
  if (b.pending == 0) launch_ready_buckets();
}

// In bucket order only: every rank must issue the same allreduces in the same order, whatever
// order its gradients arrive in.
void Reducer::launch_ready_buckets() {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0)
    launch(buckets_[next_bucket_++]);
}

void Reducer::launch(Bucket& b) {
  autograd::NoGradGuard no_grad;
  if (scatter_) {
    b.flat = zeros({b.padded}, TensorOptions(b.shard.dtype()).device(b.shard.device()));
  }
  for (size_t k = 0; k < b.params.size(); ++k) {
    const Tensor& p = params_[b.params[k]].second;
    Tensor view = b.flat.narrow(0, b.offset[k], p.numel());
    const Tensor g = p.grad();
    if (g.defined()) {
      view.copy_(g.reshape({p.numel()}));
      // The bucket holds it now; this rank keeps only its slice of the reduced sum.
      if (scatter_) p.set_grad(Tensor());
    } else if (!scatter_) {
      view.zero_();
    }
  }
  // PyTorch's default reduction: divide by the world size, then sum over ranks. Dividing by one
  // changes no bit, so a single rank skips the pass.
  if (pg_->size() > 1) b.flat.div_(static_cast<double>(pg_->size()));
  if (scatter_) {
    b.work = pg_->reduce_scatter(b.shard, b.flat, distributed::ReduceOp::Sum);
    b.flat = Tensor();  // the Work keeps it until the collective is done
  } else {
    b.work = pg_->allreduce(b.flat, distributed::ReduceOp::Sum);
  }
  b.launched = true;
  b.captured = on_cuda_ && cuda::is_current_stream_capturing();
}

// Which parameters some rank used since the last synced backward: every rank takes part, whether
// or not it left a parameter unused itself, so that the collectives pair up.
std::vector<char> Reducer::used_on_any_rank() {
  Tensor flags = empty({static_cast<int64_t>(params_.size())}, kFloat32);
  float* f = static_cast<float*>(flags.data_ptr());
  for (size_t i = 0; i < params_.size(); ++i) f[i] = used_[i] ? 1.0f : 0.0f;
  if (on_cuda_) {
    Tensor dev = flags.to(params_.front().second.device());
    pg_->allreduce(dev, distributed::ReduceOp::Max)->wait();
    flags = dev.to(Device::cpu());
  } else {
    pg_->allreduce(flags, distributed::ReduceOp::Max)->wait();
  }
  f = static_cast<float*>(flags.data_ptr());
  std::vector<char> out(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) out[i] = f[i] != 0.0f;
  return out;
}

void Reducer::finalize() {
  if (!armed_) return;
  armed_ = false;
  started_ = false;
  const bool first = iterations_ == 0;
  ++iterations_;
  // static_graph's first iteration finds the unused parameters as find_unused_parameters does.
  const bool static_first = options_.static_graph && first;
  const bool mark_unused = options_.find_unused_parameters || static_first;
  if (mark_unused) {
    for (size_t i = 0; i < params_.size(); ++i)
      if (!ready_[i]) mark_ready(i, false);
  }
  if (static_first) {
    static_unused_.assign(params_.size(), 0);
    for (size_t i = 0; i < params_.size(); ++i) static_unused_[i] = got_grad_[i] ? 0 : 1;
  }
  if (first) {
    // The rebuilt order: gradients as they became ready, then the parameters that got none.
    for (size_t i = params_.size(); i-- > 0;)
      if (!got_grad_[i]) ready_order_.push_back(i);
    have_order_ = ready_order_.size() == params_.size();
  }
  const bool complete = next_bucket_ == buckets_.size();
  // The host waits on CPU (Gloo) only; NCCL's collectives are ordered on the current stream
  // before everything queued after them, so the CUDA path never blocks the host.
  if (!on_cuda_) {
    for (Bucket& b : buckets_)
      if (b.launched) b.work->wait();
  }
  if (!complete) {
    std::fill(used_.begin(), used_.end(), 0);
    std::ostringstream s;
    s << "DistributedDataParallel: expected to have finished reduction in the prior iteration "
         "before starting a new one. Rank "
      << pg_->rank()
      << " has parameters that received no gradient in the previous iteration: " << unready_names()
      << ". Pass find_unused_parameters = true if the forward does not use every parameter "
         "(or make every parameter part of the loss); the gradients of that iteration were "
         "not reduced";
    unfinished_ = s.str();
    return;
  }
  if (scatter_) {
    // Each rank's slices are its result; nothing goes back into .grad. On the CPU the buckets'
    // Works (and the full-size buckets they hold) are released now.
    std::fill(used_.begin(), used_.end(), 0);
    if (!on_cuda_)
      for (Bucket& b : buckets_) b.work.reset();
    return;
  }
  // A parameter no rank used keeps no gradient (as in PyTorch); one that only other ranks used
  // gets the average. static_graph keeps the first iteration's rank-combined flags, so that
  // every rank copies back the same parameters without a collective per iteration.
  std::vector<char> used_anywhere(params_.size(), 1);
  if (options_.static_graph && !first) {
    used_anywhere = static_used_anywhere_;
  } else if (mark_unused) {
    used_anywhere = used_on_any_rank();
  }
  if (static_first) static_used_anywhere_ = used_anywhere;
  std::fill(used_.begin(), used_.end(), 0);
  autograd::NoGradGuard no_grad;
  for (Bucket& b : buckets_) {
    for (size_t k = 0; k < b.params.size(); ++k) {
      const size_t i = b.params[k];
      if (!used_anywhere[i]) continue;
      const Tensor& p = params_[i].second;
      const Tensor view = b.flat.narrow(0, b.offset[k], p.numel()).view(p.shape());
      Tensor g = p.grad();
      if (g.defined()) {
        g.copy_(view);
      } else {
        p.set_grad(view.clone());
      }
    }
  }
}

std::vector<GradientBucket> Reducer::gradient_buckets() const {
  std::vector<GradientBucket> out;
  if (!scatter_) return out;
  for (const Bucket& b : buckets_) out.push_back({b.params, b.offset, b.padded, b.shard});
  return out;
}

std::vector<std::vector<std::string>> Reducer::bucket_parameter_names() const {
  std::vector<std::vector<std::string>> out;
  for (const Bucket& b : buckets_) {
    out.emplace_back();
    for (size_t i : b.params) out.back().push_back(params_[i].first);
  }
  return out;
}

}  // namespace mantissa::nn::detail
