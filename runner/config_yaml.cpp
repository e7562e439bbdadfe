// Config -> YAML text (the run directory's resolved.yaml and the text stored in checkpoints).
// Written by hand rather than with YAML::Emitter so that doubles keep their shortest round-trip
// form (0.1, not 0.10000000000000001) and only the keys that apply to the chosen types appear —
// the parser refuses the others.
#include <cmath>
#include <cstdio>
#include <sstream>

#include "runner/config.h"
#include "runner/hash.h"
#include "runner/text.h"

namespace mantissa::runner {
namespace {

std::string num(double v) {
  std::string s = yaml_double(v);
  // Keep it a float to the eye ("1.0"); the parser accepts either.
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string str(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string boolean(bool b) { return b ? "true" : "false"; }

std::string list(const std::vector<std::string>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + str(v[i]);
  return out + "]";
}

std::string int_list(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

void layer(std::ostream& os, const LayerSpec& l) {
  os << "    - {type: " << l.type;
  if (!l.name.empty()) os << ", name: " << str(l.name);
  if (l.type == "linear") {
    os << ", in: " << l.in << ", out: " << l.out << ", bias: " << boolean(l.bias);
  } else if (l.type == "gelu") {
    os << ", approximate: " << l.approximate;
  } else if (l.type == "dropout") {
    os << ", p: " << num(l.p);
  } else if (l.type == "layernorm") {
    os << ", shape: " << int_list(l.shape) << ", eps: " << num(l.eps)
       << ", affine: " << boolean(l.affine);
  } else if (l.type == "conv2d") {
    os << ", in: " << l.in << ", out: " << l.out << ", kernel: " << l.kernel
       << ", stride: " << l.stride << ", padding: " << l.padding << ", bias: " << boolean(l.bias);
  } else if (l.type == "maxpool2d") {
    os << ", kernel: " << l.kernel << ", stride: " << l.stride << ", padding: " << l.padding;
  } else if (l.type == "flatten") {
    os << ", start_dim: " << l.start_dim << ", end_dim: " << l.end_dim;
  }
  os << "}\n";
}

}  // namespace

std::string to_yaml(const Config& c) {
  std::ostringstream os;
  os << "# resolved config: every key with its value (docs/configs.md)\n";
  os << "name: " << str(c.name) << "\n";
  os << "seed: " << c.seed << "\n";
  os << "deterministic: " << boolean(c.deterministic) << "\n";
  os << "device: " << str(c.device) << "\n";
  os << "precision: " << c.precision << "\n";
  os << "master_weights: " << boolean(c.master_weights) << "\n";
  if (c.epochs > 0) {
    os << "epochs: " << c.epochs << "\n";
  } else {
    os << "steps: " << c.steps << "\n";
  }
  os << "log_every: " << c.log_every << "\n";
  os << "eval_every: " << c.eval_every << "\n";
  os << "checkpoint_every: " << c.checkpoint_every << "\n";
  os << "keep_last: " << c.keep_last << "\n";
  os << "clip_grad_norm: " << num(c.clip_grad_norm) << "\n";

  os << "model:\n";
  if (!c.model.layers.empty()) {
    os << "  layers:\n";
    for (const auto& l : c.model.layers) layer(os, l);
  } else {
    os << "  preset: " << c.model.preset << "\n";
  }
  if (!c.model.init_from.empty()) os << "  init_from: " << str(c.model.init_from) << "\n";

  const DataConfig& d = c.data;
  os << "data:\n  type: " << d.type << "\n";
  if (d.type == "teacher" || d.type == "sine" || d.type == "spirals") {
    os << "  samples: " << d.samples << "\n  noise: " << num(d.noise) << "\n";
  }
  if (d.type == "teacher") {
    os << "  in_features: " << d.in_features << "\n  hidden: " << d.hidden
       << "\n  out_features: " << d.out_features << "\n";
  } else if (d.type == "sine") {
    os << "  x_min: " << num(d.x_min) << "\n  x_max: " << num(d.x_max) << "\n";
  } else if (d.type == "spirals") {
    os << "  turns: " << num(d.turns) << "\n";
  } else if (d.type == "csv") {
    os << "  path: " << str(d.path) << "\n";
    os << "  header: " << (d.header ? boolean(*d.header) : "auto") << "\n";
    os << "  target_columns: " << list(d.target_columns) << "\n";
    os << "  input_columns: " << list(d.input_columns) << "\n";
    os << "  target_dtype: " << d.target_dtype << "\n";
    os << "  delimiter: " << str(d.delimiter) << "\n";
  } else if (d.type == "safetensors") {
    os << "  path: " << str(d.path) << "\n  inputs: " << str(d.inputs)
       << "\n  targets: " << str(d.targets) << "\n";
  } else if (d.type == "mnist") {
    os << "  images: " << str(d.images) << "\n  labels: " << str(d.labels)
       << "\n  flatten: " << boolean(d.flatten) << "\n  limit: " << d.limit << "\n";
  }
  os << "  batch_size: " << d.batch_size << "\n  shuffle: " << boolean(d.shuffle)
     << "\n  seed: " << d.seed << "\n  val_split: " << num(d.val_split)
     << "\n  drop_last: " << boolean(d.drop_last) << "\n";

  os << "loss:\n  type: " << c.loss.type << "\n  reduction: " << c.loss.reduction << "\n";
  if (c.loss.type == "cross_entropy") {
    os << "  label_smoothing: " << num(c.loss.label_smoothing)
       << "\n  ignore_index: " << c.loss.ignore_index << "\n";
  }
  if (c.loss.type == "bce_with_logits" && !c.loss.pos_weight.empty()) {
    os << "  pos_weight: [";
    for (size_t i = 0; i < c.loss.pos_weight.size(); ++i)
      os << (i ? ", " : "") << num(c.loss.pos_weight[i]);
    os << "]\n";
  }

  const OptimizerConfig& o = c.optimizer;
  os << "optimizer:\n  type: " << o.type << "\n  lr: " << num(o.lr)
     << "\n  weight_decay: " << num(o.weight_decay) << "\n  maximize: " << boolean(o.maximize)
     << "\n";
  if (o.type == "sgd") {
    os << "  momentum: " << num(o.momentum) << "\n  dampening: " << num(o.dampening)
       << "\n  nesterov: " << boolean(o.nesterov) << "\n";
  } else {
    os << "  betas: [" << num(o.beta1) << ", " << num(o.beta2) << "]\n  eps: " << num(o.eps)
       << "\n  amsgrad: " << boolean(o.amsgrad) << "\n";
  }

  const ScheduleConfig& s = c.schedule;
  os << "schedule:\n  type: " << s.type << "\n";
  if (s.type == "step") {
    os << "  step_size: " << s.step_size << "\n  gamma: " << num(s.gamma) << "\n";
  } else if (s.type == "cosine") {
    os << "  warmup_steps: " << s.warmup_steps << "\n  total_steps: " << s.total_steps
       << "\n  min_lr: " << num(s.min_lr) << "\n";
  }

  const ScalerConfig& g = c.scaler;
  os << "scaler:\n  enabled: " << (g.enabled ? boolean(*g.enabled) : "auto")
     << "\n  init_scale: " << num(g.init_scale) << "\n  growth_factor: " << num(g.growth_factor)
     << "\n  backoff_factor: " << num(g.backoff_factor)
     << "\n  growth_interval: " << g.growth_interval << "\n  min_scale: " << num(g.min_scale)
     << "\n  hysteresis: " << g.hysteresis << "\n";
  return os.str();
}

std::string config_hash(const std::string& text) { return Fnv1a64().add(text).hex(); }

}  // namespace mantissa::runner
