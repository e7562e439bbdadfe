// Float8 training as a precision policy: the Linear layers of any model run their three products
// in float8 (torchao's convert_to_float8_training, without swapping modules: each converted
// nn::Linear keeps its parameters and runs float8_linear, engine/ops.def).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "nn/layers.h"

namespace mantissa::nn {

// Which Linear layers to convert: the layer's qualified name (as named_modules gives it) and the
// layer. The default takes a layer whose in_features and out_features are multiples of 16, the
// shapes cuBLASLt's float8 GEMM takes.
using Float8Filter = std::function<bool(const std::string& name, const LinearImpl& layer)>;
bool float8_dims_ok(const std::string& name, const LinearImpl& layer);

// Sets `config` on every nn::Linear under `root` (root included) that `filter` takes, and
// returns their names; the others are left as they are. Converting again replaces the config.
std::vector<std::string> convert_to_float8_training(Module& root,
                                                    const Float8LinearConfig& config = {},
                                                    const Float8Filter& filter = float8_dims_ok);

}  // namespace mantissa::nn
