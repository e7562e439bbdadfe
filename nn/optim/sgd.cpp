#include "nn/optim/sgd.h"

#include "engine/error.h"
#include "engine/kernel_tables.h"

namespace mantissa::optim {
namespace {

std::map<std::string, double> sgd_defaults(double lr, const SGDOptions& o) {
  return {{"lr", lr},
          {"momentum", o.momentum},
          {"dampening", o.dampening},
          {"weight_decay", o.weight_decay},
          {"nesterov", o.nesterov ? 1.0 : 0.0},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, double lr, SGDOptions options)
    : SGD(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, lr, options) {}

SGD::SGD(std::vector<ParamGroup> groups, double lr, SGDOptions options)
    : Optimizer(sgd_defaults(lr, options)) {
  init_groups(std::move(groups));
}

void SGD::validate(const ParamGroup& g) const {
  // Negated comparisons so that NaN is rejected too.
  const double lr = g.get("lr"), momentum = g.get("momentum"), wd = g.get("weight_decay");
  MT_CHECK(lr >= 0.0, "SGD: Invalid learning rate: ", lr);
  MT_CHECK(momentum >= 0.0, "SGD: Invalid momentum value: ", momentum);
  MT_CHECK(wd >= 0.0, "SGD: Invalid weight_decay value: ", wd);
  MT_CHECK(!flag(g, "nesterov") || (momentum > 0.0 && g.get("dampening") == 0.0),
           "SGD: Nesterov momentum requires a momentum and zero dampening (momentum ", momentum,
           ", dampening ", g.get("dampening"), ")");
}

void SGD::update(const ParamGroup& g, const Tensor& param, const Tensor& grad, ParamState& state) {
  SgdStepParams hp{g.get("lr"),           g.get("momentum"),   g.get("dampening"),
                   g.get("weight_decay"), flag(g, "nesterov"), flag(g, "maximize"),
                   /*first_step=*/false};
  Tensor buf;
  if (hp.momentum != 0.0) buf = lazy_buffer(state, "momentum_buffer", param, &hp.first_step);
  sgd_step_kernel(param.device())(param, grad, buf, hp);
  if (buf.defined()) buf.bump_version();
}

}  // namespace mantissa::optim
