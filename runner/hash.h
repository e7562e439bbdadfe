// FNV-1a 64, the one hash of the runner: config hashes, checkpoint checksums and dataset
// fingerprints. It tells changed bytes apart; it is not a cryptographic hash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace mantissa::runner {

class Fnv1a64 {
 public:
  Fnv1a64& add(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) {
      h_ ^= p[i];
      h_ *= 1099511628211ull;
    }
    return *this;
  }
  Fnv1a64& add(std::string_view bytes) { return add(bytes.data(), bytes.size()); }
  uint64_t value() const { return h_; }
  // 16 lowercase hex digits.
  std::string hex() const {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string s(16, '0');
    for (size_t i = 0; i < 16; ++i) s[15 - i] = kDigits[(h_ >> (4 * i)) & 0xf];
    return s;
  }

 private:
  uint64_t h_ = 14695981039346656037ull;
};

}  // namespace mantissa::runner
