#include "nn/optim/param_groups.h"

#include "engine/error.h"

namespace mantissa::optim {

std::vector<ParamGroup> decay_groups(const std::vector<std::pair<std::string, Tensor>>& named,
                                     double weight_decay, int64_t min_ndim) {
  MT_CHECK(min_ndim >= 0, "decay_groups: min_ndim must be >= 0, got ", min_ndim);
  MT_CHECK(weight_decay >= 0.0, "decay_groups: weight_decay must be >= 0, got ", weight_decay);
  ParamGroup decay, no_decay;
  for (const auto& [name, p] : named) {
    if (!p.defined() || !p.requires_grad()) continue;
    (p.dim() >= min_ndim ? decay : no_decay).params.push_back(p);
  }
  MT_CHECK(!decay.params.empty() || !no_decay.params.empty(),
           "decay_groups: no parameter requires grad (", named.size(), " given)");
  decay["weight_decay"] = weight_decay;
  no_decay["weight_decay"] = 0.0;
  std::vector<ParamGroup> groups;
  if (!decay.params.empty()) groups.push_back(std::move(decay));
  if (!no_decay.params.empty()) groups.push_back(std::move(no_decay));
  return groups;
}

}  // namespace mantissa::optim
