// safetensors files (https://github.com/huggingface/safetensors): the weight format PyTorch,
// transformers and friends read and write, so a model trained here loads there and the reverse.
//
//   [8 bytes: N, little-endian u64][N bytes: JSON header][data buffer]
//   header: {"__metadata__": {str: str}, name: {"dtype": "F32", "shape": [..],
//            "data_offsets": [begin, end]}, ...}, offsets relative to the data buffer start.
//
// Tensors are row-major, little-endian, contiguous, and together cover the data buffer exactly
// (as the reference implementation requires). Names and layouts are PyTorch's: "net1.weight" is
// [out_features, in_features].
//
// Reading validates everything before touching the data and never reads outside the file: a
// malformed file (bad header length, invalid JSON, unknown dtype, shape/offset mismatch, offsets
// out of range or overlapping or leaving gaps, truncated data, duplicate names) is refused with a
// mantissa::Error naming the file and the problem.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/tensor.h"

namespace mantissa::nn {
class Module;
}

namespace mantissa::runner {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

struct SafetensorsFile {
  NamedTensors tensors;  // in data-buffer order; CPU, contiguous
  std::map<std::string, std::string> metadata;

  // The tensor called `name`, or null.
  const Tensor* find(std::string_view name) const;
  // Throws (naming the tensor and the names present) if there is none.
  const Tensor& at(std::string_view name) const;
  std::vector<std::string> names() const;
};

// The safetensors dtype code ("F32", "BF16", "I64", "BOOL", ...) of a mantissa dtype, and back.
// Codes mantissa has no dtype for (I8, I16, U16, U32, U64, F8_E8M0, F4, F6_*, C64) are refused by
// name.
std::string_view safetensors_dtype_code(DType dtype);
DType dtype_from_safetensors_code(std::string_view code, std::string_view what);

// The whole file as bytes. Tensors are written in the order given (deterministic output); CUDA
// and non-contiguous tensors are copied to contiguous CPU memory first. The header is padded
// with spaces to a multiple of 8 bytes, as the reference writer does. Duplicate or empty names
// are refused.
std::string serialize_safetensors(const NamedTensors& tensors,
                                  const std::map<std::string, std::string>& metadata = {});
// serialize_safetensors written atomically to `path` (see atomic_file.h).
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Parses bytes produced by a safetensors writer. `what` names the source in errors (a path).
SafetensorsFile parse_safetensors(std::string_view bytes, std::string_view what);
// Reads and parses a file (strict validation; CPU tensors).
SafetensorsFile load_safetensors(const std::string& path);

// A module's state_dict (parameters and buffers, PyTorch names) as named tensors.
NamedTensors module_tensors(const nn::Module& module);
// save_safetensors(path, module_tensors(module), metadata).
void save_weights(const nn::Module& module, const std::string& path,
                  const std::map<std::string, std::string>& metadata = {});

struct LoadWeightsReport {
  std::vector<std::string> missing_keys;     // in the module, not in the file
  std::vector<std::string> unexpected_keys;  // in the file, not in the module
  std::vector<std::string> converted_keys;   // loaded with a dtype conversion
};
// Copies the file's tensors into the module's parameters and buffers by name, as PyTorch's
// load_state_dict: shapes must match; values are converted to each parameter's dtype and device.
// strict: any missing or unexpected key is an error listing all of them (nothing is modified);
// otherwise they are reported and the matching keys are loaded. A shape mismatch is always an
// error.
LoadWeightsReport load_weights(nn::Module& module, const SafetensorsFile& file, bool strict = true);

}  // namespace mantissa::runner
