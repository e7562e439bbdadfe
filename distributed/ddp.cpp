#include "distributed/ddp.h"

#include <algorithm>
#include <sstream>
#include <string>

#include "autograd/node.h"
#include "distributed/reducer.h"
#include "engine/error.h"
#include "engine/factory.h"

namespace mantissa::nn {
namespace {

// The collectives take floating tensors on the group's device: CPU for Gloo, the parameters'
// GPU for NCCL (check_parameter_devices has made sure they are all on one).
Device comm_device(const distributed::ProcessGroup& pg, const Module& m) {
  if (pg.backend() != "nccl") return Device::cpu();
  for (const Tensor& p : m.parameters())
    if (p.is_cuda()) return p.device();
  return Device::cpu();
}

void check_devices(const distributed::ProcessGroup& pg, const Module& m) {
  std::vector<std::pair<std::string, Device>> devices;
  for (const auto& [name, t] : m.named_parameters()) devices.emplace_back(name, t.device());
  detail::check_parameter_devices(pg.backend(), devices);
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

// Every rank must hold the same parameters, in the same order, with the same names, shapes and
// dtypes (PyTorch's _verify_param_shape_across_processes, and the names as its debug mode
// does). Each rank contributes a row of [count, max ndim, bytes of names] and then one of
// (dtype, ndim, dims...) per parameter followed by the names' bytes, '\0'-separated; every rank
// compares every other rank's rows with its own and throws the same error.
void verify_shapes(distributed::ProcessGroup& pg, const Module& m, Device dev) {
  const auto named = m.named_parameters();
  const int w = pg.size();
  size_t max_ndim = 0;
  std::string names;
  for (const auto& [name, t] : named) {
    max_ndim = std::max(max_ndim, static_cast<size_t>(t.shape().size()));
    names += name;
    names += '\0';
  }
  auto gather = [&](const std::vector<double>& mine) {
    Tensor in = from_vector(mine).to(dev);
    Tensor out =
        zeros({static_cast<int64_t>(mine.size()) * w}, TensorOptions(kFloat64).device(dev));
    pg.allgather(out, in)->wait();
    return out.to(Device::cpu()).to_vector<double>();
  };
  const std::vector<double> heads =
      gather({double(named.size()), double(max_ndim), double(names.size())});
  size_t width = 0, names_width = 0;
  for (int r = 0; r < w; ++r) {
    MT_CHECK(heads[3 * r] == double(named.size()), "DistributedDataParallel: rank ", pg.rank(),
             " has ", named.size(), " parameters but rank ", r, " has ",
             static_cast<int64_t>(heads[3 * r]), "; every rank must wrap the same model");
    width = std::max(width, static_cast<size_t>(heads[3 * r + 1]) + 2);
    names_width = std::max(names_width, static_cast<size_t>(heads[3 * r + 2]));
  }
  const size_t shapes = named.size() * width;
  std::vector<double> mine(shapes + names_width, 0.0);
  for (size_t i = 0; i < named.size(); ++i) {
    const Tensor& t = named[i].second;
    mine[i * width] = static_cast<double>(static_cast<int>(t.dtype()));
    mine[i * width + 1] = static_cast<double>(t.shape().size());
    for (int64_t d = 0; d < t.shape().size(); ++d) mine[i * width + 2 + d] = double(t.shape()[d]);
  }
  for (size_t k = 0; k < names.size(); ++k)
    mine[shapes + k] = static_cast<double>(static_cast<unsigned char>(names[k]));
  const std::vector<double> all = gather(mine);
  const size_t row = mine.size();
  for (int r = 0; r < w; ++r) {
    // Rank r's names, from its row's tail.
    std::vector<std::string> theirs(1);
    for (size_t k = 0; k < names_width && theirs.size() <= named.size(); ++k) {
      const auto c = static_cast<char>(static_cast<unsigned char>(all[r * row + shapes + k]));
      if (c == '\0') {
        theirs.emplace_back();
      } else {
        theirs.back() += c;
      }
    }
    for (size_t i = 0; i < named.size(); ++i) {
      MT_CHECK(theirs[i] == named[i].first, "DistributedDataParallel: parameter ", i, " is '",
               named[i].first, "' on rank ", pg.rank(), " but '", theirs[i], "' on rank ", r,
               "; every rank must wrap the same model");
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
  check_devices(*process_group_, *module_);
  comm_device_ = comm_device(*process_group_, *module_);
  verify_shapes(*process_group_, *module_, comm_device_);
  broadcast_from_rank0(*process_group_, module_->parameters(), comm_device_, true);
  broadcast_from_rank0(*process_group_, module_->buffers(), comm_device_, true);
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
      // On CUDA the broadcast is ordered on the stream before the forward's kernels.
      broadcast_from_rank0(*process_group_, buffers, comm_device_, !comm_device_.is_cuda());
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

std::vector<GradientBucket> DistributedDataParallel::gradient_buckets() const {
  return reducer_->gradient_buckets();
}

int64_t DistributedDataParallel::num_iterations() const { return reducer_->iterations(); }

}  // namespace mantissa::nn
