// TensorDataset, Subset, random_split and the DataLoader. Datasets are gathered on the host with
// one memcpy per example row; the loader's shuffle order is recomputed from (seed, epoch) so that
// its position alone restores it.
#include "runner/data/data.h"

#include <cmath>
#include <cstring>
#include <random>
#include <sstream>

#include "engine/error.h"
#include "engine/factory.h"
#include "runner/files/hash.h"

namespace mantissa::runner {

namespace {

Shape row_shape(const Tensor& t) { return Shape(t.shape().begin() + 1, t.shape().end()); }

// rows[indices] of a contiguous CPU tensor, as a new [indices.size(), ...] tensor.
Tensor gather_rows(const Tensor& src, const std::vector<int64_t>& indices) {
  Shape shape = src.shape();
  shape[0] = static_cast<int64_t>(indices.size());
  Tensor out = empty(shape, src.dtype());
  const int64_t rows = src.size(0);
  const int64_t row_bytes = rows == 0 ? 0 : src.nbytes() / rows;
  const auto* from = static_cast<const unsigned char*>(src.data_ptr());
  auto* to = static_cast<unsigned char*>(out.data_ptr());
  for (size_t i = 0; i < indices.size(); ++i) {
    const int64_t r = indices[i];
    MT_CHECK(r >= 0 && r < rows, "Dataset: index ", r, " is out of range for a dataset of ", rows,
             " examples");
    std::memcpy(to + i * row_bytes, from + r * row_bytes, row_bytes);
  }
  return out;
}

// Uniform in [0, bound) without modulo bias (rejection on the top of the 64-bit range).
uint64_t bounded(std::mt19937_64& rng, uint64_t bound) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t x;
  do {
    x = rng();
  } while (x >= limit);
  return x % bound;
}

}  // namespace

std::string Dataset::describe() const {
  std::ostringstream os;
  os << size() << " examples, input " << input_shape() << " " << input_dtype() << ", target "
     << target_shape() << " " << target_dtype();
  return os.str();
}

TensorDataset::TensorDataset(Tensor inputs, Tensor targets, std::string name)
    : name_(std::move(name)) {
  MT_CHECK(inputs.defined() && targets.defined(),
           "TensorDataset: inputs and targets must be given");
  MT_CHECK(inputs.dim() >= 1 && targets.dim() >= 1,
           "TensorDataset: inputs and targets need a first (example) dimension, got shapes ",
           inputs.shape(), " and ", targets.shape());
  MT_CHECK(inputs.size(0) == targets.size(0), "TensorDataset: inputs have ", inputs.size(0),
           " examples but targets have ", targets.size(0), " (shapes ", inputs.shape(), " and ",
           targets.shape(), ")");
  inputs_ = inputs.detach().cpu().contiguous();
  targets_ = targets.detach().cpu().contiguous();
}

Batch TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  return {gather_rows(inputs_, indices), gather_rows(targets_, indices)};
}
Shape TensorDataset::input_shape() const { return row_shape(inputs_); }
Shape TensorDataset::target_shape() const { return row_shape(targets_); }
std::string TensorDataset::describe() const { return name_ + ": " + Dataset::describe(); }

namespace {

void add_tensor(Fnv1a64& h, const Tensor& t) {
  const int64_t header[] = {static_cast<int64_t>(t.dtype()), t.dim()};
  h.add(header, sizeof header);
  h.add(t.shape().data(), static_cast<size_t>(t.dim()) * sizeof(int64_t));
  h.add(t.data_ptr(), static_cast<size_t>(t.nbytes()));  // contiguous CPU (the constructor)
}

}  // namespace

std::string TensorDataset::fingerprint() const {
  if (fingerprint_.empty()) {
    Fnv1a64 h;
    add_tensor(h, inputs_);
    add_tensor(h, targets_);
    fingerprint_ = h.hex();
  }
  return fingerprint_;
}

std::string Subset::fingerprint() const {
  const std::string base = base_->fingerprint();
  if (base.empty()) return {};
  return Fnv1a64().add(base).add(indices_.data(), indices_.size() * sizeof(int64_t)).hex();
}

Subset::Subset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices)
    : base_(std::move(base)), indices_(std::move(indices)) {
  MT_CHECK(base_ != nullptr, "Subset: no base dataset");
  for (int64_t i : indices_)
    MT_CHECK(i >= 0 && i < base_->size(), "Subset: index ", i, " is out of range for a dataset of ",
             base_->size(), " examples");
}

Batch Subset::get_batch(const std::vector<int64_t>& indices) const {
  return get_epoch_batch(indices, 0);
}

Batch Subset::get_epoch_batch(const std::vector<int64_t>& indices, int64_t epoch) const {
  std::vector<int64_t> mapped(indices.size());
  for (size_t i = 0; i < indices.size(); ++i) {
    MT_CHECK(indices[i] >= 0 && indices[i] < size(), "Subset: index ", indices[i],
             " is out of range for a subset of ", size(), " examples");
    mapped[i] = indices_[indices[i]];
  }
  return base_->get_epoch_batch(mapped, epoch);
}

std::string Subset::describe() const {
  return "subset of " + std::to_string(size()) + " [" + base_->describe() + "]";
}

std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed, uint64_t stream) {
  std::vector<int64_t> perm(n);
  for (int64_t i = 0; i < n; ++i) perm[i] = i;
  std::mt19937_64 rng(splitmix64(seed) ^ splitmix64(stream + 0x632be59bd9b4e019ull));
  for (int64_t i = n - 1; i > 0; --i) std::swap(perm[i], perm[bounded(rng, i + 1)]);
  return perm;
}

Split random_split(std::shared_ptr<const Dataset> dataset, double val_fraction, uint64_t seed) {
  MT_CHECK(dataset != nullptr, "random_split: no dataset");
  MT_CHECK(val_fraction > 0.0 && val_fraction < 1.0,
           "random_split: val_fraction must be in (0, 1), got ", val_fraction);
  const int64_t n = dataset->size();
  const auto n_val = static_cast<int64_t>(std::llround(val_fraction * static_cast<double>(n)));
  MT_CHECK(n_val > 0 && n_val < n, "random_split: val_fraction ", val_fraction, " of ", n,
           " examples leaves an empty ", n_val == 0 ? "validation" : "training", " set");
  // Stream ~0 keeps the split's permutation apart from the loaders' per-epoch ones.
  const auto perm = seeded_permutation(n, seed, ~uint64_t{0});
  std::vector<int64_t> val(perm.begin(), perm.begin() + n_val);
  std::vector<int64_t> train(perm.begin() + n_val, perm.end());
  return {std::make_shared<Subset>(dataset, std::move(train)),
          std::make_shared<Subset>(dataset, std::move(val))};
}

int64_t DistributedSampler::num_samples(int64_t n) const {
  // torch: drop_last takes ceil((n - W) / W), which is floor(n / W) for every n >= 0.
  // Written so that no number of replicas (a checkpoint's may be any positive int64) overflows.
  return n / num_replicas + (!drop_last && n % num_replicas != 0 ? 1 : 0);
}

std::vector<int64_t> DistributedSampler::shard(const std::vector<int64_t>& order) const {
  MT_CHECK(num_replicas >= 1 && rank >= 0 && rank < num_replicas, "DistributedSampler: rank ", rank,
           " is out of range for num_replicas ", num_replicas);
  const auto n = static_cast<int64_t>(order.size());
  const int64_t per_rank = num_samples(n);
  std::vector<int64_t> out;
  if (n == 0) return out;
  out.reserve(static_cast<size_t>(per_rank));
  // Position p of the padded order is order[p % n]: the padding repeats the order from its start,
  // as many times as it takes (torch does the same when the padding exceeds n).
  for (int64_t i = 0; i < per_rank; ++i) out.push_back(order[(rank + i * num_replicas) % n]);
  return out;
}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(options) {
  MT_CHECK(dataset_ != nullptr, "DataLoader: no dataset");
  MT_CHECK(options_.batch_size > 0, "DataLoader: batch_size must be positive, got ",
           options_.batch_size);
  const DistributedSampler& s = options_.sampler;
  MT_CHECK(s.num_replicas >= 1 && s.rank >= 0 && s.rank < s.num_replicas,
           "DataLoader: sampler rank ", s.rank, " is out of range for num_replicas ",
           s.num_replicas);
  MT_CHECK(dataset_->size() > 0, "DataLoader: the dataset is empty");
  MT_CHECK(examples_per_epoch() > 0, "DataLoader: the sampler's drop_last leaves none of the ",
           dataset_->size(), " examples to each of ", s.num_replicas, " replicas");
  MT_CHECK(batches_per_epoch() > 0, "DataLoader: drop_last with batch_size ", options_.batch_size,
           " and only ", examples_per_epoch(), " examples", s.enabled() ? " per replica" : "",
           " gives no batches");
}

namespace {

// Examples per rank of an epoch of n examples (after an offset) under a loader's options with
// `replicas` ranks, and the batches they make.
int64_t examples_per_rank(int64_t n, const DataLoaderOptions& o, int64_t replicas) {
  const DistributedSampler s{replicas, 0, o.sampler.drop_last};
  return s.enabled() ? s.num_samples(n) : n;
}

int64_t batches_of(int64_t examples, int64_t batch, bool drop_last) {
  // Written so that no batch size (a checkpoint's may be any positive int64) overflows.
  return examples / batch + (!drop_last && examples % batch != 0 ? 1 : 0);
}

}  // namespace

int64_t DataLoader::examples_per_epoch() const {
  return examples_per_rank(dataset_->size(), options_, options_.sampler.num_replicas);
}

int64_t DataLoader::batches_per_epoch() const {
  return batches_of(examples_per_epoch(), options_.batch_size, options_.drop_last);
}

int64_t DataLoader::examples_in_epoch() const {
  return examples_per_rank(dataset_->size() - offset(), options_, options_.sampler.num_replicas);
}

int64_t DataLoader::batches_in_epoch() const {
  return batches_of(examples_in_epoch(), options_.batch_size, options_.drop_last);
}

void DataLoader::set_epoch(int64_t epoch) {
  MT_CHECK(epoch >= 0, "DataLoader: epoch must be >= 0, got ", epoch);
  epoch_ = epoch;
  index_ = 0;
  offset_epoch_ = -1;
}

const std::vector<int64_t>& DataLoader::order() {
  if (order_epoch_ != epoch_ || order_offset_ != offset()) {
    const int64_t n = dataset_->size();
    if (options_.shuffle) {
      order_ = seeded_permutation(n, options_.seed, static_cast<uint64_t>(epoch_));
    } else {
      order_.resize(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) order_[i] = i;
    }
    // The rest of an epoch resumed on another world size: sharded as a whole epoch would be.
    if (offset() > 0) order_.erase(order_.begin(), order_.begin() + offset());
    if (options_.sampler.enabled()) order_ = options_.sampler.shard(order_);
    order_epoch_ = epoch_;
    order_offset_ = offset();
  }
  return order_;
}

std::optional<Batch> DataLoader::next() {
  if (index_ >= batches_in_epoch()) {
    ++epoch_;
    index_ = 0;
    return std::nullopt;
  }
  const int64_t n = examples_in_epoch();
  const int64_t start = index_ * options_.batch_size;
  const int64_t stop = std::min(n, start + options_.batch_size);
  std::vector<int64_t> indices(stop - start);
  if (options_.shuffle || options_.sampler.enabled() || offset() > 0) {
    const auto& perm = order();
    for (int64_t i = start; i < stop; ++i) indices[i - start] = perm[i];
  } else {
    for (int64_t i = start; i < stop; ++i) indices[i - start] = i;
  }
  ++index_;
  Batch batch = dataset_->get_epoch_batch(indices, epoch_);
  if (options_.device != batch.input.device()) {
    batch.input = batch.input.to(options_.device);
    batch.target = batch.target.to(options_.device);
  }
  return batch;
}

LoaderPosition DataLoader::state() const {
  return {
      epoch_, index_, options_.seed, options_.sampler.num_replicas, offset(), options_.batch_size};
}

void DataLoader::load_state(const LoaderPosition& state) {
  MT_CHECK(state.seed == options_.seed,
           "DataLoader.load_state: the state was saved with shuffle seed ", state.seed,
           " but this loader's seed is ", options_.seed);
  const int64_t n = dataset_->size();
  MT_CHECK(
      state.num_replicas >= 1 && state.batch_size >= 0 && state.offset >= 0 && state.offset < n,
      "DataLoader.load_state: ", state.num_replicas, " replica(s), batch size ", state.batch_size,
      " and offset ", state.offset, " are invalid for a dataset of ", n, " examples");
  const int64_t batch = state.batch_size > 0 ? state.batch_size : options_.batch_size;
  // The state's epoch on the world size that wrote it.
  const int64_t examples = examples_per_rank(n - state.offset, options_, state.num_replicas);
  const int64_t batches = batches_of(examples, batch, options_.drop_last);
  MT_CHECK(state.epoch >= 0 && state.index >= 0 && state.index <= batches,
           "DataLoader.load_state: position epoch ", state.epoch, ", index ", state.index,
           " is invalid for a loader of ", batches, " batches in that epoch");
  epoch_ = state.epoch;
  index_ = state.index;
  offset_ = state.offset;
  offset_epoch_ = state.offset > 0 ? state.epoch : -1;
  if (state.num_replicas == options_.sampler.num_replicas && batch == options_.batch_size) return;
  // Another world size or batch size: the same global position, the rest sharded anew.
  // (A forged state's replicas can be any positive int64: past n, the epoch is simply done.)
  int64_t taken = 0;
  const bool past_the_end =
      __builtin_mul_overflow(std::min(state.index * batch, examples), state.num_replicas, &taken) ||
      __builtin_add_overflow(taken, state.offset, &taken);
  index_ = 0;
  if (state.index == batches || past_the_end || taken >= n) {
    epoch_ = state.epoch + 1;
    offset_epoch_ = -1;
  } else {
    offset_ = taken;
    offset_epoch_ = state.epoch;
  }
}

}  // namespace mantissa::runner
