#include "runner/training/checkpoint.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "amp/grad_scaler.h"
#include "autograd/node.h"
#include "distributed/zero.h"
#include "engine/generator.h"
#include "nn/float8.h"
#include "nn/module.h"
#include "nn/optim/lr_scheduler.h"
#include "nn/optim/optimizer.h"
#include "runner/config/config.h"
#include "runner/files/atomic_file.h"
#include "runner/files/hash.h"
#include "runner/files/text.h"
#include "runner/training/checkpoint_json.h"

namespace mantissa::runner {
namespace {

namespace fs = std::filesystem;

constexpr const char* kMetaKey = "mantissa.checkpoint";
constexpr const char* kChecksumKey = "mantissa.checksum";
// Written as 16 '0's, hashed, then overwritten in place: the checksum covers every other byte of
// the file (header, metadata, data), so any flipped byte is caught.
constexpr size_t kChecksumDigits = 16;

// Where the checksum's digits sit in the file: inside the header, after the key. The key's
// quotes cannot occur unescaped inside another JSON string, so this finds the real entry.
size_t checksum_position(std::string_view bytes, size_t header_end) {
  const std::string needle = std::string("\"") + kChecksumKey + "\":\"";
  const size_t at = bytes.substr(0, header_end).find(needle);
  if (at == std::string_view::npos) return std::string_view::npos;
  const size_t pos = at + needle.size();
  return pos + kChecksumDigits <= header_end ? pos : std::string_view::npos;
}

// FNV-1a 64 over the file with the checksum digits read as '0's, without copying the file; as
// kChecksumDigits hex digits.
std::string file_checksum(std::string_view bytes, size_t pos) {
  return Fnv1a64()
      .add(bytes.substr(0, pos))
      .add(std::string(kChecksumDigits, '0'))
      .add(bytes.substr(pos + kChecksumDigits))
      .hex();
}

Json shape_json(const Shape& s) {
  Json a = Json::array();
  for (const int64_t d : s) a.push_back(d);
  return a;
}

// uint64 values (seeds, Philox offsets) as decimal strings: JSON integers here are int64.
std::string u64_str(uint64_t v) { return std::to_string(v); }
uint64_t parse_u64(JsonView v, const std::string& what) {
  const std::string& s = v.as_string();
  uint64_t out = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  MT_CHECK(ec == std::errc() && end == s.data() + s.size() && !s.empty(), what,
           ": expected an unsigned integer, got '", s, "'");
  return out;
}

Json optimizer_json(const optim::Optimizer& opt, const optim::OptimizerState& st) {
  Json j;
  j["name"] = opt.name();
  j["master_weights"] = opt.master_weights();
  if (opt.state_dtype()) j["state_dtype"] = std::string(dtype_name(*opt.state_dtype()));
  if (opt.stochastic_rounding()) {
    j["stochastic_rounding"] = true;
    j["stochastic_rounding_seed"] = std::to_string(opt.stochastic_rounding_seed());
  }
  Json groups = Json::array();
  for (const auto& g : st.param_groups) {
    Json gj;
    Json options = Json::object();
    for (const auto& [k, v] : g.options) options[k] = v;
    gj["options"] = std::move(options);
    Json ids = Json::array();
    for (const int64_t id : g.params) ids.push_back(id);
    gj["params"] = std::move(ids);
    groups.push_back(std::move(gj));
  }
  j["param_groups"] = std::move(groups);
  Json state = Json::array();
  for (const auto& [id, s] : st.state) {
    Json sj;
    sj["id"] = id;
    sj["step"] = s.step;
    Json names = Json::array();
    for (const auto& [name, _] : s.buffers) names.push_back(name);
    sj["buffers"] = std::move(names);
    state.push_back(std::move(sj));
  }
  j["state"] = std::move(state);
  return j;
}

std::string optim_tensor_name(int64_t id, const std::string& buffer) {
  return "optim." + std::to_string(id) + "." + buffer;
}

std::string float8_tensor_name(const std::string& layer, const char* what) {
  return "float8." + layer + "." + what;
}

// The saved delayed-scaling state of each of the model's delayed float8 layers (history, scale),
// checked against the layers': every layer's, no other, of the same shapes.
std::vector<std::pair<nn::LinearImpl*, std::pair<Tensor, Tensor>>> float8_state(
    const std::string& what, JsonView meta, const SafetensorsFile& file, nn::Module& model) {
  std::vector<std::pair<nn::LinearImpl*, std::pair<Tensor, Tensor>>> out;
  const auto delayed = nn::float8_delayed_layers(model);
  const std::optional<JsonView> f = meta.find("float8");
  if (delayed.empty()) {
    MT_CHECK(!f || f->is_null(), what,
             " holds delayed float8 scaling state, but no layer of the model has delayed scaling");
    return out;
  }
  MT_CHECK(f && !f->is_null(), what, " has no delayed float8 scaling state, but the model has ",
           delayed.size(), " layer(s) with delayed scaling");
  std::set<std::string> saved;
  for (const JsonView n : f->at("layers").elements()) saved.insert(n.as_string());
  for (const auto& [name, layer] : delayed) {
    MT_CHECK(saved.erase(name) == 1, what, ": no delayed float8 scaling state for layer '", name,
             "'");
    const Tensor* h = file.find(float8_tensor_name(name, "amax_history"));
    const Tensor* sc = file.find(float8_tensor_name(name, "scale"));
    MT_CHECK(h != nullptr && sc != nullptr, what, ": float8 tensors of layer '", name,
             "' are missing");
    for (const auto& [got, want] :
         {std::pair{h, &layer->float8_amax_history}, std::pair{sc, &layer->float8_scale}}) {
      MT_CHECK(got->shape() == want->shape() && got->dtype() == want->dtype(), what,
               ": float8 state of layer '", name, "' has shape ", shape_str(got->shape()), " (",
               got->dtype(), ") but the layer's is ", shape_str(want->shape()), " (", want->dtype(),
               ")");
    }
    // Values no writer stores: a scale of 0 or NaN would make the layer's outputs NaN.
    for (const float v : sc->to_vector<float>())
      MT_CHECK(std::isfinite(v) && v > 0, what, ": float8 scale of layer '", name, "' is ", v,
               " (scales are finite and > 0)");
    for (const float v : h->to_vector<float>())
      MT_CHECK(v >= 0, what, ": float8 amax history of layer '", name, "' holds ", v,
               " (maxima are >= 0)");
    out.push_back({layer, {*h, *sc}});
  }
  MT_CHECK(saved.empty(), what, ": delayed float8 scaling state for layer '",
           saved.empty() ? "" : *saved.begin(), "', which the model does not scale that way");
  return out;
}

// The parsed, checksum-verified file.
struct Loaded {
  SafetensorsFile file;
  Json meta;
};

Loaded read_verified(const std::string& path) {
  const std::string what = "checkpoint '" + path + "'";
  const std::string bytes = read_file_bytes(path);
  Loaded out;
  out.file = parse_safetensors(bytes, what);
  const auto& md = out.file.metadata;
  auto format = md.find("format");
  MT_CHECK(format != md.end() && format->second == kCheckpointFormat, what,
           ": not a mantissa checkpoint (metadata 'format' is ",
           format == md.end() ? std::string("missing") : "'" + format->second + "'",
           "; a plain weights file can be loaded with load_weights / init_from)");
  auto version = md.find("format_version");
  MT_CHECK(version != md.end(), what, ": no format_version in the metadata");
  MT_CHECK(version->second == std::to_string(kCheckpointFormatVersion), what,
           ": unsupported checkpoint format version '", version->second,
           "' (this build reads version ", kCheckpointFormatVersion, ")");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  const size_t pos = checksum_position(bytes, static_cast<size_t>(8 + n));
  auto stored = md.find(kChecksumKey);
  MT_CHECK(pos != std::string_view::npos && stored != md.end() &&
               stored->second.size() == kChecksumDigits,
           what, ": no checksum in the metadata (corrupted)");
  const std::string computed = file_checksum(bytes, pos);
  MT_CHECK(computed == stored->second, what, ": checksum mismatch (stored ", stored->second,
           ", computed ", computed, "): the file is corrupted");
  auto meta = md.find(kMetaKey);
  MT_CHECK(meta != md.end(), what, ": no '", kMetaKey, "' entry in the metadata");
  out.meta = json::parse(meta->second, what + " metadata");
  MT_CHECK(out.meta.is_object(), what, ": metadata '", kMetaKey, "' is not a JSON object");
  return out;
}

// Throws unless the model's state_dict has exactly the saved names, shapes and dtypes.
void check_model(const std::string& what, JsonView saved, const nn::Module& model) {
  const NamedTensors own = module_tensors(model);
  std::map<std::string, JsonView> by_name;
  for (const JsonView t : saved.elements()) by_name.emplace(t.at("name").as_string(), t);
  const std::string prefix = what + " does not match the model (" + model.type_name() + "): ";
  for (const auto& [name, t] : own) {
    auto it = by_name.find(name);
    MT_CHECK(it != by_name.end(), prefix, "'", name, "' is in the model but not in the checkpoint");
    std::vector<int64_t> dims;
    for (const JsonView d : it->second.at("shape").elements()) dims.push_back(d.as_int());
    MT_CHECK(Shape(dims) == t.shape(), prefix, "'", name, "' has shape ", shape_str(Shape(dims)),
             " in the checkpoint but ", shape_str(t.shape()), " in the model");
    const std::string dtype = it->second.at("dtype").as_string();
    MT_CHECK(dtype == dtype_name(t.dtype()), prefix, "'", name, "' has dtype ", dtype,
             " in the checkpoint but ", t.dtype(), " in the model");
    by_name.erase(it);
  }
  MT_CHECK(by_name.empty(), prefix, "'", by_name.empty() ? "" : by_name.begin()->first,
           "' is in the checkpoint but not in the model");
}

optim::OptimizerState optimizer_state(const std::string& what, JsonView j,
                                      const SafetensorsFile& file, const optim::Optimizer& opt) {
  MT_CHECK(j.at("name").as_string() == opt.name(), what, " holds ", j.at("name").as_string(),
           " optimizer state but the optimizer is ", opt.name());
  optim::OptimizerState st;
  std::vector<const Tensor*> params;
  const JsonView groups = j.at("param_groups");
  MT_CHECK(groups.is_array(), what, ": param_groups is not an array");
  MT_CHECK(groups.size() == opt.param_groups().size(), what, " has ", groups.size(),
           " optimizer parameter group(s) but the optimizer has ", opt.param_groups().size());
  for (size_t g = 0; g < groups.size(); ++g) {
    optim::OptimizerState::Group group;
    for (const auto& [k, v] : groups[g].at("options").members()) group.options[k] = v.as_double();
    for (const JsonView id : groups[g].at("params").elements()) group.params.push_back(id.as_int());
    MT_CHECK(group.params.size() == opt.param_groups()[g].params.size(), what,
             ": optimizer parameter group ", g, " has ", group.params.size(),
             " parameters in the checkpoint but ", opt.param_groups()[g].params.size(),
             " in the optimizer");
    for (const Tensor& p : opt.param_groups()[g].params) params.push_back(&p);
    st.param_groups.push_back(std::move(group));
  }
  for (const JsonView sj : j.at("state").elements()) {
    const int64_t id = sj.at("id").as_int();
    MT_CHECK(id >= 0 && id < static_cast<int64_t>(params.size()), what,
             ": optimizer state for parameter id ", id, ", but the optimizer has ", params.size(),
             " parameters");
    optim::ParamState ps;
    ps.step = sj.at("step").as_int();
    for (const JsonView b : sj.at("buffers").elements()) {
      const std::string name = optim_tensor_name(id, b.as_string());
      const Tensor* t = file.find(name);
      MT_CHECK(t != nullptr, what, ": optimizer tensor '", name, "' is missing");
      MT_CHECK(t->shape() == params[id]->shape(), what, ": optimizer tensor '", name,
               "' has shape ", shape_str(t->shape()), " but the parameter has ",
               shape_str(params[id]->shape()));
      ps.buffers.emplace(b.as_string(), *t);
    }
    st.state.emplace(id, std::move(ps));
  }
  return st;
}

amp::GradScalerState scaler_state(JsonView j) {
  amp::GradScalerState s;
  s.scale = j.at("scale").as_double();
  s.growth_factor = j.at("growth_factor").as_double();
  s.backoff_factor = j.at("backoff_factor").as_double();
  s.growth_interval = j.at("growth_interval").as_int();
  s.growth_tracker = j.at("growth_tracker").as_int();
  s.min_scale = j.at("min_scale").as_double();
  s.hysteresis = j.at("hysteresis").as_int();
  s.overflow_streak = j.at("overflow_streak").as_int();
  s.steps_taken = j.at("steps_taken").as_int();
  s.steps_skipped = j.at("steps_skipped").as_int();
  return s;
}

std::vector<double> doubles(JsonView j) {
  std::vector<double> out;
  for (const JsonView v : j.elements()) out.push_back(v.as_double());
  return out;
}

Json scheduler_json(const optim::SchedulerState& s) {
  Json j;
  j["last_epoch"] = s.last_epoch;
  Json base = Json::array(), last = Json::array();
  for (const double v : s.base_lrs) base.push_back(v);
  for (const double v : s.last_lr) last.push_back(v);
  j["base_lrs"] = std::move(base);
  j["last_lr"] = std::move(last);
  if (!s.extra.empty()) {
    Json extra = Json::object();
    for (const auto& [key, v] : s.extra) extra[key] = v;  // NaN is written as null
    j["extra"] = std::move(extra);
  }
  if (!s.children.empty()) {
    Json children = Json::array();
    for (const auto& c : s.children) children.push_back(scheduler_json(c));
    j["children"] = std::move(children);
  }
  return j;
}

optim::SchedulerState scheduler_state(JsonView j) {
  optim::SchedulerState s{j.at("last_epoch").as_int(), doubles(j.at("base_lrs")),
                          doubles(j.at("last_lr"))};
  if (const std::optional<JsonView> extra = j.find("extra")) {
    for (const auto& [key, v] : extra->members()) s.extra[key] = v.as_double();
  }
  if (const std::optional<JsonView> children = j.find("children")) {
    for (const JsonView c : children->elements()) s.children.push_back(scheduler_state(c));
  }
  return s;
}

}  // namespace

void save_checkpoint(const std::string& path, const CheckpointParts& parts) {
  MT_CHECK(parts.model != nullptr, "save_checkpoint('", path, "'): no model given");
  if (const std::optional<int64_t> named = checkpoint_filename_step(path)) {
    // What read_checkpoint will require of the file (validate_checkpoint_info).
    const std::optional<TrainerState>& state = parts.trainer_state;
    MT_CHECK(state && state->step == *named, "save_checkpoint('", path, "'): the name says step ",
             *named, " but ",
             state ? "trainer_state.step is " + std::to_string(state->step)
                   : std::string("there is no trainer_state"));
  }
  NamedTensors tensors;
  Json meta;
  meta["format"] = kCheckpointFormat;
  meta["format_version"] = kCheckpointFormatVersion;
  meta["created"] = utc_now("%Y-%m-%dT%H:%M:%SZ");
  // Every checkpoint records a config hash (readers refuse an empty one); a checkpoint of a
  // model trained without a config records the hash of its (empty) config text.
  meta["config_hash"] =
      parts.config_hash.empty() ? config_hash(parts.config_text) : parts.config_hash;
  Json model;
  model["type"] = parts.model->type_name();
  Json sig = Json::array();
  for (const auto& [name, t] : module_tensors(*parts.model)) {
    Json e;
    e["name"] = name;
    e["shape"] = shape_json(t.shape());
    e["dtype"] = std::string(dtype_name(t.dtype()));
    sig.push_back(std::move(e));
    tensors.emplace_back("model." + name, t);
  }
  model["tensors"] = std::move(sig);
  meta["model"] = std::move(model);
  // Delayed float8 scaling's per-layer state (absent when no layer has it).
  if (const auto delayed = nn::float8_delayed_layers(*parts.model); !delayed.empty()) {
    Json names = Json::array();
    for (const auto& [name, layer] : delayed) {
      names.push_back(name);
      tensors.emplace_back(float8_tensor_name(name, "amax_history"), layer->float8_amax_history);
      tensors.emplace_back(float8_tensor_name(name, "scale"), layer->float8_scale);
    }
    Json f;
    f["layers"] = std::move(names);
    meta["float8"] = std::move(f);
  }

  if (parts.optimizer) {
    const optim::OptimizerState st =
        parts.zero ? parts.zero->consolidated_state_dict() : parts.optimizer->state_dict();
    meta["optimizer"] = optimizer_json(*parts.optimizer, st);
    for (const auto& [id, s] : st.state)
      for (const auto& [name, t] : s.buffers) tensors.emplace_back(optim_tensor_name(id, name), t);
  } else {
    meta["optimizer"] = nullptr;
  }
  if (parts.scaler && !parts.scaler->is_enabled()) {
    Json j;
    j["enabled"] = false;  // a disabled scaler has no state (as in PyTorch)
    meta["scaler"] = std::move(j);
  } else if (parts.scaler) {
    const amp::GradScalerState s = *parts.scaler->state_dict();
    Json j;
    j["enabled"] = true;
    j["scale"] = s.scale;
    j["growth_factor"] = s.growth_factor;
    j["backoff_factor"] = s.backoff_factor;
    j["growth_interval"] = s.growth_interval;
    j["growth_tracker"] = s.growth_tracker;
    j["min_scale"] = s.min_scale;
    j["hysteresis"] = s.hysteresis;
    j["overflow_streak"] = s.overflow_streak;
    j["steps_taken"] = s.steps_taken;
    j["steps_skipped"] = s.steps_skipped;
    meta["scaler"] = std::move(j);
  } else {
    meta["scaler"] = nullptr;
  }
  if (parts.scheduler) {
    meta["scheduler"] = scheduler_json(parts.scheduler->state_dict());
  } else {
    meta["scheduler"] = nullptr;
  }
  if (parts.rng) {
    Json rng = Json::array();
    for (const GeneratorState& g : get_rng_states()) {
      Json j;
      j["device"] = g.device.str();
      j["seed"] = u64_str(g.seed);
      j["offset"] = u64_str(g.offset);
      rng.push_back(std::move(j));
    }
    meta["rng"] = std::move(rng);
  } else {
    meta["rng"] = nullptr;
  }
  meta["trainer_state"] = trainer_state_json(parts.trainer_state);
  meta["config_text"] = parts.config_text;

  std::map<std::string, std::string> md;
  md["format"] = kCheckpointFormat;
  md["format_version"] = std::to_string(kCheckpointFormatVersion);
  md[kMetaKey] = json::dump(meta);
  md[kChecksumKey] = std::string(kChecksumDigits, '0');
  std::string bytes = serialize_safetensors(tensors, md);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  const size_t pos = checksum_position(bytes, static_cast<size_t>(8 + n));
  MT_ASSERT(pos != std::string::npos, "checksum placeholder not found in the header");
  bytes.replace(pos, kChecksumDigits, file_checksum(bytes, pos));
  write_file_atomically(path, bytes);
}

namespace {
// read_checkpoint, keeping the parsed file and its metadata for load_checkpoint.
CheckpointInfo read_info(const std::string& path, Loaded* keep) {
  Loaded l = read_verified(path);
  const std::string what = "checkpoint '" + path + "'";
  CheckpointInfo info;
  const JsonView meta(l.meta);
  const std::optional<JsonView> state = meta.find("trainer_state");
  MT_CHECK(state.has_value(), what, ": malformed checkpoint metadata: no trainer_state");
  info.trainer_state = trainer_state_from_json(what, *state);
  try {
    info.path = path;
    info.format_version = meta.at("format_version").as_int();
    info.created = meta.at("created").as_string();
    info.config_hash = meta.at("config_hash").as_string();
    info.config_text = meta.at("config_text").as_string();
    for (const JsonView t : meta.at("model").at("tensors").elements()) {
      const std::string name = t.at("name").as_string();
      info.weights.emplace_back(name, l.file.at("model." + name));
    }
  } catch (const Error& e) {
    MT_THROW(what, ": malformed checkpoint metadata: ", e.what());
  }
  validate_checkpoint_info(info);
  if (keep) *keep = std::move(l);
  return info;
}
}  // namespace

CheckpointInfo read_checkpoint(const std::string& path) { return read_info(path, nullptr); }

void load_checkpoint(const std::string& path, CheckpointParts& parts) {
  MT_CHECK(parts.model != nullptr, "load_checkpoint('", path, "'): no model given");
  const std::string what = "checkpoint '" + path + "'";
  Loaded loaded;
  CheckpointInfo info = read_info(path, &loaded);
  const JsonView meta(loaded.meta);
  const SafetensorsFile& file = loaded.file;

  // Everything is checked and decoded before anything is restored: a refused checkpoint leaves
  // the model, optimizer and the rest as they were.
  std::optional<optim::OptimizerState> opt_state;
  std::optional<amp::GradScalerState> scaler;
  std::optional<optim::SchedulerState> sched;
  std::vector<GeneratorState> rng;
  bool master_weights = false;
  std::optional<DType> state_dtype;
  bool stochastic_rounding = false;
  uint64_t sr_seed = 0;
  std::vector<std::pair<nn::LinearImpl*, std::pair<Tensor, Tensor>>> float8;
  try {
    check_model(what, meta.at("model").at("tensors"), *parts.model);
    float8 = float8_state(what, meta, file, *parts.model);
    if (parts.optimizer) {
      const JsonView j = meta.at("optimizer");
      MT_CHECK(!j.is_null(), what, " has no optimizer state, but an optimizer was given");
      opt_state =
          optimizer_state(what, j, file, parts.zero ? parts.zero->reference() : *parts.optimizer);
      master_weights = j.at("master_weights").as_bool();
      // Absent from checkpoints of runs without them.
      if (const auto d = j.find("state_dtype")) state_dtype = parse_dtype(d->as_string());
      if (const auto sr = j.find("stochastic_rounding")) {
        stochastic_rounding = sr->as_bool();
        sr_seed = parse_u64(j.at("stochastic_rounding_seed"), what + " stochastic rounding seed");
      }
    }
    if (parts.scaler) {
      const JsonView j = meta.at("scaler");
      MT_CHECK(!j.is_null(), what, " has no GradScaler state, but a GradScaler was given");
      MT_CHECK(j.at("enabled").as_bool() == parts.scaler->is_enabled(), what,
               ": the GradScaler was ", j.at("enabled").as_bool() ? "enabled" : "disabled",
               " when saved but is ", parts.scaler->is_enabled() ? "enabled" : "disabled", " now");
      if (parts.scaler->is_enabled()) scaler = scaler_state(j);
    }
    if (parts.scheduler) {
      const JsonView j = meta.at("scheduler");
      MT_CHECK(!j.is_null(), what, " has no LR scheduler state, but a scheduler was given");
      sched = scheduler_state(j);
      MT_CHECK(sched->base_lrs.size() == parts.scheduler->base_lrs().size(), what,
               ": the LR scheduler has ", sched->base_lrs.size(),
               " parameter group(s) in the checkpoint but ", parts.scheduler->base_lrs().size(),
               " now");
    }
    if (parts.rng && !meta.at("rng").is_null()) {
      for (const JsonView g : meta.at("rng").elements())
        rng.push_back({Device(g.at("device").as_string()),
                       parse_u64(g.at("seed"), what + " rng seed"),
                       parse_u64(g.at("offset"), what + " rng offset")});
    }
  } catch (const Error& e) {
    const std::string msg = e.what();
    if (msg.find(what) != std::string::npos) throw;
    MT_THROW(what, ": malformed checkpoint metadata: ", msg);
  }

  {
    nn::StateDict sd;
    for (const auto& [name, t] : info.weights) sd.insert(name, t);
    parts.model->load_state_dict(sd, /*strict=*/true);
  }
  if (!float8.empty()) {
    autograd::NoGradGuard no_grad;
    for (const auto& [layer, state] : float8) {
      layer->float8_amax_history.copy_(state.first);
      layer->float8_scale.copy_(state.second);
    }
  }
  if (opt_state) {
    parts.optimizer->set_master_weights(master_weights);
    parts.optimizer->set_state_dtype(state_dtype);
    parts.optimizer->set_stochastic_rounding(stochastic_rounding, sr_seed);
    if (parts.zero) {
      parts.zero->load_consolidated_state_dict(*opt_state);
    } else {
      parts.optimizer->load_state_dict(*opt_state);
    }
  }
  if (scaler) parts.scaler->load_state_dict(*scaler);
  if (sched) parts.scheduler->load_state_dict(*sched);
  if (!rng.empty()) set_rng_states(rng);
  parts.trainer_state = std::move(info.trainer_state);
  parts.config_hash = std::move(info.config_hash);
  parts.config_text = std::move(info.config_text);
}

std::string checkpoint_filename(int64_t step) {
  MT_CHECK(step >= 0, "checkpoint_filename: negative step ", step);
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step-%09lld.ckpt", static_cast<long long>(step));
  return buf;
}

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return {};
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::optional<int64_t> step = checkpoint_filename_step(entry.path().string());
    if (step && entry.is_regular_file(ec)) found.emplace_back(*step, entry.path().string());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second > b.second;
  });
  std::vector<std::string> out;
  for (auto& [_, p] : found) out.push_back(std::move(p));
  return out;
}

namespace {
// read_checkpoint, and with a non-empty config_hash the file must have been written with it.
void accept_checkpoint(const std::string& path, const std::string& config_hash) {
  const CheckpointInfo info = read_checkpoint(path);
  MT_CHECK(config_hash.empty() || info.config_hash == config_hash, "checkpoint '", path,
           "': written by another run (config hash ", info.config_hash, "; this run's is ",
           config_hash, ")");
}
}  // namespace

std::optional<CheckpointChoice> latest_valid_checkpoint(const std::string& dir,
                                                        const std::string& config_hash,
                                                        std::vector<std::string>* refused) {
  std::vector<std::string> reasons;
  for (const std::string& path : list_checkpoints(dir)) {
    try {
      accept_checkpoint(path, config_hash);
      if (refused) *refused = reasons;
      return CheckpointChoice{path, std::move(reasons)};
    } catch (const Error& e) {
      reasons.emplace_back(e.what());
    }
  }
  if (refused) *refused = std::move(reasons);
  return std::nullopt;
}

std::optional<CheckpointChoice> latest_valid_checkpoint(const std::string& dir,
                                                        std::vector<std::string>* refused) {
  return latest_valid_checkpoint(dir, "", refused);
}

std::optional<CheckpointChoice> latest_valid_checkpoint(const std::string& dir) {
  return latest_valid_checkpoint(dir, "", nullptr);
}

std::vector<std::string> prune_checkpoints(const std::string& dir, int64_t keep_last) {
  return prune_checkpoints(dir, keep_last, "", nullptr);
}

std::vector<std::string> prune_checkpoints(const std::string& dir, int64_t keep_last,
                                           const std::string& config_hash,
                                           std::vector<std::string>* left) {
  std::vector<std::string> deleted, reasons;
  if (keep_last > 0) {
    // Only checkpoints a resume could pick count and are deleted; an accepted file holds the step
    // its name says, so the listing's order is the order of the steps stored inside.
    int64_t kept = 0;
    for (const std::string& path : list_checkpoints(dir)) {
      try {
        accept_checkpoint(path, config_hash);
      } catch (const Error& e) {
        reasons.emplace_back(e.what());
        continue;
      }
      if (kept < keep_last) {
        ++kept;
        continue;
      }
      std::error_code ec;
      if (fs::remove(path, ec)) deleted.push_back(path);
    }
  }
  if (left) *left = std::move(reasons);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return deleted;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!is_atomic_temp_name(name)) continue;
    // Only temporaries of processes that no longer exist: a live writer's file is not stale.
    const size_t at = name.rfind(".tmp-");
    const std::string pid = name.substr(at + 5);
    const bool alive = !pid.empty() && fs::exists("/proc/" + pid, ec);
    std::error_code rm;
    if (!alive && fs::remove(entry.path(), rm)) deleted.push_back(entry.path().string());
  }
  return deleted;
}

}  // namespace mantissa::runner
