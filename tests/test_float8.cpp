// engine/float8.h against PyTorch 2.x (tests/golden/float8.txt, written by
// scripts/golden/make_float8.py): every code of both formats decodes to PyTorch's float32 bits,
// and every one of the 2^32 float32 bit patterns encodes to PyTorch's code, checked by digests of
// chunks of 2^24 patterns. The golden file holds 64-bit digests and bit patterns, not the float
// records of golden_file.h, so it has its own few lines of reading here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/float8.h"

namespace mt = mantissa;

namespace {

std::string source_dir() {
  const char* s = std::getenv("MANTISSA_SOURCE_DIR");
  return s ? s : ".";
}

// "KIND FORMAT h0 h1 ..." lines, by KIND and FORMAT.
std::map<std::string, std::vector<uint64_t>> golden() {
  const std::string path = source_dir() + "/tests/golden/float8.txt";
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot read " << path;
  std::map<std::string, std::vector<uint64_t>> lines;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string kind, format, hex;
    words >> kind >> format;
    if (kind == "torch") continue;
    EXPECT_TRUE(kind == "decode" || kind == "encode") << path << ": " << line.substr(0, 40);
    std::vector<uint64_t>& values = lines[kind + " " + format];
    while (words >> hex) values.push_back(std::stoull(hex, nullptr, 16));
    EXPECT_EQ(values.size(), 256u) << path << ": " << kind << " " << format;
  }
  return lines;
}

float decode(const char* format, uint8_t code) {
  return std::string(format) == "float8_e4m3fn" ? float(mt::Float8E4M3FN(code, mt::from_bits))
                                                : float(mt::Float8E5M2(code, mt::from_bits));
}
uint8_t encode(const char* format, float x) {
  return std::string(format) == "float8_e4m3fn" ? mt::Float8E4M3FN(x).x : mt::Float8E5M2(x).x;
}

// The golden file's digest of chunk c (patterns c * 2^24 ... (c + 1) * 2^24 - 1).
template <typename F>
uint64_t chunk_digest(uint32_t c) {
  uint64_t digest = 0;
  const uint64_t first = static_cast<uint64_t>(c) << 24;
  for (uint64_t u = first; u < first + (uint64_t{1} << 24); ++u) {
    const uint8_t code = F(mt::detail::bits_float(static_cast<uint32_t>(u))).x;
    digest += code * ((u * 0x9E3779B97F4A7C15ull) | 1u);
  }
  return digest;
}

// Every chunk's digest, on two threads.
template <typename F>
std::vector<uint64_t> all_digests() {
  std::vector<uint64_t> digests(256);
  auto half = [&digests](uint32_t from, uint32_t to) {
    for (uint32_t c = from; c < to; ++c) digests[c] = chunk_digest<F>(c);
  };
  std::thread other(half, 128u, 256u);
  half(0u, 128u);
  other.join();
  return digests;
}

const char* const kFormats[] = {"float8_e4m3fn", "float8_e5m2"};

}  // namespace

TEST(Float8, EveryCodeDecodesAsPyTorch) {
  const auto g = golden();
  for (const char* format : kFormats) {
    const std::vector<uint64_t>& want = g.at(std::string("decode ") + format);
    for (int code = 0; code < 256; ++code) {
      EXPECT_EQ(mt::detail::float_bits(decode(format, static_cast<uint8_t>(code))),
                static_cast<uint32_t>(want[code]))
          << format << " code 0x" << std::hex << code;
    }
  }
}

TEST(Float8, EveryFloat32EncodesAsPyTorch) {
  const auto g = golden();
  const std::vector<uint64_t> e4m3 = all_digests<mt::Float8E4M3FN>();
  const std::vector<uint64_t> e5m2 = all_digests<mt::Float8E5M2>();
  for (uint32_t c = 0; c < 256; ++c) {
    EXPECT_EQ(e4m3[c], g.at("encode float8_e4m3fn")[c])
        << "float8_e4m3fn: the float32 patterns 0x" << std::hex << (c << 24) << " to 0x"
        << ((c << 24) | 0xffffffu);
    EXPECT_EQ(e5m2[c], g.at("encode float8_e5m2")[c])
        << "float8_e5m2: the float32 patterns 0x" << std::hex << (c << 24) << " to 0x"
        << ((c << 24) | 0xffffffu);
  }
}

// Every finite code converts back to itself, and is exactly a bfloat16 and a float16 value (what
// lets the CPU multiply FP8 operands on its 16-bit paths). A NaN code gives the format's NaN of
// its sign.
TEST(Float8, EveryCodeRoundTripsAndIsABFloat16AndAHalf) {
  for (const char* format : kFormats) {
    for (int code = 0; code < 256; ++code) {
      const float f = decode(format, static_cast<uint8_t>(code));
      SCOPED_TRACE(std::string(format) + " code " + std::to_string(code));
      if (std::isnan(f)) {
        EXPECT_EQ(encode(format, f), (code & 0x80) | 0x7f);
        continue;
      }
      EXPECT_EQ(encode(format, f), code);
      EXPECT_EQ(encode(format, static_cast<double>(f)), code);
      EXPECT_EQ(mt::detail::float_bits(float(mt::BFloat16(f))), mt::detail::float_bits(f));
      EXPECT_EQ(mt::detail::float_bits(float(mt::Half(f))), mt::detail::float_bits(f));
    }
  }
}

// The edges PyTorch 2.x draws: e4m3fn saturates (no infinity), e5m2 overflows to infinity from
// the tie above its largest value, both round to nearest even below their smallest subnormal.
TEST(Float8, SaturationOverflowAndTiesAsPyTorch) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const float x : {448.0f, 464.0f, 465.0f, 480.0f, 500.0f, 1e9f, 3.0e38f, inf}) {
    EXPECT_EQ(float(mt::Float8E4M3FN(x)), 448.0f) << x;
    EXPECT_EQ(float(mt::Float8E4M3FN(-x)), -448.0f) << x;
  }
  EXPECT_EQ(float(mt::Float8E4M3FN(447.0f)), 448.0f);
  EXPECT_EQ(float(mt::Float8E4M3FN(432.0f)), 448.0f);  // the tie between 416 and 448: even
  EXPECT_EQ(mt::Float8E4M3FN(nan).x, 0x7f);
  EXPECT_EQ(mt::Float8E4M3FN(-nan).x, 0xff);
  EXPECT_EQ(float(mt::Float8E4M3FN(std::ldexp(1.0f, -10))), 0.0f);  // half the least: even, 0
  EXPECT_EQ(float(mt::Float8E4M3FN(std::ldexp(1.01f, -10))), std::ldexp(1.0f, -9));
  EXPECT_EQ(float(mt::Float8E5M2(57344.0f)), 57344.0f);
  EXPECT_EQ(float(mt::Float8E5M2(61439.0f)), 57344.0f);
  EXPECT_EQ(float(mt::Float8E5M2(61440.0f)), inf);  // the tie with 2^16: even, infinity
  EXPECT_EQ(float(mt::Float8E5M2(-1e9f)), -inf);
  EXPECT_EQ(mt::Float8E5M2(inf).x, 0x7c);
  EXPECT_EQ(mt::Float8E5M2(nan).x, 0x7f);
  EXPECT_EQ(mt::Float8E5M2(-nan).x, 0xff);
  EXPECT_EQ(float(mt::Float8E5M2(std::ldexp(1.0f, -17))), 0.0f);
  EXPECT_EQ(float(mt::Float8E5M2(std::ldexp(3.0f, -17))), std::ldexp(1.0f, -15));  // 1.5: even
  // A double is rounded to float first, as PyTorch does: 2^-10 + 2^-40 becomes the tie 2^-10.
  EXPECT_EQ(float(mt::Float8E4M3FN(std::ldexp(1.0, -10) + std::ldexp(1.0, -40))), 0.0f);
}
