// Training checkpoints: one self-describing file holding everything an exact resume needs —
// model parameters and buffers, optimizer state, GradScaler, LR scheduler, the random state of
// every device, the trainer's own state (step, epoch, data-loader position, ...), the config and
// its hash, and a format version. See docs/checkpoints.md for the layout.
//
// The file is a valid safetensors file (tools can open it): tensors "model.<name>" and
// "optim.<param id>.<buffer>", and in __metadata__ the JSON description ("mantissa.checkpoint")
// and a checksum over the whole file ("mantissa.checksum"). Writes are atomic (atomic_file.h).
//
// Loading refuses, with one error naming the file and the reason: a truncated or malformed file,
// a checksum mismatch (corruption), another format or format version, values a writer never
// produces (validate_checkpoint_info: an empty config hash, a trainer state out of range, a file
// named step-<N>.ckpt that does not hold step N), and a model (or optimizer) that differs from
// the one saved, naming the first parameter that differs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runner/files/safetensors.h"
#include "runner/training/trainer_state.h"

namespace mantissa::nn {
class Module;
}
namespace mantissa::optim {
class Optimizer;
class LRScheduler;
}  // namespace mantissa::optim
namespace mantissa::amp {
class GradScaler;
}
namespace mantissa::distributed {
class ZeroRedundancyOptimizer;
}

namespace mantissa::runner {

inline constexpr const char* kCheckpointFormat = "mantissa-checkpoint";
inline constexpr int64_t kCheckpointFormatVersion = 1;

// What goes into a checkpoint and what a load restores into. Null parts are neither saved nor
// restored; loading a checkpoint that has optimizer/scaler/scheduler state into parts that lack
// them skips that state (eval and export need only the model), but parts present on load must
// have been present on save.
struct CheckpointParts {
  nn::Module* model = nullptr;  // required
  optim::Optimizer* optimizer = nullptr;
  // A ZeRO-sharded optimizer (optimizer == &zero->optimizer()): saved as its consolidated state
  // (a collective: every rank saves at the same point, and a rank that does not write calls
  // zero->consolidated_state_dict() instead), in the layout of an unsharded optimizer over the
  // whole model, so the file is an unsharded run's; loaded by taking this rank's slices.
  distributed::ZeroRedundancyOptimizer* zero = nullptr;
  amp::GradScaler* scaler = nullptr;
  optim::LRScheduler* scheduler = nullptr;
  // Saved, and filled in by load_checkpoint (nullopt: none, as for weights saved outside a
  // Trainer); range-checked on reading (validate_checkpoint_info).
  std::optional<TrainerState> trainer_state;
  // Empty: config_hash(config_text) is stored (see runner/config/config.h).
  std::string config_hash;
  std::string config_text;
  bool rng = true;  // save / restore the generator state of every device
};

// Writes a checkpoint of `parts` (and, with parts.rng, every device's generator) atomically.
// A path named step-<N>.ckpt needs a parts.trainer_state with step == N.
void save_checkpoint(const std::string& path, const CheckpointParts& parts);

// Validates the file completely (structure, checksum, format, version, model signature and
// optimizer shape) before changing anything, then restores every non-null part, the RNG states
// (with parts.rng), and sets parts.trainer_state / config_hash / config_text from the file.
void load_checkpoint(const std::string& path, CheckpointParts& parts);

// A validated checkpoint read without a model: for `mantissa eval` / `export` / `resume`, which
// rebuild the model from config_text first.
struct CheckpointInfo {
  std::string path;
  int64_t format_version = 0;
  std::string created;  // UTC, ISO 8601
  std::optional<TrainerState> trainer_state;
  std::string config_hash;
  std::string config_text;
  NamedTensors weights;  // the model's state_dict, names without the "model." prefix
};
// Validates structure, checksum, format, version and validate_checkpoint_info; throws as
// load_checkpoint would.
CheckpointInfo read_checkpoint(const std::string& path);

// Throws, naming the file, the field and its value, unless: config_hash is non-empty; the trainer
// state is absent or in range — step >= 0, epoch, loader.epoch and loader.index in [0, step + 1],
// loader.epoch == epoch, steps_skipped and pending_loss_count in [0, step], pending_samples >= 0,
// wall_time_s >= 0; and, for a file named step-<N>.ckpt, its trainer state holds step N.
// read_checkpoint and load_checkpoint call it (after refusing a trainer state whose JSON has
// values of the wrong kind).
void validate_checkpoint_info(const CheckpointInfo& info);

// "step-000000123.ckpt": names sort by step; the file must hold that step (above).
std::string checkpoint_filename(int64_t step);
// The step a checkpoint file name encodes (the directory part of a path is ignored); nullopt for
// any other name, temporaries included.
std::optional<int64_t> checkpoint_filename_step(const std::string& path);
// Checkpoints in `dir` named as above (temporaries ignored), newest (highest step) first.
std::vector<std::string> list_checkpoints(const std::string& dir);

struct CheckpointChoice {
  std::string path;
  // One line per newer checkpoint that was refused:
  // "checkpoint '<path>': checksum mismatch (...): the file is corrupted".
  std::vector<std::string> refused;
};
// The newest checkpoint in `dir` that read_checkpoint accepts — and, with a non-empty
// `config_hash`, that was written with that config hash: another run's checkpoint is refused
// ("written by another run") like an invalid one. nullopt if none is accepted (the refusals are
// then lost, so callers wanting them pass `refused`).
std::optional<CheckpointChoice> latest_valid_checkpoint(const std::string& dir);
std::optional<CheckpointChoice> latest_valid_checkpoint(const std::string& dir,
                                                        std::vector<std::string>* refused);
std::optional<CheckpointChoice> latest_valid_checkpoint(const std::string& dir,
                                                        const std::string& config_hash,
                                                        std::vector<std::string>* refused);

// Keeps the newest `keep_last` checkpoints that latest_valid_checkpoint(dir, config_hash) would
// accept and deletes the accepted ones older than those (keep_last <= 0 keeps all); deletes the
// temporaries of writers that no longer run. A checkpoint it does not accept (corrupted, misnamed,
// another run's) is never deleted and does not count toward keep_last: it is left, with its
// reason in *left. So pruning never changes which checkpoint a resume picks. It reads (verifies)
// every checkpoint in `dir`. Returns the deleted paths.
std::vector<std::string> prune_checkpoints(const std::string& dir, int64_t keep_last);
std::vector<std::string> prune_checkpoints(const std::string& dir, int64_t keep_last,
                                           const std::string& config_hash,
                                           std::vector<std::string>* left);

}  // namespace mantissa::runner
