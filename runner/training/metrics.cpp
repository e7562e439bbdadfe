// metrics.jsonl and train.log writers.
#include "runner/training/metrics.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <vector>

#include "engine/error.h"
#include "runner/files/atomic_file.h"
#include "runner/files/text.h"
#include "runner/training/metrics_json.h"

namespace mantissa::runner {

using json::number_or_null;

Json step_metrics_json(const StepMetrics& m) {
  Json j = Json::object();
  j["step"] = m.step;
  j["epoch"] = m.epoch;
  j["loss"] = number_or_null(m.loss);
  j["lr"] = m.lr;
  j["loss_scale"] = m.loss_scale;
  j["skipped"] = m.skipped;
  j["skipped_total"] = m.skipped_total;
  j["grad_norm"] = number_or_null(m.grad_norm);
  j["samples_per_s"] = m.samples_per_s;
  j["step_time_ms"] = m.step_time_ms;
  if (m.tokens_per_s > 0) j["tokens_per_s"] = m.tokens_per_s;
  if (m.mfu) j["mfu"] = *m.mfu;
  if (m.bytes_per_parameter > 0) j["bytes_per_parameter"] = m.bytes_per_parameter;
  if (!m.float8.empty()) {
    Json layers = Json::object();
    for (const nn::Float8LayerStats& l : m.float8) {
      Json tensors = Json::object();
      for (int r = 0; r < 3; ++r) {
        const nn::Float8TensorStats& t = l.tensors[r];
        Json tj = Json::object();
        tj["amax"] = number_or_null(t.amax);
        if (t.scale > 0) tj["scale"] = t.scale;
        tj["saturated"] = t.saturated;
        tj["flushed"] = t.flushed;
        tensors[nn::kFloat8TensorNames[r]] = std::move(tj);
      }
      layers[l.layer] = std::move(tensors);
    }
    j["float8"] = std::move(layers);
  }
  return j;
}

Json float8_saturation_json(const Float8Saturation& s) {
  Json j = Json::object();
  j["step"] = s.step;
  j["layer"] = s.layer;
  j["tensor"] = s.tensor;
  j["values"] = s.values;
  return j;
}

Json eval_metrics_json(const EvalMetrics& m) {
  Json j = Json::object();
  j["step"] = m.step;
  j["epoch"] = m.epoch;
  j["loss"] = number_or_null(m.loss);
  if (m.accuracy) j["accuracy"] = *m.accuracy;
  j["samples"] = m.samples;
  return j;
}

Json summary_json(const TrainSummary& s) {
  Json j = Json::object();
  j["final_loss"] = number_or_null(s.final_loss);
  j["best_loss"] = number_or_null(s.best_loss);
  if (s.final_eval) j["final_eval"] = eval_metrics_json(*s.final_eval);
  j["steps"] = s.steps;
  j["total_steps"] = s.total_steps;
  j["completed"] = s.completed();
  j["steps_skipped"] = s.steps_skipped;
  j["epochs"] = s.epochs;
  j["resumed_from_step"] = s.resumed_from_step;
  j["wall_time_s"] = s.wall_time_s;
  Json mem = Json::object();
  for (const auto& [device, bytes] : s.peak_memory_bytes) mem[device] = bytes;
  j["peak_memory_bytes"] = mem;
  Json state = Json::object();
  state["parameters"] = s.memory.parameters;
  state["weight_bytes"] = s.memory.weight_bytes;
  state["gradient_bytes"] = s.memory.gradient_bytes;
  state["optimizer_state_bytes"] = s.memory.optimizer_state_bytes;
  state["bytes_per_parameter"] = number_or_null(s.memory.bytes_per_parameter());
  if (s.memory.activation_bytes) state["activation_bytes"] = *s.memory.activation_bytes;
  j["training_memory"] = state;
  if (!s.float8_layers.empty()) {
    Json layers = Json::array();
    for (const auto& name : s.float8_layers) layers.push_back(name);
    j["float8_layers"] = layers;
  }
  if (s.float8_first_saturation)
    j["float8_first_saturation"] = float8_saturation_json(*s.float8_first_saturation);
  if (s.graphed_steps) {
    Json g = Json::object();
    g["graphed_steps"] = *s.graphed_steps;
    g["eager_steps"] = s.eager_steps;
    if (s.graph_fallback.empty()) {
      g["fallback"] = nullptr;
    } else {
      g["fallback"] = s.graph_fallback;
    }
    j["cuda_graphs"] = g;
  }
  return j;
}

namespace {

std::string number(double v, int precision = 6) {
  if (std::isnan(v)) return "nan";
  std::ostringstream os;
  os << std::setprecision(precision) << v;
  return os.str();
}

// The step of a metrics record ({"step": ...} or {"eval": {"step": ...}}), or
// -1.
int64_t record_step(const std::string& line) {
  try {
    const Json parsed = json::parse(line);
    const JsonView j(parsed);
    if (const auto s = j.find("step")) return s->as_int();
    if (const auto e = j.find("eval"))
      if (const auto s = e->find("step")) return s->as_int();
  } catch (const Error&) {
    // A torn last line from a killed run: dropped.
  }
  return -1;
}

}  // namespace

std::string format_step(const StepMetrics& m, int64_t total_steps) {
  std::ostringstream os;
  os << "step " << m.step << "/" << total_steps << "  epoch " << m.epoch << "  loss "
     << number(m.loss) << "  lr " << number(m.lr, 4) << "  scale " << number(m.loss_scale);
  if (!std::isnan(m.grad_norm)) os << "  grad_norm " << number(m.grad_norm, 4);
  os << "  " << number(m.samples_per_s, 4) << " samples/s  " << number(m.step_time_ms, 4)
     << " ms/step";
  if (m.tokens_per_s > 0) os << "  " << number(m.tokens_per_s, 4) << " tokens/s";
  if (m.mfu) os << "  mfu " << number(100.0 * *m.mfu, 3) << "%";
  if (m.skipped) os << "  (step skipped: inf/nan gradients)";
  int64_t saturated = 0;
  for (const nn::Float8LayerStats& l : m.float8)
    for (const nn::Float8TensorStats& t : l.tensors) saturated += t.saturated;
  if (saturated > 0) os << "  float8 saturated " << saturated;
  if (m.diverging && m.float8_first_saturation) {
    const Float8Saturation& f = *m.float8_first_saturation;
    os << "  (float8: layer '" << f.layer << "' saturated first, its " << f.tensor << " ("
       << f.values << " values) by step " << f.step << ")";
  }
  return os.str();
}

std::string format_eval(const EvalMetrics& m) {
  std::ostringstream os;
  os << "eval at step " << m.step << ": loss " << number(m.loss);
  if (m.accuracy) os << "  accuracy " << number(*m.accuracy * 100.0, 4) << "%";
  os << "  (" << m.samples << " samples)";
  return os.str();
}

MetricsJsonlWriter::MetricsJsonlWriter(std::string path) : path_(std::move(path)) {}

int64_t last_metrics_step(const std::string& path) {
  int64_t last = -1;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return last;
  std::istringstream in(read_file_bytes(path));
  std::string line;
  while (std::getline(in, line)) last = std::max(last, record_step(line));
  return last;
}

void keep_metrics_through_step(const std::string& path, int64_t step) {
  std::string kept;
  if (step > 0 && std::filesystem::exists(path)) {
    std::istringstream in(read_file_bytes(path));
    std::string line;
    while (std::getline(in, line)) {
      const int64_t s = record_step(line);
      if (s >= 0 && s <= step) kept += line + '\n';
    }
  }
  // A new file renamed over the old one: a run killed (or out of disk) while this is written
  // leaves the whole old history, never a part of it.
  write_file_atomically(path, kept);
}

void MetricsJsonlWriter::on_train_begin(Trainer& trainer) {
  keep_metrics_through_step(path_, trainer.step());
  out_.open(path_, std::ios::out | std::ios::app);
  MT_CHECK(out_.good(), "metrics: cannot open '", path_, "' for writing");
}

void MetricsJsonlWriter::write_line(const std::string& record) {
  out_ << record << '\n';
  out_.flush();
  MT_CHECK(out_.good(), "metrics: error writing '", path_, "'");
}

void MetricsJsonlWriter::on_step_end(Trainer&, const StepMetrics& m) {
  write_line(json::dump(step_metrics_json(m)));
}

void MetricsJsonlWriter::on_eval(Trainer&, const EvalMetrics& m) {
  Json record = Json::object();
  record["eval"] = eval_metrics_json(m);
  write_line(json::dump(record));
}

HumanLog::HumanLog(std::string path, bool echo_stdout)
    : path_(std::move(path)), echo_(echo_stdout) {
  out_.open(path_, std::ios::out | std::ios::app);
  MT_CHECK(out_.good(), "log: cannot open '", path_, "' for writing");
}

void HumanLog::line(const std::string& text) {
  out_ << utc_now("%Y-%m-%d %H:%M:%S") << "  " << text << '\n';
  out_.flush();
  if (echo_) std::cout << text << std::endl;
}

void HumanLog::on_train_begin(Trainer& t) {
  const auto& o = t.options();
  std::ostringstream os;
  if (t.step() > 0)
    os << "resuming at step " << t.step() << " (epoch " << t.epoch() << "); ";
  else
    os << "training ";
  os << "to step " << t.total_steps() << " on " << o.device << ", precision " << o.precision.name()
     << ", loss scaling " << (t.scaler().is_enabled() ? "on" : "off") << ", "
     << t.train_loader().batches_per_epoch() << " batches/epoch of "
     << t.train_loader().options().batch_size << " from " << t.train_loader().dataset().describe();
  line(os.str());
}

void HumanLog::on_step_end(Trainer& t, const StepMetrics& m) {
  line(format_step(m, t.total_steps()));
}
void HumanLog::on_eval(Trainer&, const EvalMetrics& m) { line(format_eval(m)); }
void HumanLog::on_checkpoint(Trainer&, const std::string& path) { line("checkpoint " + path); }

void HumanLog::on_train_end(Trainer&, const TrainSummary& s) {
  std::ostringstream os;
  if (!s.completed()) os << "interrupted at step " << s.steps << " of " << s.total_steps << "; ";
  os << (s.completed() ? "done: " : "") << s.steps << " steps (" << s.steps_skipped
     << " skipped), final loss " << number(s.final_loss) << ", best loss " << number(s.best_loss)
     << ", " << number(s.wall_time_s, 4) << " s";
  if (s.graphed_steps) {
    os << "; CUDA graph: " << *s.graphed_steps << " steps replayed, " << s.eager_steps << " eager";
    if (!s.graph_fallback.empty()) os << " (" << s.graph_fallback << ")";
  }
  line(os.str());
}

}  // namespace mantissa::runner
