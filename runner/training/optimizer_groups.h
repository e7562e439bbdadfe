// The parameter groups a config's optimizer section asks for, and the start-up lines that name
// them.
#pragma once

#include <string>
#include <vector>

#include "nn/module.h"
#include "nn/optim/optimizer.h"
#include "runner/config/config.h"

namespace mantissa::runner {

// optimizer.type muon: its two groups (optim::muon_split's rule, overridden by muon_params and
// adamw_params) with the options of `optimizer` and `optimizer.adamw`; appends to `lines` the
// start-up lines that say which parameters went where ("optimizer muon: Muon 48 tensors (...):
// transformer.h.*.attn.c_attn.weight x12, ..."). A bad pattern or a model with nothing for Muon
// is a ConfigError on its key.
std::vector<optim::ParamGroup> muon_param_groups(const Config& c, nn::Module& model,
                                                 std::vector<std::string>& lines);

}  // namespace mantissa::runner
