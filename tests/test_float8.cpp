// engine/float8.h against PyTorch 2.x (tests/golden/float8.txt, written by
// scripts/golden/make_float8.py): every code of both formats decodes to PyTorch's float32 bits,
// and every one of the 2^32 float32 bit patterns encodes to PyTorch's code, checked by digests of
// chunks of 2^24 patterns. The golden file holds 64-bit digests and bit patterns, not the float
// records of golden_file.h, so it has its own few lines of reading here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/float8.h"
#include "runner/files/safetensors.h"
#include "test_util.h"

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

// ---- the dtypes kFloat8E4M3FN and kFloat8E5M2: storage types reached by casts

namespace {

const std::vector<double> kEdges = {0.0,     -0.0,
                                    0.5,     -1.0,
                                    448.0,   464.0,
                                    465.0,   500.0,
                                    1e9,     -1e9,
                                    57344.0, 61439.0,
                                    61440.0, std::ldexp(1.0, -10),
                                    1e-12,   0.3,
                                    -3.7,    std::numeric_limits<double>::infinity()};

}  // namespace

// A tensor cast gives the value type's bits from every source dtype (through float, as PyTorch),
// and casts back exactly; a float8 tensor casts to the other float8 type through float.
TEST(Float8Tensor, CastsAreTheValueTypesFromEverySourceDtype) {
  const mt::Tensor f64 = mt::from_vector(kEdges);
  for (const mt::DType src : {mt::kFloat64, mt::kFloat32, mt::kFloat16, mt::kBFloat16}) {
    const mt::Tensor x = f64.to(src);
    const std::vector<float> xf = x.to(mt::kFloat32).to_vector<float>();
    const auto a = x.to(mt::kFloat8E4M3FN), b = x.to(mt::kFloat8E5M2);
    EXPECT_EQ(a.dtype(), mt::kFloat8E4M3FN);
    EXPECT_EQ(a.element_size(), 1);
    const std::vector<mt::Float8E4M3FN> av = a.to_vector<mt::Float8E4M3FN>();
    const std::vector<mt::Float8E5M2> bv = b.to_vector<mt::Float8E5M2>();
    const std::vector<float> back = a.to(mt::kFloat32).to_vector<float>();
    for (size_t i = 0; i < xf.size(); ++i) {
      SCOPED_TRACE(std::string(mt::dtype_name(src)) + " " + std::to_string(kEdges[i]));
      EXPECT_EQ(av[i].x, mt::Float8E4M3FN(xf[i]).x);
      EXPECT_EQ(bv[i].x, mt::Float8E5M2(xf[i]).x);
      EXPECT_EQ(mt::detail::float_bits(back[i]), mt::detail::float_bits(float(av[i])));
    }
  }
  // Integers go through float too; float8 to float8 through float.
  const mt::Tensor ints = mt::from_vector(std::vector<int64_t>{0, 3, -17, 447, 449, 100000});
  EXPECT_EQ(ints.to(mt::kFloat8E4M3FN).to(mt::kFloat32).to_vector<float>(),
            (std::vector<float>{0, 3, -16, 448, 448, 448}));
  const mt::Tensor e5 =
      mt::from_vector(std::vector<double>{0.3, 57344.0, -3.7}).to(mt::kFloat8E5M2);
  const std::vector<float> e5f = e5.to(mt::kFloat32).to_vector<float>();
  const std::vector<mt::Float8E4M3FN> e4 = e5.to(mt::kFloat8E4M3FN).to_vector<mt::Float8E4M3FN>();
  for (size_t i = 0; i < e5f.size(); ++i) EXPECT_EQ(e4[i].x, mt::Float8E4M3FN(e5f[i]).x);
  EXPECT_EQ(float(mt::full({}, 3.0, mt::kFloat8E5M2).item<mt::Float8E5M2>()), 3.0f);
  // A cast saturates (float8_e4m3fn) or overflows to infinity (float8_e5m2) where full and fill_
  // refuse the value (tests/test_pointwise.cpp, FillValues, against PyTorch).
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<std::pair<double, float>> e4m3 = {
      {464.0, 448}, {500.0, 448}, {1e6, 448}, {inf, 448}, {-inf, -448}};
  const std::vector<std::pair<double, float>> e5m2 = {
      {500.0, 512}, {57344.0, 57344}, {61440.0, INFINITY}, {1e6, INFINITY}, {-inf, -INFINITY}};
  for (const auto& [dtype, cases] : {std::pair{mt::kFloat8E4M3FN, e4m3}, {mt::kFloat8E5M2, e5m2}}) {
    for (const auto& [v, want] : cases) {
      EXPECT_EQ(mt::full({1}, v, mt::TensorOptions().dtype(mt::kFloat64))
                    .to(dtype)
                    .to(mt::kFloat32)
                    .item<float>(),
                want)
          << dtype << " " << v;
    }
    EXPECT_TRUE(std::isnan(mt::full({1}, std::nan(""), dtype).to(mt::kFloat32).item<float>()));
  }
}

// PyTorch 2.15's repr of the same tensors.
TEST(Float8Tensor, PrintsAsPyTorch) {
  const mt::Tensor x = mt::from_vector(std::vector<double>{
      0.5, -1.0, 448.0, 500.0, 0.001953125, std::numeric_limits<double>::quiet_NaN()});
  EXPECT_EQ(x.to(mt::kFloat8E4M3FN).str(),
            "tensor([ 5.0000e-01, -1.0000e+00,  4.4800e+02,  4.4800e+02,  1.9531e-03,\n"
            "                nan], dtype=torch.float8_e4m3fn)");
  EXPECT_EQ(x.to(mt::kFloat8E5M2).str(),
            "tensor([ 5.0000e-01, -1.0000e+00,  4.4800e+02,  5.1200e+02,  1.9531e-03,\n"
            "                nan], dtype=torch.float8_e5m2)");
  EXPECT_EQ(mt::from_vector(std::vector<double>{1.0, 2.0}).to(mt::kFloat8E4M3FN).str(),
            "tensor([1., 2.], dtype=torch.float8_e4m3fn)");
}

// Storage types: arithmetic names the op and the dtype, and mixing with another dtype is refused
// as PyTorch refuses it.
TEST(Float8Tensor, ArithmeticAndPromotionAreRefused) {
  const mt::Tensor a = mt::ones({3}).to(mt::kFloat8E4M3FN);
  mt::testing::expect_error([&] { (void)mt::exp(a); },
                            {"exp", "not implemented for dtype float8_e4m3fn"});
  mt::testing::expect_error([&] { (void)(a * a); }, {"mul", "float8_e4m3fn"});
  mt::testing::expect_error(
      [&] { (void)(a + mt::ones({3})); },
      {"promotion of float8 types is not supported", "float8_e4m3fn", "float32"});
  EXPECT_EQ(mt::parse_dtype("float8_e5m2"), mt::kFloat8E5M2);
  EXPECT_TRUE(mt::is_floating(mt::kFloat8E4M3FN));
}

// safetensors' F8_E4M3 and F8_E5M2 (the codes PyTorch's safetensors writes for the two dtypes)
// read and write the bytes as they are.
TEST(Float8Tensor, SafetensorsKeepsTheBytes) {
  const mt::Tensor x = mt::from_vector(kEdges);
  const mt::runner::NamedTensors tensors = {{"a", x.to(mt::kFloat8E4M3FN)},
                                            {"b", x.to(mt::kFloat8E5M2).reshape({3, 6})}};
  const std::string bytes = mt::runner::serialize_safetensors(tensors);
  EXPECT_NE(bytes.find("\"F8_E4M3\""), std::string::npos);
  EXPECT_NE(bytes.find("\"F8_E5M2\""), std::string::npos);
  const mt::runner::SafetensorsFile back = mt::runner::parse_safetensors(bytes, "float8");
  for (const auto& [name, t] : tensors) {
    const mt::Tensor& r = back.at(name);
    EXPECT_EQ(r.dtype(), t.dtype()) << name;
    EXPECT_EQ(r.shape(), t.shape()) << name;
    EXPECT_EQ(0, std::memcmp(r.data_ptr(), t.contiguous().data_ptr(), t.numel())) << name;
  }
}
