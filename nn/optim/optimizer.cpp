#include "nn/optim/optimizer.h"

#include <algorithm>
#include <sstream>

#include "autograd/node.h"
#include "cuda/stream.h"
#include "engine/error.h"
#include "engine/factory.h"
#include "engine/optimizer_kernel_tables.h"

namespace mantissa::optim {
namespace {

std::string join_keys(const std::vector<std::string>& keys) {
  std::ostringstream os;
  for (size_t i = 0; i < keys.size(); ++i) os << (i ? ", " : "") << keys[i];
  return os.str();
}

// A fresh contiguous copy of `t` with the given dtype and device.
Tensor copy_to(const Tensor& t, Device device, DType dtype) {
  Tensor out = empty(t.shape(), TensorOptions(device).dtype(dtype));
  out.copy_(t);
  return out;
}
Tensor copy_like(const Tensor& t, const Tensor& like) {
  return copy_to(t, like.device(), like.dtype());
}

}  // namespace

double ParamGroup::get(const std::string& key) const {
  auto it = options_.find(key);
  MT_CHECK(it != options_.end(), "parameter group has no option '", key, "'");
  return it->second;
}

void ParamGroup::set(const std::string& key, double value) {
  options_[key] = value;
  if (typed_keys_ == nullptr) return;
  // Keeps the typed read current: an option of the struct last read is updated in place.
  const std::vector<std::string>& keys = *typed_keys_;
  for (size_t n = 0; n < keys.size(); ++n) {
    if (keys[n] == key) typed_values_[n] = value;
  }
}

void ParamGroup::set_options(std::map<std::string, double> options) {
  options_ = std::move(options);
  typed_keys_ = nullptr;
}

void ParamGroup::add_missing(const std::map<std::string, double>& defaults) {
  for (const auto& [key, value] : defaults) options_.emplace(key, value);
}

Optimizer::Optimizer(std::map<std::string, double> defaults) : defaults_(std::move(defaults)) {}
Optimizer::~Optimizer() = default;

void Optimizer::init_groups(std::vector<ParamGroup> groups) {
  MT_CHECK(!groups.empty() && !(groups.size() == 1 && groups[0].params.empty()), name(),
           ": optimizer got an empty parameter list");
  for (auto& g : groups) add_param_group(std::move(g));
}

void Optimizer::add_param_group(ParamGroup group) {
  std::vector<std::string> known;
  for (const auto& [key, value] : defaults_) {
    known.push_back(key);
  }
  group.add_missing(defaults_);  // keeps the group's own values
  for (const auto& [key, value] : group.options()) {
    // Schedulers record the starting lr in "initial_lr", as PyTorch's do.
    MT_CHECK(defaults_.count(key) != 0 || key == "initial_lr", name(), ": unknown option '", key,
             "' in parameter group (known options: ", join_keys(known), ")");
  }
  validate(group);
  for (size_t i = 0; i < group.params.size(); ++i) {
    const Tensor& p = group.params[i];
    MT_CHECK(p.defined(), name(), ": parameter ", i, " of the group is an undefined tensor");
    MT_CHECK(p.is_floating_point(), name(), ": can only optimize tensors of floating point dtype, ",
             "but parameter ", i, " of the group has dtype ", p.dtype());
    MT_CHECK(p.is_leaf(), name(), ": can't optimize a non-leaf Tensor (parameter ", i,
             " of the group, shape ", p.shape(), ")");
    for (size_t j = 0; j < i; ++j) {
      MT_CHECK(!group.params[j].is_same(p), name(), ": optimizer contains a parameter group with ",
               "duplicate parameters (", j, " and ", i, ")");
    }
    for (const auto& other : groups_) {
      for (const Tensor& q : other.params) {
        MT_CHECK(!q.is_same(p), name(),
                 ": some parameters appear in more than one parameter group");
      }
    }
  }
  groups_.push_back(std::move(group));
}

void Optimizer::step() {
  // A GradScaler records its flag through step_if_finite; a plain step must clear a stale one,
  // or a scheduler would skip its next step.
  set_last_step_skipped(false);
  run_step(Tensor());
}

void Optimizer::step_if_finite(const Tensor& found_inf) {
  MT_CHECK(!found_inf.defined() || (found_inf.numel() == 1 && found_inf.dtype() == kFloat32),
           name(), ": step_if_finite expects found_inf as a float32 tensor of 1 element, got ",
           found_inf.dtype(), " of shape ", found_inf.shape());
  run_step(found_inf);
  set_last_step_skipped(false);
  skipped_flag_ = found_inf;
}

bool Optimizer::last_step_skipped() const {
  if (skipped_flag_.defined()) {
    // The one optional sync of a device-resident step; cached, the flag never changes after it.
    last_step_skipped_ = skipped_flag_.item<float>() != 0.0f;
    skipped_flag_ = Tensor();
  }
  return last_step_skipped_;
}

Tensor Optimizer::step_count(int64_t index, Device device) {
  auto it = step_counts_.find(index);
  if (it == step_counts_.end()) {
    const int64_t host = state_[index].step;
    it = step_counts_.emplace(index, full({}, host, TensorOptions(device).dtype(kInt64))).first;
  } else if (!(it->second.device() == device)) {
    it->second = it->second.to(device);  // the parameter moved
  }
  return it->second;
}

void Optimizer::refresh_steps() const {
  for (const auto& [index, count] : step_counts_) state_[index].step = count.item<int64_t>();
}

// One batch per device of a group, for the multi-tensor kernels.
struct Optimizer::StepScratch {
  struct Batch {
    Device device;
    OptimizerTensorLists lists;
    std::vector<ParamState*> states;
    void clear() {
      for (auto* list : {&lists.param, &lists.grad, &lists.model, &lists.step, &lists.state[0],
                         &lists.state[1], &lists.state[2]}) {
        list->clear();
      }
      states.clear();
      lists.index.clear();
    }
  };
  std::vector<Batch> batches;  // the first `used` are this group's
  size_t used = 0;
  // Writes of a non-contiguous parameter (target -> param) after the kernels.
  std::vector<std::pair<Tensor, Tensor>> copy_back;
  // Parameters updated in place, whose versions are bumped: pointers into the group's list,
  // which outlives the step (holding them as tensors cost two atomic counts each).
  std::vector<const Tensor*> touched;

  Batch& batch_for(Device device) {
    for (size_t i = 0; i < used; ++i)
      if (batches[i].device == device) return batches[i];
    if (used == batches.size()) batches.push_back(Batch{device, {}, {}});
    Batch& b = batches[used++];
    b.device = device;
    b.clear();
    return b;
  }
  void clear() {
    for (size_t i = 0; i < used; ++i) batches[i].clear();
    used = 0;
    copy_back.clear();
    touched.clear();
  }
};

void Optimizer::set_lr_on_device(bool enabled) {
  MT_CHECK(!enabled || supports_lr_on_device(), name(),
           ": set_lr_on_device: its kernels read the learning rate on the host (Adam and AdamW "
           "read it on the device)");
  lr_on_device_ = enabled;
  if (!enabled) device_lr_.clear();
}

void Optimizer::sync_lr_to_device() {
  if (!lr_on_device_) return;
  autograd::NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (const Tensor& p : groups_[g].params) {
      Tensor& t = device_lr_[{g, p.device().str()}];
      if (!t.defined()) t = zeros({}, TensorOptions(kFloat64).device(p.device()));
    }
  }
  for (auto& [key, t] : device_lr_) t.fill_(groups_[key.first].get("lr"));
}

const double* Optimizer::lr_device_ptr(const ParamGroup& g, Device device) {
  if (!lr_on_device_) return nullptr;
  const auto index = static_cast<size_t>(&g - groups_.data());
  MT_ASSERT(index < groups_.size(), name(), ": lr_device_ptr: not one of its groups");
  auto it = device_lr_.find({index, device.str()});
  if (it == device_lr_.end()) {
    sync_lr_to_device();
    it = device_lr_.find({index, device.str()});
  }
  return static_cast<const double*>(it->second.data_ptr());
}

void Optimizer::run_step(const Tensor& found_inf) {
  autograd::NoGradGuard no_grad;
  // Inside a capture the fill would be recorded with today's rate: the caller refreshes it.
  if (lr_on_device_ && !cuda::is_current_stream_capturing()) sync_lr_to_device();
  if (!scratch_) scratch_ = std::make_unique<StepScratch>();
  StepScratch& scratch = *scratch_;
  // Drops the references to gradients and state when the step ends, also by an exception.
  struct ClearOnExit {
    StepScratch& s;
    ~ClearOnExit() { s.clear(); }
  } clear_on_exit{scratch};
  std::optional<bool> skip_on_host;  // unfused path only
  int64_t id = 0;
  for (const ParamGroup& group : groups_) {
    scratch.clear();
    auto& copy_back = scratch.copy_back;
    auto& touched = scratch.touched;
    for (const Tensor& param : group.params) {
      const int64_t index = id++;
      Tensor grad = param.grad();
      if (!grad.defined()) continue;
      ParamState& st = state_[index];
      Tensor target, model;
      if (uses_master(param)) {
        auto [it, created] = st.buffers.try_emplace("master");
        if (created) it->second = copy_to(param, param.device(), kFloat32);
        auto pending = pending_master_grads_.find(index);
        grad = pending != pending_master_grads_.end() ? pending->second.contiguous()
                                                      : copy_to(grad, grad.device(), kFloat32);
        target = it->second;
        if (param.is_contiguous()) {
          model = param;
          touched.push_back(&param);
        } else {
          copy_back.emplace_back(param, target);
        }
      } else {
        // The kernels want one dtype and dense memory; gradients normally already are.
        if (grad.dtype() != param.dtype()) grad = grad.to(param.dtype());
        if (!grad.is_contiguous()) grad = grad.contiguous();
        target = param.is_contiguous() ? param : copy_like(param, param);
        if (target.is_same(param)) {
          touched.push_back(&param);
        } else {
          copy_back.emplace_back(param, target);
        }
      }
      if (!fused_) {
        // The reference path: per-parameter kernels, with the flag and the count read on the
        // host.
        if (!skip_on_host) skip_on_host = found_inf.defined() && found_inf.item<float>() != 0.0f;
        if (*skip_on_host) continue;
        Tensor count = step_count(index, param.device());
        st.step = count.item<int64_t>();
        updating_index_ = index;
        update(group, target, grad, st);
        count.fill_(st.step);
        if (model.defined()) model.copy_(target);
        continue;
      }
      StepScratch::Batch& b = scratch.batch_for(param.device());
      b.lists.param.push_back(std::move(target));
      b.lists.grad.push_back(std::move(grad));
      b.lists.model.push_back(std::move(model));
      b.lists.step.push_back(step_count(index, param.device()));
      b.lists.index.push_back(index);
      b.states.push_back(&st);
    }
    for (size_t i = 0; i < scratch.used; ++i) {
      StepScratch::Batch& b = scratch.batches[i];
      const Tensor flag = found_inf.defined() && !(found_inf.device() == b.device)
                              ? found_inf.to(b.device)
                              : found_inf;
      update_many(group, b.lists, b.states, flag);
    }
    if (skip_on_host.value_or(false)) continue;
    for (auto& [param, target] : copy_back) Tensor(param).copy_(target);
    for (const Tensor* p : touched) p->bump_version();
  }
  pending_master_grads_.clear();
}

void Optimizer::zero_grad(bool set_to_none) {
  autograd::NoGradGuard no_grad;
  pending_master_grads_.clear();
  for (const ParamGroup& group : groups_) {
    for (const Tensor& param : group.params) {
      autograd::AutogradMeta* meta = autograd::meta(param);
      if (meta == nullptr || !meta->grad.defined()) continue;
      if (set_to_none) {
        meta->grad = Tensor();
        continue;
      }
      const Tensor grad = meta->grad;
      // A gradient built with create_graph carries history; zero a detached alias instead.
      Tensor g = grad.requires_grad() ? grad.detach() : grad;
      g.zero_();
      if (!g.is_same(grad)) param.set_grad(g);
    }
  }
}

std::vector<Tensor> Optimizer::grads_to_unscale() {
  std::vector<Tensor> grads;
  pending_master_grads_.clear();
  int64_t id = 0;
  for (const ParamGroup& group : groups_) {
    for (const Tensor& param : group.params) {
      const int64_t index = id++;
      Tensor g = param.grad();
      if (!g.defined()) continue;
      if (uses_master(param)) {
        autograd::NoGradGuard no_grad;
        g = copy_to(g, g.device(), kFloat32);
        pending_master_grads_[index] = g;
      }
      grads.push_back(g);
    }
  }
  return grads;
}

std::string Optimizer::momentum_key(const ParamGroup&) const {
  if (defaults_.count("beta1")) return "beta1";
  if (defaults_.count("momentum")) return "momentum";
  return "";
}

double Optimizer::lr(size_t group) const {
  MT_CHECK(group < groups_.size(), name(), ": parameter group ", group, " out of range (",
           groups_.size(), " groups)");
  return groups_[group].get("lr");
}

void Optimizer::set_lr(double lr, std::optional<size_t> group) {
  if (group) {
    MT_CHECK(*group < groups_.size(), name(), ": parameter group ", *group, " out of range (",
             groups_.size(), " groups)");
    groups_[*group]["lr"] = lr;
    return;
  }
  for (auto& g : groups_) g["lr"] = lr;
}

void Optimizer::update_as_list(const ParamGroup& group, const Tensor& param, const Tensor& grad,
                               ParamState& state) {
  OptimizerTensorLists lists;
  lists.param.push_back(param);
  lists.grad.push_back(grad);
  lists.step.push_back(full({}, state.step, TensorOptions(param.device()).dtype(kInt64)));
  lists.index.push_back(updating_index_);
  std::vector<ParamState*> states{&state};
  update_many(group, lists, states, Tensor());
  state.step = lists.step.front().item<int64_t>();
}

void Optimizer::set_state_dtype(std::optional<DType> dtype) {
  MT_CHECK(!dtype || supports_state_dtype(), name(),
           ": state_dtype is supported by Adam and AdamW only");
  MT_CHECK(!dtype || *dtype == kBFloat16 || *dtype == kFloat32, name(),
           ": state_dtype must be float32 or bfloat16, got ", *dtype);
  state_dtype_ = dtype;
}

void Optimizer::set_stochastic_rounding(bool enabled, uint64_t seed) {
  MT_CHECK(!enabled || supports_state_dtype(), name(),
           ": stochastic rounding is supported by Adam and AdamW only");
  stochastic_rounding_ = enabled;
  stochastic_rounding_seed_ = seed;
}

int64_t Optimizer::planned_state_bytes(const ParamGroup& group, const Tensor& param) const {
  const bool master = uses_master(param);
  const DType dtype = state_dtype_for(master ? kFloat32 : param.dtype());
  int64_t bytes = master ? param.numel() * itemsize(kFloat32) : 0;
  for (const std::string& key : planned_state_keys(group))
    bytes += scalar_state(key) ? itemsize(kFloat32) : param.numel() * itemsize(dtype);
  return bytes;
}

DType Optimizer::state_dtype_for(DType target) const {
  if (!state_dtype_ || !is_floating(target) || target == kFloat64) return target;
  return *state_dtype_;
}

Tensor Optimizer::lazy_buffer(ParamState& state, const std::string& key, const Tensor& param,
                              bool* created) {
  return lazy_buffer(state, key, param, param.dtype(), created);
}

Tensor Optimizer::lazy_buffer(ParamState& state, const std::string& key, const Tensor& param,
                              DType dtype, bool* created) {
  auto it = state.buffers.find(key);
  if (created) *created = it == state.buffers.end();
  if (it != state.buffers.end()) return it->second;
  Tensor t = zeros(param.shape(), TensorOptions(param.device()).dtype(dtype));
  state.buffers.emplace(key, t);
  return t;
}

const ParamState* Optimizer::state(size_t index) const {
  auto it = state_.find(static_cast<int64_t>(index));
  if (it == state_.end()) return nullptr;
  auto count = step_counts_.find(it->first);
  if (count != step_counts_.end()) it->second.step = count->second.item<int64_t>();
  return &it->second;
}

std::vector<std::string> Optimizer::state_buffer_keys() const {
  std::vector<std::string> keys = state_keys();
  keys.push_back("master");
  return keys;
}

bool Optimizer::has_scalar_state() const {
  for (const std::string& key : state_keys())
    if (scalar_state(key)) return true;
  return false;
}

OptimizerState Optimizer::state_dict() const {
  OptimizerState out;
  refresh_steps();
  int64_t id = 0;
  for (const ParamGroup& g : groups_) {
    OptimizerState::Group saved{g.options(), {}};
    for (size_t i = 0; i < g.params.size(); ++i) saved.params.push_back(id++);
    out.param_groups.push_back(std::move(saved));
  }
  for (const auto& [index, s] : state_) {
    if (s.step != 0 || !s.buffers.empty()) out.state.emplace(index, s);
  }
  return out;
}

void Optimizer::load_state_dict(const OptimizerState& loaded) {
  MT_CHECK(loaded.param_groups.size() == groups_.size(), name(),
           ": loaded state dict has a different number of parameter groups (",
           loaded.param_groups.size(), ", but the optimizer has ", groups_.size(), ")");
  // Saved ids map to our parameters by position, group by group, as in PyTorch.
  std::map<int64_t, int64_t> id_map;
  std::vector<const Tensor*> params;
  std::vector<std::map<std::string, double>> options(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    const auto& saved = loaded.param_groups[g];
    MT_CHECK(saved.params.size() == groups_[g].params.size(), name(),
             ": loaded state dict contains a parameter group that doesn't match the size of ",
             "optimizer's group (group ", g, " has ", saved.params.size(),
             " parameters, the optimizer's has ", groups_[g].params.size(), ")");
    for (size_t k = 0; k < saved.params.size(); ++k) {
      const bool fresh =
          id_map.emplace(saved.params[k], static_cast<int64_t>(params.size())).second;
      MT_CHECK(fresh, name(), ": loaded state dict lists parameter id ", saved.params[k],
               " more than once");
      params.push_back(&groups_[g].params[k]);
    }
    ParamGroup check{{}, saved.options};
    check.add_missing(defaults_);
    for (const auto& [key, value] : check.options()) {
      MT_CHECK(defaults_.count(key) != 0 || key == "initial_lr", name(),
               ": loaded state dict has unknown option '", key, "' in parameter group ", g);
    }
    validate(check);
    options[g] = check.options();
  }

  const std::vector<std::string> keys = state_buffer_keys();
  std::map<int64_t, ParamState> state;
  autograd::NoGradGuard no_grad;
  for (const auto& [saved_id, saved] : loaded.state) {
    auto it = id_map.find(saved_id);
    MT_CHECK(it != id_map.end(), name(), ": loaded state dict has state for parameter id ",
             saved_id, ", which is in none of its parameter groups");
    const Tensor& p = *params[it->second];
    MT_CHECK(saved.step >= 0, name(), ": loaded state for parameter ", saved_id,
             " has a negative step count ", saved.step);
    ParamState s;
    s.step = loaded_step(saved);
    for (const auto& [key, t] : saved.buffers) {
      MT_CHECK(std::find(keys.begin(), keys.end(), key) != keys.end(), name(),
               ": loaded state for parameter ", saved_id, " has unknown entry '", key, "' (",
               name(), " keeps: ", join_keys(keys), ")");
      MT_CHECK(t.defined(), name(), ": loaded state '", key, "' for parameter ", saved_id,
               " is an undefined tensor");
      if (scalar_state(key)) {
        MT_CHECK(t.numel() == 1, name(), ": loaded state '", key, "' for parameter ", saved_id,
                 " has shape ", t.shape(), "; expected a single value");
        s.buffers.emplace(key, copy_to(t.reshape({}), p.device(), kFloat32));
        continue;
      }
      MT_CHECK(t.shape() == p.shape(), name(), ": loaded state '", key, "' for parameter ",
               saved_id, " has shape ", t.shape(), ", but the parameter has shape ", p.shape());
      // With master weights, a half-precision parameter's state (and its master) is float32;
      // a state_dtype applies to the state buffers.
      const DType dtype =
          key == "master" ? kFloat32 : state_dtype_for(uses_master(p) ? kFloat32 : p.dtype());
      s.buffers.emplace(key, copy_to(t, p.device(), dtype));
    }
    state.emplace(it->second, std::move(s));
  }
  for (size_t g = 0; g < groups_.size(); ++g) groups_[g].set_options(std::move(options[g]));
  state_ = std::move(state);
  step_counts_.clear();  // recreated from state_[*].step at the next step
}

}  // namespace mantissa::optim
