// TensorBoard scalar logs. A run directory's tensorboard/ folder holds event files that
// `tensorboard --logdir RUN_DIR` (or a folder of runs) shows: per logged step train/loss,
// train/lr, train/loss_scale, train/grad_norm (with clipping), train/samples_per_s,
// train/step_time_ms, train/tokens_per_s and train/mfu (token models), and per evaluation
// eval/loss and eval/accuracy (classification).
//
// The files are TensorBoard's own format: TFRecord framing (a length, the data, each followed by
// its masked CRC-32C) around Event protocol buffers (runner/training/tensorboard_event.proto). Each
// training session writes a new file; when a run resumes from a checkpoint, the events of later
// steps (written by the session that was killed) are first removed from the older files, so the
// logs read as one run, as metrics.jsonl does. The resumed session's file also starts with
// TensorBoard's restart marker (SessionLog START), which makes a TensorBoard that is watching
// drop what it had already loaded from those steps.
//
//   trainer.add_callback(std::make_shared<runner::TensorBoardWriter>("runs/toy/tensorboard"));
//   // (the Trainer adds this one itself with a run_dir, unless TrainerOptions::tensorboard is off)
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "runner/training/trainer.h"

namespace mantissa::runner {

struct TensorBoardScalar {
  std::string tag;
  float value = 0;
};

// One event of a file, as TensorBoard reads it.
struct TensorBoardEvent {
  enum class Kind { FileVersion, Scalars, SessionStart, Other };
  Kind kind = Kind::Other;
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;                // Kind::FileVersion: "brain.Event:2"
  std::vector<TensorBoardScalar> scalars;  // Kind::Scalars
};

// The events in an event file's bytes, in order. Reading stops at a record that is cut short or
// fails its length's checksum (the tail of a killed run); a record whose data fails its checksum
// or is not an Event is skipped.
std::vector<TensorBoardEvent> parse_tensorboard_events(std::string_view bytes);

// parse_tensorboard_events of a file (runner/files/atomic_file.h's read_file_bytes: a regular
// file).
std::vector<TensorBoardEvent> read_tensorboard_events(const std::string& path);

// The event files in `dir` (names containing "tfevents", as TensorBoard finds them), sorted by
// name, which is the order TensorBoard reads them in; none when `dir` does not exist.
std::vector<std::string> tensorboard_event_files(const std::string& dir);

// Leaves in the event files of `dir` only the events of steps up to `step`, each file rewritten
// with write_file_atomically; step 0 removes the files.
void keep_tensorboard_events_through_step(const std::string& dir, int64_t step);

// CRC-32C (Castagnoli) of `bytes`, and TFRecord's masked form of a CRC.
uint32_t crc32c(std::string_view bytes);
uint32_t masked_crc32c(std::string_view bytes);

// Writes the scalars of each logged step and evaluation to a new event file in `dir`, flushed
// record by record (a killed run keeps what it logged).
class TensorBoardWriter : public Callback {
 public:
  explicit TensorBoardWriter(std::string dir);
  void on_train_begin(Trainer& trainer) override;
  void on_step_end(Trainer& trainer, const StepMetrics& m) override;
  void on_eval(Trainer& trainer, const EvalMetrics& m) override;
  // The file this session writes ("" before on_train_begin).
  const std::string& path() const { return path_; }

 private:
  void write_event(const std::string& payload);
  std::string dir_;
  std::string path_;
  std::ofstream out_;
};

}  // namespace mantissa::runner
