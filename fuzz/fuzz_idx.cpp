// Fuzz target: the MNIST IDX reader, runner::load_mnist_idx (data.type: mnist).
//
// Input: one options byte (bit 0: flatten; bits 1-7: limit, 0 for none), a 4-byte little-endian
// length L, then the images file (the next L bytes, or all that is left) and the labels file
// (the rest). A mantissa::Error is a clean refusal. An accepted pair must give a dataset whose
// every example can be read.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "runner/data/data.h"

namespace mt = mantissa;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  mt::fuzz::quiet();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 5) return 0;
  mt::runner::MnistOptions options;
  options.flatten = data[0] & 1;
  options.limit = data[0] >> 1;
  const uint32_t len = uint32_t(data[1]) | uint32_t(data[2]) << 8 | uint32_t(data[3]) << 16 |
                       uint32_t(data[4]) << 24;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 5, size - 5);
  const size_t split = std::min<size_t>(len, rest.size());
  options.images = mt::fuzz::write_scratch("images.idx3-ubyte", rest.substr(0, split));
  options.labels = mt::fuzz::write_scratch("labels.idx1-ubyte", rest.substr(split));
  try {
    const auto dataset = mt::runner::load_mnist_idx(options);
    mt::fuzz::gather_every_example(*dataset);
  } catch (const mt::Error& e) {
    mt::fuzz::refused(e);
  }
  return 0;
}
