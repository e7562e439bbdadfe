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
// a checksum mismatch (corruption), another format or format version, and a model (or
// optimizer) that differs from the one saved, naming the first parameter that differs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runner/json.h"
#include "runner/safetensors.h"

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
  amp::GradScaler* scaler = nullptr;
  optim::LRScheduler* scheduler = nullptr;
  Json trainer_state;  // opaque to this file: saved as is, and filled in by load_checkpoint
  std::string config_hash;
  std::string config_text;
  bool rng = true;  // save / restore the generator state of every device
};

// Writes a checkpoint of `parts` (and, with parts.rng, every device's generator) atomically.
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
  Json trainer_state;
  std::string config_hash;
  std::string config_text;
  Json meta;             // the whole "mantissa.checkpoint" JSON (model signature, optimizer, ...)
  NamedTensors weights;  // the model's state_dict, names without the "model." prefix
};
// Validates structure, checksum, format and version; throws as load_checkpoint would.
CheckpointInfo read_checkpoint(const std::string& path);

// "step-000000123.ckpt": names sort by step; latest_valid_checkpoint and prune rely on it.
std::string checkpoint_filename(int64_t step);
// Checkpoints in `dir` named as above (temporaries ignored), newest (highest step) first.
std::vector<std::string> list_checkpoints(const std::string& dir);

struct CheckpointChoice {
  std::string path;
  // One line per newer checkpoint that was refused:
  // "<path>: checksum mismatch (file is corrupted)".
  std::vector<std::string> refused;
};
// The newest checkpoint in `dir` that read_checkpoint accepts; nullopt if none does (the refusals
// are then lost, so callers wanting them use the overload below).
std::optional<CheckpointChoice> latest_valid_checkpoint(const std::string& dir);
std::optional<CheckpointChoice> latest_valid_checkpoint(const std::string& dir,
                                                        std::vector<std::string>* refused);

// Deletes all but the newest `keep_last` checkpoints (keep_last <= 0 keeps all) and stale
// temporaries left by killed writers. Returns the deleted paths.
std::vector<std::string> prune_checkpoints(const std::string& dir, int64_t keep_last);

}  // namespace mantissa::runner
