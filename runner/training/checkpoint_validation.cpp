// A checkpoint's trainer state in the file, and what read_checkpoint checks beyond the file's
// integrity: the checksum proves the bytes are the ones written, not that the values make sense —
// a file can be rewritten with a recomputed checksum, or a good file copied under another step's
// name. So a checkpoint must record a config hash, a trainer state's values must be of their kind
// and its counters in range, and a file named step-<N>.ckpt must hold step N. The rules are listed
// in docs/checkpoints.md ("Validation").
#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <string_view>

#include "nn/float8.h"
#include "runner/training/checkpoint.h"
#include "runner/training/checkpoint_json.h"
#include "runner/training/metrics_json.h"

namespace mantissa::runner {
namespace {

constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();

// A field of a trainer state's JSON object, read as its member's kind; a value of another kind is
// refused with the field's path and the value as written.
struct StateReader {
  const std::string& what;  // "checkpoint '<path>'"
  JsonView obj;
  std::string name;  // "trainer_state", "trainer_state.loader"

  std::optional<JsonView> find(const char* field, const char* kind,
                               bool (JsonView::*is)() const) const {
    const std::optional<JsonView> v = obj.find(field);
    if (v) {
      MT_CHECK(((*v).*is)(), what, ": ", name, ".", field, " is ", v->dump(), "; expected ", kind);
    }
    return v;
  }
  void read(const char* field, int64_t& out) const {
    if (const auto v = find(field, "an integer", &JsonView::is_int)) out = v->as_int();
  }
  // Seeds are written as int64 (two's complement above INT64_MAX); any integer that fits either
  // way reads back.
  void read(const char* field, uint64_t& out) const {
    if (const auto v = find(field, "an integer", &JsonView::is_int))
      out = v->as_double() < 0 ? static_cast<uint64_t>(v->as_int()) : v->as_uint();
  }
  // null (how NaN is written) reads as NaN.
  void read(const char* field, double& out) const {
    const std::optional<JsonView> v = obj.find(field);
    if (v && v->is_null()) {
      out = std::numeric_limits<double>::quiet_NaN();
      return;
    }
    if (find(field, "a number", &JsonView::is_number)) out = v->as_double();
  }
  void read(const char* field, std::string& out) const {
    if (const auto v = find(field, "a string", &JsonView::is_string)) out = v->as_string();
  }
  JsonView required(const char* field) const {
    const std::optional<JsonView> v = obj.find(field);
    MT_CHECK(v.has_value(), what, ": ", name, " has no ", field,
             " (expected the state a Trainer writes)");
    return *v;
  }
};

void check_range(const std::string& what, const std::string& field, int64_t value, int64_t lo,
                 int64_t hi, const std::string& range) {
  MT_CHECK(value >= lo && value <= hi, what, ": ", field, " is ", value, "; expected ", range);
}

std::string up_to(const char* bound, int64_t value) {
  return "an integer in [0, " + std::string(bound) + " = " + std::to_string(value) + "]";
}

}  // namespace

Json trainer_state_json(const std::optional<TrainerState>& state) {
  if (!state) return Json();
  const TrainerState& t = *state;
  Json loader = Json::object();
  loader["epoch"] = t.loader.epoch;
  loader["index"] = t.loader.index;
  // A seed above INT64_MAX is stored as its two's-complement int64 and read back the same way.
  loader["seed"] = static_cast<int64_t>(t.loader.seed);
  if (t.loader.num_replicas > 1) loader["num_replicas"] = t.loader.num_replicas;
  if (t.loader.offset > 0) loader["offset"] = t.loader.offset;
  if (t.loader.batch_size > 0) loader["batch_size"] = t.loader.batch_size;
  Json s = Json::object();
  s["step"] = t.step;
  s["epoch"] = t.epoch;
  s["loader"] = std::move(loader);
  s["steps_skipped"] = t.steps_skipped;
  s["best_loss"] = json::number_or_null(t.best_loss);
  s["last_loss"] = json::number_or_null(t.last_loss);
  s["pending_loss_sum"] = t.pending_loss_sum;
  s["pending_loss_count"] = t.pending_loss_count;
  s["pending_samples"] = t.pending_samples;
  s["wall_time_s"] = t.wall_time_s;
  s["precision"] = t.precision;
  s["seed"] = static_cast<int64_t>(t.seed);
  s["data_fingerprint"] = t.data_fingerprint;
  if (const std::optional<Float8Saturation>& f = t.float8_first_saturation)
    s["float8_first_saturation"] = float8_saturation_json(*f);
  return s;
}

std::optional<TrainerState> trainer_state_from_json(const std::string& what, JsonView j) {
  if (j.is_null()) return std::nullopt;
  MT_CHECK(j.is_object(), what, ": trainer_state is ", j.dump(), "; expected a JSON object");
  TrainerState t;
  const StateReader r{what, j, "trainer_state"};
  r.required("step");
  r.read("step", t.step);
  r.read("epoch", t.epoch);
  const JsonView loader = r.required("loader");
  MT_CHECK(loader.is_object(), what, ": trainer_state.loader is ", loader.dump(),
           "; expected a JSON object");
  const StateReader l{what, loader, "trainer_state.loader"};
  l.read("epoch", t.loader.epoch);
  l.read("index", t.loader.index);
  l.read("seed", t.loader.seed);
  l.read("num_replicas", t.loader.num_replicas);
  l.read("offset", t.loader.offset);
  l.read("batch_size", t.loader.batch_size);
  r.read("steps_skipped", t.steps_skipped);
  r.read("best_loss", t.best_loss);
  r.read("last_loss", t.last_loss);
  r.read("pending_loss_sum", t.pending_loss_sum);
  r.read("pending_loss_count", t.pending_loss_count);
  r.read("pending_samples", t.pending_samples);
  r.read("wall_time_s", t.wall_time_s);
  r.read("precision", t.precision);
  r.read("seed", t.seed);
  r.read("data_fingerprint", t.data_fingerprint);
  if (const std::optional<JsonView> first =
          r.find("float8_first_saturation", "a JSON object", &JsonView::is_object)) {
    const StateReader f{what, *first, "trainer_state.float8_first_saturation"};
    Float8Saturation s;
    for (const char* field : {"step", "layer", "tensor", "values"}) f.required(field);
    f.read("step", s.step);
    f.read("layer", s.layer);
    f.read("tensor", s.tensor);
    f.read("values", s.values);
    t.float8_first_saturation = std::move(s);
  }
  return t;
}

std::optional<int64_t> checkpoint_filename_step(const std::string& path) {
  // "step-<digits>.ckpt"
  const std::string filename = std::filesystem::path(path).filename().string();
  constexpr std::string_view pre = "step-", suf = ".ckpt";
  if (filename.size() <= pre.size() + suf.size() || !filename.starts_with(pre) ||
      !filename.ends_with(suf))
    return std::nullopt;
  const std::string_view digits(filename.data() + pre.size(),
                                filename.size() - pre.size() - suf.size());
  int64_t step = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (ec != std::errc() || end != digits.data() + digits.size() || step < 0) return std::nullopt;
  return step;
}

void validate_checkpoint_info(const CheckpointInfo& info) {
  const std::string what = "checkpoint '" + info.path + "'";
  MT_CHECK(!info.config_hash.empty(), what,
           ": config_hash is empty (every checkpoint records the hash of its config)");
  if (const std::optional<TrainerState>& s = info.trainer_state) {
    // step + 1 bounds the epoch and the loader's position: every epoch after the first begins
    // with a step, and every batch taken is a step.
    check_range(what, "trainer_state.step", s->step, 0, kMaxInt - 1, "an integer >= 0");
    const int64_t limit = s->step + 1;
    const std::string to_limit = up_to("step + 1", limit), to_step = up_to("step", s->step);
    check_range(what, "trainer_state.epoch", s->epoch, 0, limit, to_limit);
    check_range(what, "trainer_state.steps_skipped", s->steps_skipped, 0, s->step, to_step);
    check_range(what, "trainer_state.pending_loss_count", s->pending_loss_count, 0, s->step,
                to_step);
    check_range(what, "trainer_state.pending_samples", s->pending_samples, 0, kMaxInt,
                "an integer >= 0");
    MT_CHECK(s->wall_time_s >= 0.0, what, ": trainer_state.wall_time_s is ", s->wall_time_s,
             "; expected a number >= 0");
    check_range(what, "trainer_state.loader.epoch", s->loader.epoch, 0, limit, to_limit);
    check_range(what, "trainer_state.loader.index", s->loader.index, 0, limit, to_limit);
    check_range(what, "trainer_state.loader.num_replicas", s->loader.num_replicas, 1, kMaxInt,
                "an integer >= 1");
    check_range(what, "trainer_state.loader.offset", s->loader.offset, 0, kMaxInt,
                "an integer >= 0");
    check_range(what, "trainer_state.loader.batch_size", s->loader.batch_size, 0, kMaxInt,
                "an integer >= 0");
    if (const std::optional<Float8Saturation>& f = s->float8_first_saturation) {
      const std::string key = "trainer_state.float8_first_saturation";
      check_range(what, key + ".step", f->step, 1, s->step,
                  "an integer in [1, step = " + std::to_string(s->step) + "]");
      check_range(what, key + ".values", f->values, 1, kMaxInt, "an integer >= 1");
      MT_CHECK(!f->layer.empty(), what, ": ", key, ".layer is empty; expected a layer's name");
      MT_CHECK(
          std::ranges::find(nn::kFloat8TensorNames, f->tensor) != std::end(nn::kFloat8TensorNames),
          what, ": ", key, ".tensor is '", f->tensor, "'; expected input, weight or grad_output");
    }
    MT_CHECK(s->loader.epoch == s->epoch, what, ": trainer_state.loader.epoch is ", s->loader.epoch,
             " but trainer_state.epoch is ", s->epoch, "; expected them equal");
  }

  // The name is what list_checkpoints sorts by and prune_checkpoints goes by: a file named for
  // step N must hold step N, so a renamed copy cannot stand in for another step.
  if (const std::optional<int64_t> named = checkpoint_filename_step(info.path)) {
    MT_CHECK(info.trainer_state.has_value(), what, ": its name says step ", *named,
             " but it has no trainer state");
    const int64_t step = info.trainer_state->step;
    MT_CHECK(step == *named, what, ": its name says step ", *named,
             " but its trainer state holds step ", step, " (a renamed or misnamed file)");
  }
}

}  // namespace mantissa::runner
