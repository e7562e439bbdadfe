#include "distributed/zero.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "autograd/functions.h"
#include "autograd/node.h"
#include "distributed/reducer.h"
#include "engine/error.h"
#include "engine/factory.h"
#include "nn/clip_grad.h"

namespace mantissa::distributed {
namespace {

Tensor flat_view(const Tensor& t) { return t.detach().reshape({t.numel()}); }

}  // namespace

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(nn::DistributedDataParallel& ddp,
                                                 std::vector<optim::ParamGroup> groups,
                                                 const Factory& make, int stage)
    : pg_(ddp.process_group_ptr()), stage_(stage) {
  MT_CHECK(stage == 1 || stage == 2, "ZeroRedundancyOptimizer: stage must be 1 or 2, got ", stage);
  MT_CHECK(
      (stage == 2) == ddp.options().reduce_scatter_gradients, "ZeroRedundancyOptimizer: stage ",
      stage, (stage == 2 ? " needs" : " needs no"),
      " DistributedDataParallel option reduce_scatter_gradients (stage 2 shards the gradients)");
  MT_CHECK(make != nullptr, "ZeroRedundancyOptimizer: no optimizer factory");
  for (const auto& [name, p] : ddp.module().named_parameters())
    if (p.requires_grad()) params_.push_back(p);

  // Every parameter DDP reduces, each once, and nothing else.
  param_id_.assign(params_.size(), -1);
  std::vector<size_t> group_of(params_.size(), 0);
  int64_t id = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const Tensor& p : groups[g].params) {
      auto it = std::find_if(params_.begin(), params_.end(),
                             [&](const Tensor& q) { return q.is_same(p); });
      MT_CHECK(it != params_.end(), "ZeroRedundancyOptimizer: parameter ", id,
               " of the optimizer's groups (shape ", p.shape(),
               ") is not a parameter of the DistributedDataParallel module that requires grad");
      const auto i = static_cast<size_t>(it - params_.begin());
      MT_CHECK(param_id_[i] < 0, "ZeroRedundancyOptimizer: a parameter (shape ", p.shape(),
               ") is in the optimizer's groups twice");
      param_id_[i] = id++;
      group_of[i] = g;
    }
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    MT_CHECK(param_id_[i] >= 0, "ZeroRedundancyOptimizer: the module's parameter ", i, " (shape ",
             params_[i].shape(),
             ") is in none of the optimizer's groups; ZeRO shards every parameter DDP reduces");
  }

  reference_ = make(groups);
  MT_CHECK(reference_ != nullptr, "ZeroRedundancyOptimizer: the factory returned no optimizer");
  MT_CHECK(!reference_->has_scalar_state(), "ZeroRedundancyOptimizer: ", reference_->name(),
           " keeps a per-parameter scalar in its state, which cannot be sharded by element; "
           "use another optimizer (Adam, AdamW, SGD, ...) with ZeRO");

  // The whole parameters' owners: largest first (ties: the optimizer's order), each to the rank
  // with the fewest whole elements so far (ties: the lowest rank). Every rank computes the same.
  const int64_t w = pg_->size();
  const int rank = pg_->rank();
  const auto& ref_groups = reference_->param_groups();
  owner_.assign(params_.size(), -1);
  {
    std::vector<size_t> whole;
    for (size_t i = 0; i < params_.size(); ++i)
      if (reference_->updates_whole_parameters(ref_groups[group_of[i]])) whole.push_back(i);
    std::sort(whole.begin(), whole.end(), [this](size_t a, size_t b) {
      const int64_t na = params_[a].numel(), nb = params_[b].numel();
      return na != nb ? na > nb : param_id_[a] < param_id_[b];
    });
    std::vector<int64_t> load(static_cast<size_t>(w), 0);
    for (size_t i : whole) {
      const auto q = std::min_element(load.begin(), load.end()) - load.begin();
      owner_[i] = static_cast<int>(q);
      load[static_cast<size_t>(q)] += params_[i].numel();
    }
    for (size_t i = 0; i < params_.size(); ++i)
      if (owner_[i] >= 0) whole_.push_back(i);
  }
  MT_CHECK(!(groups.size() == 1 && whole_.size() == params_.size() &&
             static_cast<int64_t>(whole_.size()) < w),
           "ZeroRedundancyOptimizer: ", reference_->name(), " steps each of its ", whole_.size(),
           " parameter(s) whole on one rank, so ", w - static_cast<int64_t>(whole_.size()),
           " of the ", w, " ranks would own nothing to step; use at most ", whole_.size(),
           " ranks, or add parameters it shards by element (e.g. an AdamW group)");

  // The buckets: DDP's own when it scatters them, else the same sizes computed here (of the
  // parameters sharded by element only).
  if (stage == 2) {
    for (auto& b : ddp.gradient_buckets())
      buckets_.push_back({std::move(b.params), std::move(b.offsets), b.padded_numel, b.shard, {}});
  } else {
    std::vector<size_t> order;
    for (size_t i = params_.size(); i-- > 0;)
      if (owner_[i] < 0) order.push_back(i);
    for (auto& ps : nn::detail::assign_buckets(params_, order, ddp.options().first_bucket_mb,
                                               ddp.options().bucket_cap_mb, false)) {
      Bucket b;
      int64_t n = 0;
      for (size_t i : ps) {
        b.offsets.push_back(n);
        n += params_[i].numel();
      }
      b.params = std::move(ps);
      b.padded = (n + w - 1) / w * w;
      buckets_.push_back(std::move(b));
    }
  }

  // This rank's shards, group by group in the groups' order.
  std::vector<size_t> bucket_of(params_.size()), position(params_.size());
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (size_t k = 0; k < buckets_[b].params.size(); ++k) {
      bucket_of[buckets_[b].params[k]] = b;
      position[buckets_[b].params[k]] = k;
    }
  std::vector<size_t> by_id(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) by_id[static_cast<size_t>(param_id_[i])] = i;
  std::vector<optim::ParamGroup> local(groups.size());
  autograd::NoGradGuard no_grad;
  for (size_t g = 0; g < groups.size(); ++g) local[g].set_options(ref_groups[g].options());
  for (size_t i : by_id) {
    if (owner_[i] >= 0) {
      if (owner_[i] != rank) continue;
      Shard s;
      s.param = i;
      s.whole = true;
      s.numel = params_[i].numel();
      s.tensor = params_[i].detach();
      local[group_of[i]].params.push_back(s.tensor);
      shards_.push_back(std::move(s));
      continue;
    }
    const Bucket& b = buckets_[bucket_of[i]];
    const int64_t m = b.padded / w;
    const int64_t lo = rank * m, hi = lo + m;
    const int64_t start = b.offsets[position[i]], end = start + params_[i].numel();
    const int64_t from = std::max(start, lo), to = std::min(end, hi);
    if (from >= to) continue;
    Shard s;
    s.param = i;
    s.begin = from - start;
    s.numel = to - from;
    s.bucket = bucket_of[i];
    s.slice_offset = from - lo;
    s.tensor = flat_view(params_[i]).narrow(0, s.begin, s.numel);
    local[group_of[i]].params.push_back(s.tensor);
    buckets_[s.bucket].shards.push_back(shards_.size());
    shards_.push_back(std::move(s));
  }
  local_ = make(std::move(local));
  MT_CHECK(local_ != nullptr, "ZeroRedundancyOptimizer: the factory returned no optimizer");
}

ZeroRedundancyOptimizer::~ZeroRedundancyOptimizer() = default;

void ZeroRedundancyOptimizer::zero_grad(bool set_to_none) {
  local_->zero_grad(set_to_none);
  autograd::NoGradGuard no_grad;
  for (const Tensor& p : params_) {
    if (!p.grad().defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
    } else {
      Tensor g = p.grad().detach();
      g.zero_();
    }
  }
}

void ZeroRedundancyOptimizer::prepare_gradients() {
  autograd::NoGradGuard no_grad;
  if (stage_ == 2) {
    // The owners of whole parameters need their whole reduced gradient: every rank's slices of
    // each bucket that holds one, gathered (every rank takes part).
    for (const Bucket& bucket : buckets_) {
      if (std::none_of(bucket.params.begin(), bucket.params.end(),
                       [this](size_t i) { return owner_[i] >= 0; }))
        continue;
      Tensor all =
          empty({bucket.padded}, TensorOptions(bucket.slice.dtype()).device(bucket.slice.device()));
      pg_->allgather(all, bucket.slice)->wait();
      for (size_t k = 0; k < bucket.params.size(); ++k) {
        const size_t i = bucket.params[k];
        if (owner_[i] != pg_->rank()) continue;
        const Tensor& p = params_[i];
        // A copy, so that the gathered bucket is freed now.
        const Tensor g = all.narrow(0, bucket.offsets[k], p.numel()).reshape(p.shape()).clone();
        for (const Shard& s : shards_)
          if (s.whole && s.param == i) s.tensor.set_grad(g);
      }
    }
  }
  for (const Shard& s : shards_) {
    if (s.whole) {
      if (stage_ == 1) s.tensor.set_grad(params_[s.param].grad());
      continue;
    }
    if (stage_ == 2) {
      s.tensor.set_grad(buckets_[s.bucket].slice.narrow(0, s.slice_offset, s.numel));
      continue;
    }
    const Tensor g = params_[s.param].grad();
    s.tensor.set_grad(g.defined() ? flat_view(g).narrow(0, s.begin, s.numel) : Tensor());
  }
}

double ZeroRedundancyOptimizer::clip_grad_norm_(double max_norm) {
  autograd::NoGradGuard no_grad;
  const Device dev = pg_->device();
  Tensor sum = zeros({1}, TensorOptions(kFloat64).device(dev));
  std::vector<Tensor> grads;
  DType dtype = kFloat32;
  bool first = true;
  for (const Shard& s : shards_) {
    const Tensor g = s.tensor.grad();
    if (!g.defined()) continue;
    grads.push_back(g);
    dtype = first ? g.dtype() : promote_types(dtype, g.dtype());
    first = false;
    const Tensor n = norm(g.to(kFloat64), 2.0).to(dev);
    sum.add_((n * n).reshape({1}));
  }
  // Every rank's gradients have the same dtypes (the same model), so ranks without shards agree.
  pg_->allreduce(sum, ReduceOp::Sum)->wait();
  const double total = std::sqrt(sum.to(Device::cpu()).to_vector<double>()[0]);
  const double coef = nn::clip_coefficient(total, max_norm, dtype);
  if (!(coef >= 1.0))
    for (Tensor g : grads) g.mul_(coef);
  return total;
}

std::function<void(const Tensor&)> ZeroRedundancyOptimizer::found_inf_hook() {
  return [pg = pg_](const Tensor& found_inf) {
    autograd::NoGradGuard no_grad;
    Tensor t = found_inf.to(pg->device()).reshape({1}).contiguous();
    pg->allreduce(t, ReduceOp::Max)->wait();
    Tensor(found_inf).copy_(t.reshape(found_inf.shape()).to(found_inf.device()));
  };
}

Tensor ZeroRedundancyOptimizer::gather_bucket(
    size_t b, DType dtype, const std::function<Tensor(size_t shard)>& part) const {
  const Bucket& bucket = buckets_[b];
  const Device dev = pg_->device();
  const TensorOptions o = TensorOptions(dtype).device(dev);
  Tensor slice = zeros({bucket.padded / pg_->size()}, o);
  for (size_t k : bucket.shards) {
    const Shard& s = shards_[k];
    if (const Tensor t = part(k); t.defined())
      slice.narrow(0, s.slice_offset, s.numel).copy_(t.reshape({s.numel}).to(dev));
  }
  Tensor all = empty({bucket.padded}, o);
  pg_->allgather(all, slice)->wait();
  return all;
}

void ZeroRedundancyOptimizer::gather_whole(
    const std::vector<size_t>& ids, DType dtype, const std::function<Tensor(size_t i)>& mine,
    const std::function<void(size_t i, const Tensor& flat)>& store) const {
  const auto w = static_cast<size_t>(pg_->size());
  std::vector<int64_t> load(w, 0);
  for (size_t i : ids) load[static_cast<size_t>(owner_[i])] += params_[i].numel();
  const int64_t m = *std::max_element(load.begin(), load.end());
  if (m == 0) return;
  const Device dev = pg_->device();
  const TensorOptions o = TensorOptions(dtype).device(dev);
  Tensor slice = zeros({m}, o);
  int64_t at = 0;
  for (size_t i : ids) {
    if (owner_[i] != pg_->rank()) continue;
    const int64_t n = params_[i].numel();
    slice.narrow(0, at, n).copy_(mine(i).reshape({n}).to(dev));
    at += n;
  }
  Tensor all = empty({m * static_cast<int64_t>(w)}, o);
  pg_->allgather(all, slice)->wait();
  std::vector<int64_t> next(w, 0);
  for (size_t i : ids) {
    const auto q = static_cast<size_t>(owner_[i]);
    const int64_t n = params_[i].numel();
    store(i, all.narrow(0, static_cast<int64_t>(q) * m + next[q], n));
    next[q] += n;
  }
}

void ZeroRedundancyOptimizer::gather_parameters() {
  autograd::NoGradGuard no_grad;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Bucket& bucket = buckets_[b];
    // Stage 2's buckets also hold whole parameters (their part of the slices is not sent here).
    if (std::all_of(bucket.params.begin(), bucket.params.end(),
                    [this](size_t i) { return owner_[i] >= 0; }))
      continue;
    const Tensor all = gather_bucket(b, params_[bucket.params.front()].dtype(),
                                     [this](size_t k) { return shards_[k].tensor; });
    for (size_t k = 0; k < bucket.params.size(); ++k) {
      if (owner_[bucket.params[k]] >= 0) continue;
      const Tensor& p = params_[bucket.params[k]];
      flat_view(p).copy_(all.narrow(0, bucket.offsets[k], p.numel()).to(p.device()));
      p.bump_version();
    }
  }
  // The whole parameters from their owners, one all-gather per dtype.
  std::map<int, std::vector<size_t>> by_dtype;
  for (size_t i : whole_) by_dtype[static_cast<int>(params_[i].dtype())].push_back(i);
  for (const auto& [code, ids] : by_dtype) {
    gather_whole(
        ids, static_cast<DType>(code), [this](size_t i) { return params_[i]; },
        [this](size_t i, const Tensor& flat) {
          if (owner_[i] == pg_->rank()) return;
          const Tensor& p = params_[i];
          flat_view(p).copy_(flat.to(p.device()));
          p.bump_version();
        });
  }
}

optim::OptimizerState ZeroRedundancyOptimizer::consolidated_state_dict() const {
  autograd::NoGradGuard no_grad;
  const int64_t w = pg_->size();
  const Device dev = pg_->device();
  const std::vector<std::string> keys = local_->state_buffer_keys();
  const optim::OptimizerState local = local_->state_dict();
  const size_t K = keys.size(), P = params_.size();

  // Per parameter, from each rank that owns part of it: its step and, per state entry, the
  // entry's dtype + 1 (0: absent); -1 in the step from ranks that own none of it.
  std::vector<double> record(P * (K + 1), 0.0);
  for (size_t i = 0; i < P; ++i) record[i * (K + 1)] = -1.0;
  for (size_t k = 0; k < shards_.size(); ++k) {
    const size_t i = shards_[k].param;
    auto st = local.state.find(static_cast<int64_t>(k));
    record[i * (K + 1)] = st == local.state.end() ? -2.0 : static_cast<double>(st->second.step);
    if (st == local.state.end()) continue;
    for (size_t j = 0; j < K; ++j) {
      auto t = st->second.buffers.find(keys[j]);
      if (t != st->second.buffers.end())
        record[i * (K + 1) + 1 + j] = static_cast<double>(static_cast<int>(t->second.dtype())) + 1;
    }
  }
  Tensor mine = from_vector(record).to(dev);
  Tensor every = empty({mine.numel() * w}, TensorOptions(kFloat64).device(dev));
  pg_->allgather(every, mine)->wait();
  const std::vector<double> all = every.to(Device::cpu()).to_vector<double>();
  std::vector<std::vector<double>> info(P);  // the first owner's record; empty: no state
  for (size_t i = 0; i < P; ++i) {
    for (int64_t q = 0; q < w; ++q) {
      const double* r = &all[(static_cast<size_t>(q) * P + i) * (K + 1)];
      if (r[0] == -1.0) continue;
      if (r[0] >= 0.0) info[i].assign(r, r + K + 1);
      break;
    }
  }

  optim::OptimizerState out;
  int64_t next = 0;
  for (const optim::ParamGroup& g : local_->param_groups()) {
    optim::OptimizerState::Group saved{g.options(), {}};
    out.param_groups.push_back(std::move(saved));
  }
  for (size_t g = 0; g < reference_->param_groups().size(); ++g)
    for (size_t k = 0; k < reference_->param_groups()[g].params.size(); ++k)
      out.param_groups[g].params.push_back(next++);
  for (size_t i = 0; i < P; ++i) {
    if (info[i].empty()) continue;
    out.state[param_id_[i]].step = static_cast<int64_t>(info[i][0]);
  }

  // Each entry's slices, bucket by bucket.
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Bucket& bucket = buckets_[b];
    for (size_t j = 0; j < K; ++j) {
      int dtype_code = 0;
      for (size_t i : bucket.params) {
        if (owner_[i] >= 0 || info[i].empty() || info[i][1 + j] == 0.0) continue;
        const int code = static_cast<int>(info[i][1 + j]);
        MT_CHECK(dtype_code == 0 || dtype_code == code, "ZeroRedundancyOptimizer: state '", keys[j],
                 "' has different dtypes within one bucket");
        dtype_code = code;
      }
      if (dtype_code == 0) continue;
      const Tensor gathered =
          gather_bucket(b, static_cast<DType>(dtype_code - 1), [&](size_t k) -> Tensor {
            auto st = local.state.find(static_cast<int64_t>(k));
            if (st == local.state.end()) return Tensor();
            auto t = st->second.buffers.find(keys[j]);
            return t == st->second.buffers.end() ? Tensor() : t->second;
          });
      for (size_t k = 0; k < bucket.params.size(); ++k) {
        const size_t i = bucket.params[k];
        if (owner_[i] >= 0 || info[i].empty() || info[i][1 + j] == 0.0) continue;
        const Tensor& p = params_[i];
        out.state[param_id_[i]].buffers[keys[j]] = gathered.narrow(0, bucket.offsets[k], p.numel())
                                                       .reshape(p.shape())
                                                       .to(p.device())
                                                       .clone();
      }
    }
  }

  // The whole parameters' entries from their owners, one all-gather per entry and dtype.
  std::map<size_t, int64_t> local_id;  // whole parameter -> its id in the local optimizer
  for (size_t k = 0; k < shards_.size(); ++k)
    if (shards_[k].whole) local_id[shards_[k].param] = static_cast<int64_t>(k);
  for (size_t j = 0; j < K; ++j) {
    std::map<int, std::vector<size_t>> by_dtype;
    for (size_t i : whole_)
      if (!info[i].empty() && info[i][1 + j] != 0.0)
        by_dtype[static_cast<int>(info[i][1 + j]) - 1].push_back(i);
    for (const auto& [code, ids] : by_dtype) {
      gather_whole(
          ids, static_cast<DType>(code),
          [&](size_t i) { return local.state.at(local_id.at(i)).buffers.at(keys[j]); },
          [&](size_t i, const Tensor& flat) {
            const Tensor& p = params_[i];
            out.state[param_id_[i]].buffers[keys[j]] =
                flat.reshape(p.shape()).to(p.device()).clone();
          });
    }
  }
  return out;
}

void ZeroRedundancyOptimizer::load_consolidated_state_dict(const optim::OptimizerState& state) {
  const auto& ref = reference_->param_groups();
  MT_CHECK(state.param_groups.size() == ref.size(), "ZeroRedundancyOptimizer: the state has ",
           state.param_groups.size(), " parameter group(s) but the optimizer has ", ref.size());
  std::map<int64_t, int64_t> position;  // saved id -> reference id
  int64_t next = 0;
  for (size_t g = 0; g < ref.size(); ++g) {
    MT_CHECK(state.param_groups[g].params.size() == ref[g].params.size(),
             "ZeroRedundancyOptimizer: parameter group ", g, " has ",
             state.param_groups[g].params.size(), " parameters in the state but ",
             ref[g].params.size(), " in the optimizer");
    for (int64_t saved : state.param_groups[g].params) position[saved] = next++;
  }
  std::map<int64_t, int64_t> saved_of;  // reference id -> saved id
  for (const auto& [saved, pos] : position) saved_of[pos] = saved;

  optim::OptimizerState local;
  int64_t k = 0;
  for (size_t g = 0; g < ref.size(); ++g) {
    local.param_groups.push_back({state.param_groups[g].options, {}});
    for (size_t n = 0; n < local_->param_groups()[g].params.size(); ++n)
      local.param_groups[g].params.push_back(k++);
  }
  autograd::NoGradGuard no_grad;
  for (size_t s = 0; s < shards_.size(); ++s) {
    const Shard& shard = shards_[s];
    auto it = state.state.find(saved_of.at(param_id_[shard.param]));
    if (it == state.state.end()) continue;
    optim::ParamState ps;
    ps.step = it->second.step;
    for (const auto& [key, t] : it->second.buffers) {
      MT_CHECK(t.numel() == params_[shard.param].numel(), "ZeroRedundancyOptimizer: state '", key,
               "' of parameter ", param_id_[shard.param], " has shape ", t.shape(),
               " but the parameter has shape ", params_[shard.param].shape());
      const Tensor& p = params_[shard.param];
      ps.buffers.emplace(
          key, shard.whole ? t.reshape(p.shape()).clone()
                           : t.reshape({t.numel()}).narrow(0, shard.begin, shard.numel).clone());
    }
    local.state.emplace(static_cast<int64_t>(s), std::move(ps));
  }
  local_->load_state_dict(local);
}

int64_t ZeroRedundancyOptimizer::owned_numel() const {
  int64_t n = 0;
  for (const Shard& s : shards_) n += s.numel;
  return n;
}

int64_t ZeroRedundancyOptimizer::gradient_bytes() const {
  int64_t bytes = 0;
  if (stage_ == 2) {
    for (const Bucket& b : buckets_) bytes += b.slice.nbytes();
    for (const Shard& s : shards_)
      if (s.whole && s.tensor.grad().defined()) bytes += s.tensor.grad().nbytes();
  } else {
    for (const Tensor& p : params_)
      if (p.grad().defined()) bytes += p.grad().nbytes();
  }
  return bytes;
}

}  // namespace mantissa::distributed
