// Progress on stderr while training: on a terminal (isatty(stderr)) a one-line bar redrawn at
// most ten times a second with step, loss, rate and ETA; otherwise (a file, a CI log) one plain
// line every `plain_every_s` seconds and at the end, so logs do not fill with redraws.
#pragma once

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>

#include "runner/training/trainer.h"

namespace mantissa::runner {

class ProgressBar : public Callback {
 public:
  // tty: nullopt detects it from stderr.
  explicit ProgressBar(std::optional<bool> tty = std::nullopt, double plain_every_s = 10.0,
                       std::FILE* out = stderr);
  void on_train_begin(Trainer& trainer) override;
  void on_batch_end(Trainer& trainer) override;
  void on_eval(Trainer& trainer, const EvalMetrics& m) override;
  void on_train_end(Trainer& trainer, const TrainSummary& s) override;

 private:
  using Clock = std::chrono::steady_clock;
  void draw(Trainer& trainer, bool final);

  bool tty_;
  double plain_every_s_;
  std::FILE* out_;
  Clock::time_point start_;
  Clock::time_point last_draw_;
  int64_t start_step_ = 0;
  bool drawn_ = false;
};

// "1m05s", "2h03m", "12.3s".
std::string format_duration(double seconds);

}  // namespace mantissa::runner
