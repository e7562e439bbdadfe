// A Trainer's own state, as a checkpoint keeps it (runner/training/checkpoint.h: CheckpointParts).
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "runner/data/data.h"

namespace mantissa::runner {

// The first logged interval in which a float8 cast saturated (float8 stats, nn/float8.h), and
// where: the layer and its tensor with the most saturated values then.
struct Float8Saturation {
  int64_t step = 0;  // the logged step that ended the interval
  std::string layer;
  std::string tensor;  // input, weight or grad_output
  int64_t values = 0;
};

// A Trainer's own state: what, beside the model, optimizer, scaler, scheduler and generators, an
// exact resume needs (Trainer::trainer_state, Trainer::resume_from).
struct TrainerState {
  int64_t step = 0;  // optimizer steps done
  int64_t epoch = 0;
  LoaderPosition loader;      // the training loader's
  int64_t steps_skipped = 0;  // by the GradScaler (inf/NaN gradients)
  double best_loss = std::numeric_limits<double>::quiet_NaN();  // NaN: nothing logged yet
  double last_loss = std::numeric_limits<double>::quiet_NaN();
  // The loss accumulated since the last log, so the first record after a resume is the same.
  double pending_loss_sum = 0.0;
  int64_t pending_loss_count = 0;
  int64_t pending_samples = 0;
  double wall_time_s = 0.0;  // training time of every session so far
  std::string precision;     // amp::Precision's name
  uint64_t seed = 0;
  // Dataset::fingerprint() of the training data (empty: none), so a resume over changed data is
  // refused.
  std::string data_fingerprint;
  // Kept so that a resumed run's summary still names the first saturation (float8 stats).
  std::optional<Float8Saturation> float8_first_saturation;
};

}  // namespace mantissa::runner
