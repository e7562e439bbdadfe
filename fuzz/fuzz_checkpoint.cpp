// Fuzz target: the checkpoint reader, runner::read_checkpoint (what `mantissa resume`, `eval`
// and `export` read first, and latest_valid_checkpoint tries on every checkpoint of a run), then
// load_checkpoint into a one-layer model with delayed float8 scaling (Linear 16 -> 16, history
// 4: the seed delayed_float8.ckpt's), which reads the float8 state too.
//
// Input: the file's bytes. Before reading, the target rewrites the stored FNV-1a checksum (when
// the header has a "mantissa.checksum" entry) to match the mutated bytes, as the writer would:
// otherwise nearly every mutation would stop at the checksum and the metadata checks behind it
// would never be reached. A mantissa::Error is a clean refusal.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "fuzz/fuzz_util.h"
#include "nn/float8.h"
#include "runner/training/checkpoint.h"

namespace mt = mantissa;

namespace {

// The writer's checksum (runner/training/checkpoint.cpp): FNV-1a 64 over the whole file with the 16
// hex digits after "mantissa.checksum":" read as '0's.
void fix_checksum(std::string& bytes) {
  constexpr size_t kDigits = 16;
  if (bytes.size() < 8) return;
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  if (n > bytes.size() - 8) return;
  const size_t header_end = 8 + static_cast<size_t>(n);
  const std::string needle = "\"mantissa.checksum\":\"";
  const size_t at = bytes.substr(0, header_end).find(needle);
  if (at == std::string::npos || at + needle.size() + kDigits > header_end) return;
  const size_t pos = at + needle.size();
  bytes.replace(pos, kDigits, kDigits, '0');
  uint64_t h = 14695981039346656037ull;
  for (const char c : bytes) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ull;
  }
  static const char* hex = "0123456789abcdef";
  for (size_t i = 0; i < kDigits; ++i) bytes[pos + kDigits - 1 - i] = hex[(h >> (4 * i)) & 0xf];
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  mt::fuzz::quiet();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  fix_checksum(bytes);
  const std::string path = mt::fuzz::write_scratch("fuzz.ckpt", bytes);
  try {
    const mt::runner::CheckpointInfo info = mt::runner::read_checkpoint(path);
    // What `mantissa export` does next with an accepted checkpoint's weights.
    (void)mt::runner::serialize_safetensors(info.weights);
    static const std::shared_ptr<mt::nn::Module> model = [] {
      auto net = mt::nn::Sequential(mt::nn::Linear(16, 16)).ptr();
      auto config = mt::Float8LinearConfig::from_recipe("delayed");
      config.delayed.amax_history_len = 4;
      mt::nn::convert_to_float8_training(*net, config);
      return std::shared_ptr<mt::nn::Module>(net);
    }();
    mt::runner::CheckpointParts parts;
    parts.model = model.get();
    parts.rng = false;
    mt::runner::load_checkpoint(path, parts);
  } catch (const mt::Error& e) {
    mt::fuzz::refused(e);
  }
  return 0;
}
