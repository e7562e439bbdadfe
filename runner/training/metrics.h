// Built-in trainer callbacks that write the run directory's records: metrics.jsonl (one JSON
// object per logged step, and {"eval": {...}} records) and the human-readable train.log.
#pragma once

#include <fstream>
#include <string>

#include "runner/training/trainer.h"

namespace mantissa::runner {

// Appends one compact JSON line per logged step and per evaluation, flushed as written (so a
// killed run keeps what it logged). When a resumed run begins, records from steps after the
// resume point (written by the run that was killed) are dropped first (keep_metrics_through_step),
// so the file reads as one uninterrupted run.
class MetricsJsonlWriter : public Callback {
 public:
  explicit MetricsJsonlWriter(std::string path);
  void on_train_begin(Trainer& trainer) override;
  void on_step_end(Trainer& trainer, const StepMetrics& m) override;
  void on_eval(Trainer& trainer, const EvalMetrics& m) override;
  const std::string& path() const { return path_; }

 private:
  void write_line(const std::string& record);  // one JSON object's compact text
  std::string path_;
  std::ofstream out_;
};

// Timestamped lines: the run's setup, each logged step, evaluations, checkpoints and the summary.
// Optionally echoed to stdout.
class HumanLog : public Callback {
 public:
  explicit HumanLog(std::string path, bool echo_stdout = false);
  void on_train_begin(Trainer& trainer) override;
  void on_step_end(Trainer& trainer, const StepMetrics& m) override;
  void on_eval(Trainer& trainer, const EvalMetrics& m) override;
  void on_checkpoint(Trainer& trainer, const std::string& path) override;
  void on_train_end(Trainer& trainer, const TrainSummary& s) override;
  // Writes one line (with a timestamp) now.
  void line(const std::string& text);

 private:
  std::string path_;
  bool echo_;
  std::ofstream out_;
};

// Leaves in the metrics file at `path` only the records of steps up to `step` (none for step 0),
// by writing a new file and renaming it over the old one.
void keep_metrics_through_step(const std::string& path, int64_t step);

// The highest step the metrics file at `path` records, or -1 when it records none (or is absent).
int64_t last_metrics_step(const std::string& path);

// "step 120/1000  loss 0.01234  lr 0.001  scale 65536  grad_norm 1.2  4.5k samples/s" and the
// like: the formatting shared by the log file, the progress lines and the CLI.
std::string format_step(const StepMetrics& m, int64_t total_steps);
std::string format_eval(const EvalMetrics& m);

}  // namespace mantissa::runner
