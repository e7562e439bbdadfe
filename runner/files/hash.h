// FNV-1a 64, the one hash of the runner (config hashes, checkpoint checksums and dataset
// fingerprints; it tells changed bytes apart, it is not a cryptographic hash), and splitmix64, the
// runner's seed mixer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace mantissa::runner {

// splitmix64's finaliser: spreads seeds, epochs and indices over 64 bits so nearby inputs give
// unrelated random streams (the DataLoader's permutations, token blocks' offsets).
inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

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
