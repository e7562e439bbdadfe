// Datasets and the DataLoader, the runner's data layer (torch.utils.data in spirit).
//
// A Dataset holds examples on the host and gathers a list of indices into one Batch; a DataLoader
// walks a dataset in batches, shuffled by a permutation that is a pure function of (seed, epoch),
// so its position {epoch, index, seed} is all a checkpoint needs to resume it exactly. Batches are
// moved to the loader's device as they are produced.
//
//   auto data = runner::make_teacher_dataset({.samples = 1024});
//   runner::DataLoader loader(data, {.batch_size = 32, .shuffle = true, .seed = 1});
//   for (const runner::Batch& b : loader) { ... }   // the rest of the current epoch
//
// With options.sampler (DistributedSampler) each rank of a data-parallel job walks its own
// disjoint shard of the same per-epoch order.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/device.h"
#include "engine/dtype.h"
#include "engine/shape.h"
#include "engine/tensor.h"

namespace mantissa::runner {

// input [B, ...] and target [B, ...] (or [B] for class labels, int64).
struct Batch {
  Tensor input;
  Tensor target;
  int64_t size() const { return input.defined() ? input.size(0) : 0; }
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // The examples at `indices` stacked along a new first dimension, as CPU tensors. Throws on an
  // index outside [0, size()).
  virtual Batch get_batch(const std::vector<int64_t>& indices) const = 0;
  // One example as a batch of one.
  Batch get(int64_t index) const { return get_batch({index}); }
  // The examples at `indices` as the loader's epoch `epoch` sees them; what the DataLoader calls.
  // A dataset whose examples are fixed ignores the epoch; one that draws fresh examples every
  // epoch (random blocks of a token stream) makes them a pure function of (its seed, epoch, index),
  // so the loader's position still restores them exactly.
  virtual Batch get_epoch_batch(const std::vector<int64_t>& indices, int64_t /*epoch*/) const {
    return get_batch(indices);
  }
  // Shape of one example's input / target (without the batch dimension), and their dtypes.
  virtual Shape input_shape() const = 0;
  virtual Shape target_shape() const = 0;
  virtual DType input_dtype() const = 0;
  virtual DType target_dtype() const = 0;
  // Short description for logs ("teacher regression: 1024 x [10] -> [5]").
  virtual std::string describe() const;
  // A hash of every example's values, shapes and dtypes (16 hex digits), stored in checkpoints so
  // that a resume notices data that changed since (another file under the same name); empty when
  // a dataset cannot tell, and then nothing is checked.
  virtual std::string fingerprint() const { return {}; }
};

// Examples are the rows (first-dimension slices) of two host tensors of equal length.
class TensorDataset : public Dataset {
 public:
  // Both are made contiguous CPU tensors; their first dimensions must agree.
  TensorDataset(Tensor inputs, Tensor targets, std::string name = "tensors");
  int64_t size() const override { return inputs_.size(0); }
  Batch get_batch(const std::vector<int64_t>& indices) const override;
  Shape input_shape() const override;
  Shape target_shape() const override;
  DType input_dtype() const override { return inputs_.dtype(); }
  DType target_dtype() const override { return targets_.dtype(); }
  std::string describe() const override;
  std::string fingerprint() const override;  // computed once
  const Tensor& inputs() const { return inputs_; }
  const Tensor& targets() const { return targets_; }

 private:
  Tensor inputs_;
  Tensor targets_;
  std::string name_{};
  mutable std::string fingerprint_{};
};

// A view of some examples of another dataset, in the given order.
class Subset : public Dataset {
 public:
  Subset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices);
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  Batch get_batch(const std::vector<int64_t>& indices) const override;
  Batch get_epoch_batch(const std::vector<int64_t>& indices, int64_t epoch) const override;
  Shape input_shape() const override { return base_->input_shape(); }
  Shape target_shape() const override { return base_->target_shape(); }
  DType input_dtype() const override { return base_->input_dtype(); }
  DType target_dtype() const override { return base_->target_dtype(); }
  std::string describe() const override;
  std::string fingerprint() const override;  // the base's and the indices'
  const std::vector<int64_t>& indices() const { return indices_; }

 private:
  std::shared_ptr<const Dataset> base_;
  std::vector<int64_t> indices_;
};

// Splits off round(val_fraction * size) examples for validation, chosen by a permutation that
// depends only on `seed` (the same seed gives the same split on every machine). 0 < val_fraction
// < 1, and both parts must be non-empty.
struct Split {
  std::shared_ptr<Dataset> train;
  std::shared_ptr<Dataset> val;
};
Split random_split(std::shared_ptr<const Dataset> dataset, double val_fraction, uint64_t seed);

// A permutation of [0, n) that is a pure function of (seed, stream): mt19937_64 with our own
// Fisher-Yates and bounded draws (std::shuffle and std::uniform_int_distribution differ between
// standard libraries, which would break resuming a run elsewhere).
std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed, uint64_t stream);

// ---- synthetic datasets (float32, generated on the host from their own seed) -------------------

// Regression on a fixed random teacher MLP: x ~ N(0, 1)^in, y = W2 relu(W1 x + b1) + b2 (+ noise
// * N(0, 1)), the teacher's weights drawn from `seed` too. Defaults match the ToyModel (10 -> 5).
struct TeacherOptions {
  int64_t samples = 1024;
  int64_t in_features = 10;
  int64_t hidden = 10;
  int64_t out_features = 5;
  double noise = 0.0;
  uint64_t seed = 0;
  // The run config's keys (runner/config/config_schema.h; the seed is data.seed).
  template <typename Self, typename F>
  static void each(Self& s, F&& f) {
    f("samples", s.samples), f("noise", s.noise), f("in_features", s.in_features),
        f("hidden", s.hidden), f("out_features", s.out_features);
  }
};
std::shared_ptr<TensorDataset> make_teacher_dataset(const TeacherOptions& options = {});

// x ~ U(x_min, x_max) as [N, 1], y = sin(x) (+ noise * N(0, 1)) as [N, 1].
struct SineOptions {
  int64_t samples = 1024;
  double x_min = -3.141592653589793;
  double x_max = 3.141592653589793;
  double noise = 0.0;
  uint64_t seed = 0;
  template <typename Self, typename F>
  static void each(Self& s, F&& f) {
    f("samples", s.samples), f("noise", s.noise), f("x_min", s.x_min), f("x_max", s.x_max);
  }
};
std::shared_ptr<TensorDataset> make_sine_dataset(const SineOptions& options = {});

// Two interleaved spirals in the plane: inputs [N, 2] float32, labels [N] int64 in {0, 1}
// (alternating, so the classes are balanced), Gaussian noise of std `noise` on each coordinate.
struct SpiralsOptions {
  int64_t samples = 1024;
  double noise = 0.1;
  double turns = 1.5;
  uint64_t seed = 0;
  template <typename Self, typename F>
  static void each(Self& s, F&& f) {
    f("samples", s.samples), f("noise", s.noise), f("turns", s.turns);
  }
};
std::shared_ptr<TensorDataset> make_spirals_dataset(const SpiralsOptions& options = {});

// ---- file datasets
// -------------------------------------------------------------------------------

// A numeric CSV file. The header row is detected (a first row with a non-numeric field) unless
// `header` says otherwise. Targets are the columns named in target_columns (header names, or
// 0-based indices written as numbers); default: the last column. Inputs are the remaining
// columns, or input_columns when given. Inputs are float32; targets float32, or int64 class
// labels when target_dtype is int64 (then exactly one target column, giving targets [N]).
// Parse errors name the file, line and column.
struct CsvOptions {
  std::string path{};
  std::optional<bool> header{};  // nullopt: detect
  std::vector<std::string> target_columns{};
  std::vector<std::string> input_columns{};
  DType target_dtype = DType::Float32;
  char delimiter = ',';
  template <typename Self, typename F>
  static void each(Self& s, F&& f) {
    f("path", s.path), f("header", s.header), f("target_columns", s.target_columns),
        f("input_columns", s.input_columns), f("target_dtype", s.target_dtype),
        f("delimiter", s.delimiter);
  }
};
// int64 class labels are whole numbers in [0, 2^31), or equal to `ignored_label` (the loss's
// ignore_index, which marks an example the loss skips: PyTorch's -100 by default); any other
// label is refused naming the file, line and column.
std::shared_ptr<TensorDataset> load_csv_dataset(const CsvOptions& options,
                                                std::optional<int64_t> ignored_label = {});

// Inputs and targets are two tensors of a safetensors file, found by name.
struct SafetensorsDataOptions {
  std::string path{};
  std::string inputs = "inputs";
  std::string targets = "targets";
  template <typename Self, typename F>
  static void each(Self& s, F&& f) {
    f("path", s.path), f("inputs", s.inputs), f("targets", s.targets);
  }
};
std::shared_ptr<TensorDataset> load_safetensors_dataset(const SafetensorsDataOptions& options);

// MNIST in IDX format: images (idx3-ubyte, magic 2051) become float32 [N, 1, rows, cols] in
// [0, 1] (or [N, rows * cols] with flatten), labels (idx1-ubyte, magic 2049) int64 [N]. Magic
// numbers, dimensions and file sizes are validated. `limit` > 0 keeps the first `limit` examples.
struct MnistOptions {
  std::string images{};
  std::string labels{};
  bool flatten = false;
  int64_t limit = 0;
  template <typename Self, typename F>
  static void each(Self& s, F&& f) {
    f("images", s.images), f("labels", s.labels), f("flatten", s.flatten), f("limit", s.limit);
  }
};
std::shared_ptr<TensorDataset> load_mnist_idx(const MnistOptions& options);

// ---- the loader
// ----------------------------------------------------------------------------------

// torch.utils.data.DistributedSampler's rule for giving each of num_replicas ranks a disjoint
// shard of one epoch's order (the same order on every rank: the loader's seeded permutation of
// (seed, epoch), or 0..n-1 without shuffle). Rank r takes positions r, r + W, r + 2W, ... of the
// order. When n does not divide by W, the order is padded by repeating it from its start (so a
// few examples are seen twice per epoch), or with drop_last its tail is dropped; either way every
// rank gets num_samples(n) indices and so the same number of batches.
struct DistributedSampler {
  int64_t num_replicas = 1;
  int64_t rank = 0;
  bool drop_last = false;

  // Indices each rank gets per epoch.
  int64_t num_samples(int64_t dataset_size) const;
  // This rank's shard of `order` (one epoch's order over the whole dataset).
  std::vector<int64_t> shard(const std::vector<int64_t>& order) const;
  bool enabled() const { return num_replicas > 1; }
};

struct DataLoaderOptions {
  int64_t batch_size = 32;
  bool shuffle = true;
  uint64_t seed = 0;  // the loader's own: independent of the engine's generators
  bool drop_last = false;
  Device device = Device::cpu();  // where batches are delivered
  // Batches are made from this rank's shard of each epoch (batch_size examples per rank).
  DistributedSampler sampler{};
};

// A DataLoader's place in its data: what a checkpoint stores to resume it, exactly on as many
// ranks, and from the same global position on another number (DataLoader::load_state).
struct LoaderPosition {
  int64_t epoch = 0;
  int64_t index = 0;         // batches already delivered in the epoch (since `offset`)
  uint64_t seed = 0;         // the shuffle seed the order came from
  int64_t num_replicas = 1;  // ranks the data is sharded over (1: none)
  // Positions of the epoch's order all ranks had taken before this loader's shards began: not 0
  // only in an epoch resumed on another number of ranks, whose rest is sharded anew.
  int64_t offset = 0;
  int64_t batch_size = 0;  // per rank; 0: not recorded (older checkpoints), taken as the loader's
  bool operator==(const LoaderPosition&) const = default;
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options);

  // The next batch of the current epoch; at the end of the epoch returns nullopt once and moves
  // to the start of the next epoch (so `while (auto b = loader.next())` is one epoch).
  std::optional<Batch> next();

  int64_t epoch() const { return epoch_; }
  int64_t index() const { return index_; }  // batches already delivered in this epoch
  int64_t batches_per_epoch() const;
  int64_t size() const { return batches_per_epoch(); }
  const Dataset& dataset() const { return *dataset_; }
  std::shared_ptr<const Dataset> dataset_ptr() const { return dataset_; }
  const DataLoaderOptions& options() const { return options_; }
  void set_device(Device device) { options_.device = device; }
  // Jumps to the start of `epoch`.
  void set_epoch(int64_t epoch);

  // Where the loader is (LoaderPosition). The rank is not stored: every rank resumes from the
  // same state. load_state checks the seed (another would change the data order) and that the
  // position is within the epoch. A state from the same number of replicas and batch size is
  // restored exactly. From another (a run resumed on another world size, or with another
  // data.batch_size), the global position is kept: the ranks before had taken the first
  //   P = offset + min(index * batch_size, their per-rank share) * num_replicas
  // positions of the epoch's order (each rank took one of every num_replicas), so this loader
  // shards the rest of that order, positions P..n-1, over its own replicas as DistributedSampler
  // shards a whole epoch (padded from the rest's start, or its tail dropped), and later epochs
  // as usual. Every example of the epoch is seen once more or less as on the old world size; the
  // global order is the same, grouped into batches of this world size. An epoch the state had
  // finished (P >= n, or all its batches delivered) resumes at the next one.
  LoaderPosition state() const;
  void load_state(const LoaderPosition& state);

  // Range over the rest of the current epoch (advancing the loader).
  class Iterator {
   public:
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    Iterator() = default;
    explicit Iterator(DataLoader* loader) : loader_(loader) { ++*this; }
    const Batch& operator*() const { return *current_; }
    const Batch* operator->() const { return &*current_; }
    Iterator& operator++() {
      current_ = loader_->next();
      return *this;
    }
    bool operator==(const Iterator& other) const {
      return !current_.has_value() && !other.current_.has_value();
    }

   private:
    DataLoader* loader_ = nullptr;
    std::optional<Batch> current_;
  };
  Iterator begin() { return Iterator(this); }
  Iterator end() { return Iterator(); }

 private:
  // The examples of the current epoch this loader delivers, in order (this rank's shard).
  const std::vector<int64_t>& order();
  int64_t examples_per_epoch() const;
  // The current epoch's examples and batches for this rank: the whole epoch's, or in an epoch
  // resumed at `offset_`, those of the rest.
  int64_t examples_in_epoch() const;
  int64_t batches_in_epoch() const;
  int64_t offset() const { return epoch_ == offset_epoch_ ? offset_ : 0; }

  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  int64_t epoch_ = 0;
  int64_t index_ = 0;
  std::vector<int64_t> order_;  // the current epoch's (shuffle, sampler or offset only)
  int64_t order_epoch_ = -1, order_offset_ = 0;
  // An epoch resumed on another world size: its first offset_ positions were taken before.
  int64_t offset_ = 0;
  int64_t offset_epoch_ = -1;
};

}  // namespace mantissa::runner
