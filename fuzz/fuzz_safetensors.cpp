// Fuzz target: the safetensors reader, runner::parse_safetensors (what load_safetensors,
// `mantissa import`, model.init_from and the safetensors dataset read).
//
// Input: the file's bytes. A mantissa::Error is a clean refusal. An accepted file must be
// written back by serialize_safetensors and read again to the same tensors and metadata.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "runner/files/safetensors.h"

namespace mt = mantissa;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  mt::fuzz::quiet();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  mt::runner::SafetensorsFile file;
  try {
    file = mt::runner::parse_safetensors(bytes, "fuzz.safetensors");
  } catch (const mt::Error& e) {
    mt::fuzz::refused(e);
    return 0;
  }
  // Every tensor's bytes are read once, so a tensor whose storage is shorter than its shape
  // says is an ASan report here.
  for (const auto& [name, t] : file.tensors) {
    volatile uint8_t sink = 0;
    const auto* p = static_cast<const uint8_t*>(t.data_ptr());
    for (int64_t i = 0; i < t.nbytes(); ++i) sink = sink ^ p[i];
    (void)sink;
  }
  std::string written;
  mt::runner::SafetensorsFile again;
  try {
    written = mt::runner::serialize_safetensors(file.tensors, file.metadata);
    again = mt::runner::parse_safetensors(written, "rewritten.safetensors");
  } catch (const mt::Error& e) {
    mt::fuzz::finding("an accepted safetensors file does not round-trip: " + std::string(e.what()));
  }
  if (again.metadata != file.metadata || again.tensors.size() != file.tensors.size())
    mt::fuzz::finding("round trip changed the metadata or the number of tensors");
  for (size_t i = 0; i < file.tensors.size(); ++i) {
    const auto& [name, t] = file.tensors[i];
    const auto& [name2, t2] = again.tensors[i];
    if (name != name2 || t.dtype() != t2.dtype() || t.shape() != t2.shape() ||
        t.nbytes() != t2.nbytes() ||
        (t.nbytes() > 0 && std::memcmp(t.data_ptr(), t2.data_ptr(), t.nbytes()) != 0))
      mt::fuzz::finding("round trip changed tensor '" + name + "'");
  }
  return 0;
}
