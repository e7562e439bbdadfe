// The optimizer base class: parameter groups with per-group options, lazily created
// per-parameter state, zero_grad, and a plain state_dict, following torch.optim.Optimizer.
//
// Options are doubles keyed by name (booleans are 0/1), so schedulers and user code can read
// and change them per group as in PyTorch (`opt.param_groups()[0]["lr"] = 0.1`). Each optimizer
// documents its keys; a group given to the constructor or add_param_group takes the optimizer's
// defaults for the keys it lacks, and unknown keys are rejected there (catches typos).
//
// Per-parameter state lives in the optimizer, keyed by the parameter's position across all
// groups (PyTorch's integer ids). State tensors are contiguous with the parameter's shape, dtype
// and device; the fused step kernels rely on that.
//
// Steps run through multi-tensor kernels (one call per group and device updates every parameter,
// master weights included) unless set_fused(false) picks the per-parameter kernels. Each
// parameter's step count lives in an int64 tensor on its device, incremented by the kernels, so
// step_if_finite(found_inf) can skip a step on the device with no host synchronisation.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tensor.h"
#include "nn/optim/options.h"

namespace mantissa {
struct OptimizerTensorLists;  // engine/optimizer_kernel_tables.h
}  // namespace mantissa

namespace mantissa::optim {

// A group of parameters and its options, by name as in PyTorch (`g["lr"] = 0.1`, read by the
// schedulers and saved by state_dict) and typed as in libtorch: a group can be made from an
// optimizer's options struct and read back as one (nn/optim/options.h: betas is beta1/beta2,
// bools are 0/1 by name).
//
// The step reads the group as its optimizer's struct (options_as). The group keeps the values of
// the last struct read in the struct's order and keeps them current as options are set, so a step
// looks up no option by name once the group has been read: the names are PyTorch's view of the
// options, not the path the step takes.
class ParamGroup {
 public:
  std::vector<Tensor> params;

  ParamGroup() = default;
  explicit ParamGroup(std::vector<Tensor> params) : params(std::move(params)) {}
  ParamGroup(std::vector<Tensor> params, std::map<std::string, double> options)
      : params(std::move(params)), options_(std::move(options)) {}
  // Every option of the struct (libtorch's OptimizerParamGroup(params, AdamOptions(...))).
  template <OptionsStruct O>
  ParamGroup(std::vector<Tensor> params, const O& typed)
      : params(std::move(params)), options_(option_map(typed)) {}

  // One option by name: reads as its value (throwing, like get(), if the group has none) and
  // takes a value by assignment (`g["lr"] = 0.1`; a missing key is added).
  class Option {
   public:
    Option(ParamGroup& group, std::string key) : group_(group), key_(std::move(key)) {}
    operator double() const { return group_.get(key_); }
    Option& operator=(double value) {
      group_.set(key_, value);
      return *this;
    }
    Option& operator=(const Option& other) { return *this = static_cast<double>(other); }
    Option& operator+=(double v) { return *this = static_cast<double>(*this) + v; }
    Option& operator-=(double v) { return *this = static_cast<double>(*this) - v; }
    Option& operator*=(double v) { return *this = static_cast<double>(*this) * v; }
    Option& operator/=(double v) { return *this = static_cast<double>(*this) / v; }

   private:
    ParamGroup& group_;
    std::string key_;
  };
  Option operator[](const std::string& key) { return Option(*this, key); }
  // Throws if the group has no option `key`.
  double get(const std::string& key) const;
  // Sets an option, adding it if the group has none by that name.
  void set(const std::string& key, double value);
  bool has(const std::string& key) const { return options_.count(key) != 0; }
  // Every option by name, in name order (what state_dict saves).
  const std::map<std::string, double>& options() const { return options_; }
  // Replaces every option.
  void set_options(std::map<std::string, double> options);
  // Adds the options the group lacks, keeping its own values.
  void add_missing(const std::map<std::string, double>& defaults);

  // The group's options as the optimizer's struct; throws like get() if the group lacks one of
  // O's options (another optimizer's group, or a group not yet added). Read by name only the first
  // time, or after the group was read as another struct or its options replaced.
  template <OptionsStruct O>
  O options_as() const;
  // Sets every option of the struct.
  template <OptionsStruct O>
  void set_options(const O& typed) {
    for (auto& [key, value] : option_map(typed)) set(key, value);
  }

 private:
  static constexpr size_t kMaxTyped = 16;
  std::map<std::string, double> options_;
  // The struct last read (its option_keys<O>(), null: none) and its values in that order.
  mutable const std::vector<std::string>* typed_keys_ = nullptr;
  mutable std::array<double, kMaxTyped> typed_values_{};
};

template <OptionsStruct O>
O ParamGroup::options_as() const {
  const std::vector<std::string>& keys = option_keys<O>();
  MT_ASSERT(keys.size() <= kMaxTyped, "ParamGroup::options_as: more than ", kMaxTyped, " options");
  if (typed_keys_ != &keys) {
    std::array<double, kMaxTyped> values{};
    for (size_t n = 0; n < keys.size(); ++n) values[n] = get(keys[n]);
    typed_values_ = values;
    typed_keys_ = &keys;
  }
  return option_values<O>(typed_values_.data());
}

// One parameter's state: the update count and named buffers. The count is Adam's step (bias
// correction) and SGD's number of momentum updates (0: the next one initialises the buffer).
struct ParamState {
  int64_t step = 0;
  std::map<std::string, Tensor> buffers;
};

// What state_dict() returns: a plain, serialisable snapshot shaped like PyTorch's
// {"state": {id: {...}}, "param_groups": [{..., "params": [ids]}]}.
struct OptimizerState {
  struct Group {
    std::map<std::string, double> options;
    std::vector<int64_t> params;  // ids: positions across all groups, in order
  };
  std::vector<Group> param_groups;
  std::map<int64_t, ParamState> state;  // only parameters that have state
};

class Optimizer {
 public:
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient; parameters without one are skipped.
  // Runs without recording autograd history.
  void step();
  // step() that the kernels skip on the device when found_inf (float32, 1 element, e.g. a
  // GradScaler's) is non-zero: parameters, state and step counts are left untouched. With an
  // undefined found_inf it always steps. Needs no host synchronisation on CUDA (with the fused
  // kernels); found_inf becomes the last_step_skipped() flag, read lazily.
  void step_if_finite(const Tensor& found_inf);
  // Clears gradients: drops them (set_to_none) or fills them with zeros.
  void zero_grad(bool set_to_none = true);

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  // Adds a group; missing options take the optimizer's defaults. Throws on invalid options,
  // non-leaf or non-floating parameters, or a parameter already being optimized.
  void add_param_group(ParamGroup group);
  const std::map<std::string, double>& defaults() const { return defaults_; }

  double lr(size_t group = 0) const;
  // Sets the learning rate of one group, or of every group when `group` is empty.
  void set_lr(double lr, std::optional<size_t> group = std::nullopt);

  // The state tensors are shared, not copied (as in PyTorch): clone them to keep a snapshot
  // across later steps.
  virtual OptimizerState state_dict() const;
  // Restores group options and state. Parameters are matched by position; group and parameter
  // counts and state shapes must agree. Tensors are copied onto each parameter's device and
  // dtype, so the loaded optimizer shares nothing with `state`.
  virtual void load_state_dict(const OptimizerState& state);

  // Master weights: float16/bfloat16 parameters are updated through a float32 copy kept in the
  // optimizer state ("master"), with float32 gradients and float32 optimizer state, and the
  // rounded result is written back into the parameter after each step.
  void set_master_weights(bool enabled) { master_weights_ = enabled; }
  bool master_weights() const { return master_weights_; }

  // The dtype of the optimizer's state buffers (Adam's moments), instead of the updated tensor's
  // (the parameter, or its float32 master): bfloat16 halves their memory. Adam and AdamW only;
  // nullopt (the default) follows the parameter, as PyTorch. A float64 parameter keeps float64.
  void set_state_dtype(std::optional<DType> dtype);
  std::optional<DType> state_dtype() const { return state_dtype_; }
  // Stochastic rounding of every store into bfloat16, the parameter (without master weights) and
  // the state: unbiased, so that updates below half a bfloat16 ulp survive on average. Its random
  // bits come from `seed`, the parameter's index and the step (kernels/optimizer_math.h): the same
  // run gives the same bits, also after a resume. Adam and AdamW only.
  void set_stochastic_rounding(bool enabled, uint64_t seed = 0);
  bool stochastic_rounding() const { return stochastic_rounding_; }
  uint64_t stochastic_rounding_seed() const { return stochastic_rounding_seed_; }

  // The learning rate as a float64 on each parameter device, which the fused kernels read
  // (Adam and AdamW): a step captured into a CUDA graph then uses the rate of each replay rather
  // than the one it was captured with. step() refreshes the device values from the groups'
  // options, except while a CUDA graph is being captured; before replaying a captured step, call
  // sync_lr_to_device() (the Trainer does). Results are bitwise those of the host rate.
  void set_lr_on_device(bool enabled);
  bool lr_on_device() const { return lr_on_device_; }
  void sync_lr_to_device();

  // Fused (the default): multi-tensor kernels. Unfused: one kernel per parameter, the reference
  // path; it reads found_inf and the step counts on the host (a sync on CUDA). Both give
  // bitwise-identical results.
  void set_fused(bool fused) { fused_ = fused; }
  bool fused() const { return fused_; }

  // For a GradScaler: the gradients step() will read, to be unscaled in place (each parameter's
  // defined .grad; with master weights, float32 copies of half-precision gradients, which the
  // next step() then uses), and a record of whether the last step was skipped because of
  // inf/nan gradients. After step_if_finite the flag is found_inf itself, and reading it is
  // the only host synchronisation of a CUDA step (done at most once; the result is cached).
  std::vector<Tensor> grads_to_unscale();
  void set_last_step_skipped(bool skipped) {
    skipped_flag_ = Tensor();
    last_step_skipped_ = skipped;
  }
  bool last_step_skipped() const;

  // "SGD", "Adam", ... (used in error messages).
  virtual const char* name() const = 0;
  // The group option a momentum schedule (OneCycleLR's cycle_momentum) sets: "beta1" where the
  // optimizer has betas, else "momentum", else "" (none), as PyTorch chooses from the defaults.
  // Muon's choice is per group: "momentum" for a Muon group, "beta1" for an AdamW group.
  virtual std::string momentum_key(const ParamGroup& group) const;
  // The bytes of state `param` (of `group`) holds once it has been stepped, its float32 master
  // copy included: what the first step will allocate, for reports made before it.
  int64_t planned_state_bytes(const ParamGroup& group, const Tensor& param) const;
  // Every state entry a parameter can have: the optimizer's buffers and "master".
  std::vector<std::string> state_buffer_keys() const;
  // Whether the optimizer keeps a per-parameter scalar in its state (NAdam's mu_product).
  bool has_scalar_state() const;
  // Whether step() reads the device on the host (the flag or the step counts): the unfused
  // reference path of every optimizer, and Muon's step. Such a step cannot be captured into a
  // CUDA graph.
  virtual bool step_reads_host() const { return !fused_; }
  // Whether the update of a parameter of `group` reads the whole parameter at once rather than
  // each element alone (Muon's orthogonalisation): ZeRO then gives each such parameter to one
  // rank, whole, instead of sharding it by element.
  virtual bool updates_whole_parameters(const ParamGroup& /*group*/) const { return false; }
  // The state of the parameter with id `index` (null if it has none yet). Its step is read
  // from the device count (a sync on CUDA).
  const ParamState* state(size_t index) const;

 protected:
  explicit Optimizer(std::map<std::string, double> defaults);
  // Adds the constructor's groups (throws "optimizer got an empty parameter list" if none).
  void init_groups(std::vector<ParamGroup> groups);

  // Throws (PyTorch's message) if a group's options are invalid.
  virtual void validate(const ParamGroup& group) const = 0;
  // Updates one parameter from its gradient. `grad` is contiguous with the param's dtype;
  // `param` is contiguous (a non-contiguous parameter is updated through a copy).
  virtual void update(const ParamGroup& group, const Tensor& param, const Tensor& grad,
                      ParamState& state) = 0;
  // The multi-tensor form of update(): one group's parameters on one device. The base fills
  // lists.param/grad/model/step (see OptimizerTensorLists); the subclass adds its state lists
  // (created with lazy_buffer) and calls its kernel, which skips on the device when found_inf
  // is set and advances the step counts otherwise.
  virtual void update_many(const ParamGroup& group, OptimizerTensorLists& lists,
                           const std::vector<ParamState*>& states, const Tensor& found_inf) = 0;
  // Names of the buffers this optimizer keeps (checked by load_state_dict).
  virtual std::vector<std::string> state_keys() const = 0;
  // The buffers a parameter of `group` gets with the group's options (default: every key).
  virtual std::vector<std::string> planned_state_keys(const ParamGroup& /*group*/) const {
    return state_keys();
  }
  // The step count to resume from for a loaded parameter state (SGD: older snapshots have a
  // momentum buffer with step 0).
  virtual int64_t loaded_step(const ParamState& saved) const { return saved.step; }
  // Whether state entry `key` is a float32 scalar (NAdam's mu_product) rather than a tensor
  // shaped like the parameter.
  virtual bool scalar_state(const std::string& /*key*/) const { return false; }
  // update() for optimizers whose kernels come only in multi-tensor form: runs update_many on a
  // one-entry list, with the step count taken from and written back to state.step.
  void update_as_list(const ParamGroup& group, const Tensor& param, const Tensor& grad,
                      ParamState& state);

  // Whether set_state_dtype and set_stochastic_rounding apply (Adam's kernels read them).
  virtual bool supports_state_dtype() const { return false; }
  // Whether the fused kernels read AdamStepParams::lr_device (set_lr_on_device).
  virtual bool supports_lr_on_device() const { return false; }
  // With lr_on_device: group `g`'s rate on `device` (created from the option if missing), for
  // the kernels; nullptr otherwise.
  const double* lr_device_ptr(const ParamGroup& g, Device device);
  // The state buffers' dtype for an updated tensor of dtype `target` (set_state_dtype).
  DType state_dtype_for(DType target) const;
  // The index of the parameter update() is called for (its position across the groups).
  int64_t updating_index() const { return updating_index_; }

  // state.buffers[key], created as zeros shaped like `param` (same dtype and device) on first
  // use; `created` tells whether it was.
  static Tensor lazy_buffer(ParamState& state, const std::string& key, const Tensor& param,
                            bool* created = nullptr);
  // The same in `dtype` (a state_dtype).
  static Tensor lazy_buffer(ParamState& state, const std::string& key, const Tensor& param,
                            DType dtype, bool* created = nullptr);

 private:
  std::map<std::string, double> defaults_;
  std::vector<ParamGroup> groups_;
  bool uses_master(const Tensor& param) const {
    return master_weights_ && is_reduced_float(param.dtype());
  }

  void run_step(const Tensor& found_inf);
  // The device step count of parameter `index` (int64, 0-d), created from the host count.
  Tensor step_count(int64_t index, Device device);
  // Copies the device step counts into state_[*].step (host reads).
  void refresh_steps() const;

  // run_step's per-device batches and lists, kept between steps so that a step of a small model
  // allocates nothing (clearing keeps their capacity).
  struct StepScratch;
  std::unique_ptr<StepScratch> scratch_;

  // Mutable so that const readers can refresh the cached step from the device count.
  mutable std::map<int64_t, ParamState> state_;
  std::map<int64_t, Tensor> step_counts_;           // authoritative step counts, per parameter
  std::map<int64_t, Tensor> pending_master_grads_;  // from grads_to_unscale, used by step()
  mutable Tensor skipped_flag_;  // found_inf of the last step_if_finite, until read
  mutable bool last_step_skipped_ = false;
  bool master_weights_ = false;
  bool fused_ = true;
  std::optional<DType> state_dtype_;
  bool stochastic_rounding_ = false;
  bool lr_on_device_ = false;
  std::map<std::pair<size_t, std::string>, Tensor> device_lr_;  // (group, device) -> float64
  uint64_t stochastic_rounding_seed_ = 0;
  int64_t updating_index_ = 0;
};

}  // namespace mantissa::optim
