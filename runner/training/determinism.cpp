#include "runner/training/determinism.h"

#include "nn/conv.h"

namespace mantissa::runner {

std::vector<std::string> nondeterministic_parts(nn::Module& model, Device device) {
  std::vector<std::string> out;
  // The CPU kernels are deterministic (see determinism.h); only CUDA has a known exception.
  if (!device.is_cuda()) return out;
  for (const auto& [name, module] : model.named_modules()) {
    if (dynamic_cast<const nn::Conv2dImpl*>(module.get()) != nullptr) {
      out.push_back("conv2d '" + (name.empty() ? std::string("<root>") : name) + "' on " +
                    device.str() +
                    ": cuDNN may choose a non-deterministic (atomic-add) backward algorithm");
    }
  }
  return out;
}

}  // namespace mantissa::runner
