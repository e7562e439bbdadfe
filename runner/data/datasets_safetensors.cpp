// The safetensors dataset: inputs and targets are two tensors of one file, found by name.
#include "engine/error.h"
#include "runner/data/data.h"
#include "runner/files/safetensors.h"

namespace mantissa::runner {

std::shared_ptr<TensorDataset> load_safetensors_dataset(const SafetensorsDataOptions& o) {
  const SafetensorsFile file = load_safetensors(o.path);
  auto get = [&](const std::string& name, const char* role) {
    const Tensor* t = file.find(name);
    if (t == nullptr) {
      std::string known;
      for (const auto& [n, _] : file.tensors) known += (known.empty() ? "" : ", ") + n;
      MT_THROW("safetensors dataset: '", o.path, "' has no tensor '", name, "' for the ", role,
               " (tensors: ", known, ")");
    }
    return *t;
  };
  // In order, so a file lacking both names reports the inputs first.
  Tensor inputs = get(o.inputs, "inputs");
  Tensor targets = get(o.targets, "targets");
  return std::make_shared<TensorDataset>(inputs, targets, "safetensors " + o.path);
}

}  // namespace mantissa::runner
