#include "nn/optim/sgd.h"

#include <algorithm>

#include "engine/error.h"
#include "engine/optimizer_kernel_tables.h"
#include "nn/optim/options.h"

namespace mantissa::optim {
namespace {

std::map<std::string, double> sgd_defaults(double lr, SGDOptions options) {
  options.lr = lr;
  return option_map(options);
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, double lr, SGDOptions options)
    : SGD(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, lr, options) {}

SGD::SGD(std::vector<ParamGroup> groups, double lr, SGDOptions options)
    : Optimizer(sgd_defaults(lr, options)) {
  init_groups(std::move(groups));
}

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : SGD(std::move(params), options.lr, options) {}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions options)
    : SGD(std::move(groups), options.lr, options) {}

void SGD::validate(const ParamGroup& g) const {
  // Negated comparisons so that NaN is rejected too.
  const auto o = g.options_as<SGDOptions>();
  MT_CHECK(o.lr >= 0.0, "SGD: Invalid learning rate: ", o.lr);
  MT_CHECK(o.momentum >= 0.0, "SGD: Invalid momentum value: ", o.momentum);
  MT_CHECK(o.weight_decay >= 0.0, "SGD: Invalid weight_decay value: ", o.weight_decay);
  MT_CHECK(!o.nesterov || (o.momentum > 0.0 && o.dampening == 0.0),
           "SGD: Nesterov momentum requires a momentum and zero dampening (momentum ", o.momentum,
           ", dampening ", o.dampening, ")");
}

namespace {

SgdStepParams sgd_params(const ParamGroup& g) { return SgdStepParams{g.options_as<SGDOptions>()}; }

}  // namespace

void SGD::update(const ParamGroup& g, const Tensor& param, const Tensor& grad, ParamState& state) {
  SgdStepParams hp = sgd_params(g);
  Tensor buf;
  if (hp.momentum != 0.0) {
    buf = lazy_buffer(state, "momentum_buffer", param);
    hp.first_step = state.step == 0;
  }
  sgd_step_kernel(param.device())(param, grad, buf, hp);
  if (buf.defined()) {
    buf.bump_version();
    ++state.step;
  }
}

void SGD::update_many(const ParamGroup& g, OptimizerTensorLists& lists,
                      const std::vector<ParamState*>& states, const Tensor& found_inf) {
  const SgdStepParams hp = sgd_params(g);
  for (size_t i = 0; i < states.size(); ++i) {
    lists.state[0].push_back(
        hp.momentum != 0.0 ? lazy_buffer(*states[i], "momentum_buffer", lists.param[i]) : Tensor());
  }
  sgd_multi_step_kernel(lists.param.front().device())(lists, found_inf, hp);
  for (const Tensor& buf : lists.state[0]) {
    if (buf.defined()) buf.bump_version();
  }
}

int64_t SGD::loaded_step(const ParamState& saved) const {
  // Snapshots from before the count was kept have step 0 next to an initialised buffer.
  return std::max<int64_t>(saved.step, saved.buffers.count("momentum_buffer") != 0 ? 1 : 0);
}

}  // namespace mantissa::optim
