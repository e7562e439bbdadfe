// Parameter groups by rule, for the constructors that take groups.
//
// decay_groups is nanoGPT's AdamW grouping: weight decay on matrices and embeddings (parameters
// of at least `min_ndim` dimensions), none on biases and norm gains.
//
//   auto groups = optim::decay_groups(model->named_parameters(), /*weight_decay=*/0.1);
//   optim::AdamW opt(groups, {.lr = 6e-4, .betas = {0.9, 0.95}});
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.h"
#include "nn/optim/optimizer.h"

namespace mantissa::optim {

// Two groups in this order: {params with dim() >= min_ndim, weight_decay} and {the others,
// weight_decay 0}, each keeping the parameters' order; an empty group is left out, and so are
// parameters that do not require grad (as nanoGPT's configure_optimizers). Throws when no
// parameter is left, or on min_ndim < 0 or weight_decay < 0.
std::vector<ParamGroup> decay_groups(const std::vector<std::pair<std::string, Tensor>>& named,
                                     double weight_decay, int64_t min_ndim = 2);

}  // namespace mantissa::optim
