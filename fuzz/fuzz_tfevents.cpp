// Fuzz target: the TensorBoard event file reader (runner/training/tensorboard.h), which a resumed
// run uses to keep the events up to its checkpoint.
//
// Input: an event file's bytes. It stops at a torn record and skips a corrupt one; each event it
// returns is a whole record of at least 16 bytes of framing.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "runner/training/tensorboard.h"

namespace mt = mantissa;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  mt::fuzz::quiet();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    const auto events = mt::runner::parse_tensorboard_events(bytes);
    // A record is at least 16 bytes of framing.
    if (events.size() > size / 16) std::abort();
  } catch (const mt::Error& e) {
    mt::fuzz::refused(e);
  }
  return 0;
}
