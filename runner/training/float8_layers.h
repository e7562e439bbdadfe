// The run config's float8 section applied to a model (docs/mixed-precision.md, nn/float8.h).
#pragma once

#include <string>
#include <vector>

#include "nn/module.h"
#include "runner/config/config.h"

namespace mantissa::runner {

// Converts the Linear layers the section names and says which in a start-up line (added to
// `lines`); turns float8 stats on when asked. A pattern that names no Linear layer, or names one
// whose features are not multiples of 16, a key of another recipe, and a section that converts
// nothing are config errors naming the key.
void apply_float8(const Config& c, nn::Module& model, std::vector<std::string>& lines);

}  // namespace mantissa::runner
