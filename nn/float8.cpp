#include "nn/float8.h"

#include <memory>

namespace mantissa::nn {

bool float8_dims_ok(const std::string& /*name*/, const LinearImpl& layer) {
  return layer.in_features % 16 == 0 && layer.out_features % 16 == 0;
}

std::vector<std::string> convert_to_float8_training(Module& root, const Float8LinearConfig& config,
                                                    const Float8Filter& filter) {
  config.validate("convert_to_float8_training");
  std::vector<std::string> converted;
  for (const auto& [name, module] : root.named_modules()) {
    auto* linear = dynamic_cast<LinearImpl*>(module.get());
    if (linear == nullptr || !filter(name, *linear)) continue;
    linear->float8 = config;
    converted.push_back(name);
  }
  return converted;
}

}  // namespace mantissa::nn
