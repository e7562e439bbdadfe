#include "distributed/ddp.h"

#include <algorithm>
#include <sstream>

#include "autograd/node.h"
#include "distributed/reducer.h"
#include "engine/error.h"
#include "engine/factory.h"

namespace mantissa::nn {
namespace {

// The collectives take floating tensors on the group's device: CPU for Gloo, the parameters'
// GPU for NCCL.
Device comm_device(const distributed::ProcessGroup& pg, const Module& m) {
  if (pg.backend() != "nccl") return Device::cpu();
  for (const Tensor& p : m.parameters())
    if (p.is_cuda()) return p.device();
  return Device::cpu();
}

std::string describe(const std::vector<double>& row, size_t at) {
  // row[at] = dtype, row[at + 1] = ndim, then the dims
  std::ostringstream s;
  const auto ndim = static_cast<size_t>(row[at + 1]);
  s << "[";
  for (size_t d = 0; d < ndim; ++d) s << (d ? ", " : "") << static_cast<int64_t>(row[at + 2 + d]);
  s << "] (" << static_cast<DType>(static_cast<int>(row[at])) << ")";
  return s.str();
}

// Every rank must hold the same parameters, in the same order, with the same shapes and dtypes
// (PyTorch's _verify_param_shape_across_processes). Each rank contributes a row of
// [count, max ndim] and then one of (dtype, ndim, dims...) per parameter; every rank compares
// every other rank's rows with its own and throws the same error.
void verify_shapes(distributed::ProcessGroup& pg, const Module& m, Device dev) {
  const auto named = m.named_parameters();
  const int w = pg.size();
  size_t max_ndim = 0;
  for (const auto& [name, t] : named)
    max_ndim = std::max(max_ndim, static_cast<size_t>(t.shape().size()));
  auto gather = [&](const std::vector<double>& mine) {
    Tensor in = from_vector(mine).to(dev);
    Tensor out =
        zeros({static_cast<int64_t>(mine.size()) * w}, TensorOptions(kFloat64).device(dev));
    pg.allgather(out, in)->wait();
    return out.to(Device::cpu()).to_vector<double>();
  };
  const std::vector<double> heads = gather({double(named.size()), double(max_ndim)});
  size_t width = 0;
  for (int r = 0; r < w; ++r) {
    MT_CHECK(heads[2 * r] == double(named.size()), "DistributedDataParallel: rank ", pg.rank(),
             " has ", named.size(), " parameters but rank ", r, " has ",
             static_cast<int64_t>(heads[2 * r]), "; every rank must wrap the same model");
    width = std::max(width, static_cast<size_t>(heads[2 * r + 1]) + 2);
  }
  std::vector<double> mine(named.size() * width, 0.0);
  for (size_t i = 0; i < named.size(); ++i) {
    const Tensor& t = named[i].second;
    mine[i * width] = static_cast<double>(static_cast<int>(t.dtype()));
    mine[i * width + 1] = static_cast<double>(t.shape().size());
    for (int64_t d = 0; d < t.shape().size(); ++d) mine[i * width + 2 + d] = double(t.shape()[d]);
  }
  const std::vector<double> all = gather(mine);
  const size_t row = mine.size();
  for (int r = 0; r < w; ++r) {
    for (size_t i = 0; i < named.size(); ++i) {
      bool same = true;
      for (size_t k = 0; k < width; ++k)
        same = same && all[r * row + i * width + k] == mine[i * width + k];
      MT_CHECK(same, "DistributedDataParallel: parameter '", named[i].first, "' has shape ",
               describe(mine, i * width), " on rank ", pg.rank(), " but ",
               describe(all, r * row + i * width), " on rank ", r,
               "; every rank must wrap the same model");
    }
  }
}

// Broadcasts rank 0's tensors in place. Non-floating buffers (counters) travel as float64, which
// holds their values exactly.
void broadcast_from_rank0(distributed::ProcessGroup& pg, const std::vector<Tensor>& tensors,
                          Device dev, bool wait) {
  autograd::NoGradGuard no_grad;
  for (const Tensor& t : tensors) {
    if (t.numel() == 0) continue;
    const bool direct = is_floating(t.dtype()) && t.device() == dev && t.is_contiguous();
    if (direct) {
      auto work = pg.broadcast(t, 0);
      if (wait) work->wait();
      continue;
    }
    Tensor tmp = t.to(dev).to(is_floating(t.dtype()) ? t.dtype() : kFloat64).contiguous();
    pg.broadcast(tmp, 0)->wait();
    Tensor(t).copy_(tmp.to(t.device()).to(t.dtype()));
  }
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(
    std::shared_ptr<Module> module, std::shared_ptr<distributed::ProcessGroup> process_group,
    Options options, ForwardFn forward)
    : module_(std::move(module)),
      process_group_(std::move(process_group)),
      options_(options),
      forward_(std::move(forward)) {
  MT_CHECK(module_ != nullptr, "DistributedDataParallel: no module");
  MT_CHECK(process_group_ != nullptr, "DistributedDataParallel: no process group");
  const Device dev = comm_device(*process_group_, *module_);
  verify_shapes(*process_group_, *module_, dev);
  broadcast_from_rank0(*process_group_, module_->parameters(), dev, true);
  broadcast_from_rank0(*process_group_, module_->buffers(), dev, true);
  reducer_ =
      std::make_shared<detail::Reducer>(module_->named_parameters(), process_group_, options_);
  reducer_->install_hooks();
}

DistributedDataParallel::~DistributedDataParallel() = default;

void DistributedDataParallel::prepare_forward() {
  reducer_->prepare_forward(require_sync_);
  if (options_.broadcast_buffers && process_group_->size() > 1) {
    const std::vector<Tensor> buffers = module_->buffers();
    if (!buffers.empty()) {
      const Device dev = comm_device(*process_group_, *module_);
      // On CUDA the broadcast is ordered on the stream before the forward's kernels.
      broadcast_from_rank0(*process_group_, buffers, dev, !dev.is_cuda());
    }
  }
}

Tensor DistributedDataParallel::operator()(const Tensor& input) {
  MT_CHECK(forward_ != nullptr,
           "DistributedDataParallel: this object was made from a Module without a forward "
           "function; pass one to the constructor or call forward(run)");
  prepare_forward();
  return forward_(input);
}

Tensor DistributedDataParallel::forward(const std::function<Tensor()>& run) {
  prepare_forward();
  return run();
}

DistributedDataParallel::ForwardFn DistributedDataParallel::forward_fn() {
  return [this](const Tensor& x) { return (*this)(x); };
}

DistributedDataParallel::NoSyncGuard::NoSyncGuard(DistributedDataParallel& ddp)
    : ddp_(ddp), prev_(ddp.require_sync_) {
  ddp_.require_sync_ = false;
}

DistributedDataParallel::NoSyncGuard::~NoSyncGuard() { ddp_.require_sync_ = prev_; }

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_parameter_names() const {
  return reducer_->bucket_parameter_names();
}

bool DistributedDataParallel::buckets_rebuilt() const { return reducer_->rebuilt(); }

int64_t DistributedDataParallel::num_iterations() const { return reducer_->iterations(); }

}  // namespace mantissa::nn
