// The CPU's GEMM paths against each other (engine/cpu_matmul_paths.h). bfloat16 products on the
// CPU's bf16 instructions (AMX-BF16 or AVX512-BF16 through oneDNN, kernels/cpu/gemm/bf16_gemm.h)
// against the emulation they replace (operands widened to float32, SGEMM), op by op here and
// over the GPT trajectory in tests/test_gpt.cpp; on a CPU without bf16 instructions those skip,
// saying so: only the emulation exists there. float32 GEMMs on oneDNN against OpenBLAS.
//
// The bound. Both paths multiply bf16 values exactly (8-bit significands: a product fits
// float32's 24 bits) and sum the K products of an element in float32, in different orders. Each
// sum is within gamma_K * S of the exact one, S = sum_k |a_ik b_kj| and gamma_K = K u / (1 - K u),
// u = 2^-24 (Higham, Accuracy and Stability, 3.1), so the two are within 2 gamma_K S before the
// store. Each rounding to bf16 after that can move them apart by one more bf16 unit in the last
// place of the larger value (2^(e-7) for a value in [2^e, 2^(e+1))).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "autograd/functions.h"
#include "engine/cpu_matmul_paths.h"
#include "kernels/cpu/gemm/bf16_gemm.h"
#include "kernels/cpu/gemm/sgemm.h"
#include "nn/functional.h"
#include "test_util.h"

namespace mt = mantissa;
using mt::Shape;
using mt::Tensor;
using mt::cpu::Bf16MatmulIsa;

namespace {

bool has_bf16_instructions() {
  return mt::cpu::cpu_bf16_matmul_isa_available() != Bf16MatmulIsa::Emulated;
}

#define REQUIRE_BF16_INSTRUCTIONS()                                                            \
  do {                                                                                         \
    if (!has_bf16_instructions())                                                              \
      GTEST_SKIP() << "this CPU has no bf16 instructions oneDNN runs (no avx512_bf16 or "      \
                      "amx_bf16 usable): bf16 products are emulated here, nothing to compare"; \
  } while (0)

// Forces the emulation (or not) for a scope.
class Emulation {
 public:
  explicit Emulation(bool on) : saved_(mt::cpu::cpu_bf16_matmul_emulation()) {
    mt::cpu::set_cpu_bf16_matmul_emulation(on);
  }
  ~Emulation() { mt::cpu::set_cpu_bf16_matmul_emulation(saved_); }

 private:
  bool saved_;
};

double ulp_bf16(double x) {
  x = std::abs(x);
  if (x < std::ldexp(1.0, -126)) return std::ldexp(1.0, -133);  // subnormal spacing
  return std::ldexp(1.0, std::ilogb(x) - 7);
}

double gamma(int64_t k) {
  const double u = std::ldexp(1.0, -24);
  return double(k) * u / (1.0 - double(k) * u);
}

// hw and em (same shape, any dtype) within 2 gamma_K S + roundings ulp_bf16(max(|hw|, |em|) +
// shift), elementwise; S is |A| @ |B| in float64, `shift` the largest value added after the
// first rounding (a bias).
void expect_within_bound(const Tensor& hw, const Tensor& em, const Tensor& s, int64_t k,
                         int roundings, double shift, const std::string& what) {
  ASSERT_EQ(hw.shape(), em.shape()) << what;
  ASSERT_EQ(hw.shape(), s.shape()) << what;
  const auto h = hw.to_vector<double>(), e = em.to_vector<double>(), sv = s.to_vector<double>();
  int reported = 0;
  for (size_t i = 0; i < h.size(); ++i) {
    const double bound = 2 * gamma(k) * sv[i] +
                         roundings * ulp_bf16(std::max(std::abs(h[i]), std::abs(e[i])) + shift);
    if (std::abs(h[i] - e[i]) > bound && reported++ < 5)
      ADD_FAILURE() << what << " element " << i << ": hardware " << h[i] << ", emulated " << e[i]
                    << ", bound " << bound;
  }
}

Tensor abs64(const Tensor& t) { return mt::abs(t.to(mt::kFloat64)); }

Tensor rand_bf16(const Shape& shape, uint64_t seed) {
  mt::manual_seed(seed);
  return mt::testing::random_tensor(shape, mt::kBFloat16, false);
}

// On a CPU with AMX, every product of these dense layouts runs on the tiles: oneDNN's AMX kernels
// need dense operands and results, and a slab split that breaks that falls to its vdpbf16ps
// kernels, still bf16 but several times slower.
void expect_all_on_amx_tiles(const mt::testing::CpuMatmulCounts& s, const std::string& what) {
  if (mt::cpu::cpu_bf16_matmul_isa() == Bf16MatmulIsa::AmxBf16) {
    EXPECT_EQ(s.bf16_amx, s.bf16_hardware) << what;
  } else {
    EXPECT_EQ(s.bf16_amx, 0) << what;
  }
}

// Runs f() on the hardware path and on the emulation.
template <typename F>
std::pair<Tensor, Tensor> both_paths(const F& f) {
  Tensor hw, em;
  {
    Emulation off(false);
    hw = f();
  }
  {
    Emulation on(true);
    em = f();
  }
  return {hw, em};
}

std::set<std::string> cpu_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream fs(line.substr(line.find(':') + 1));
    std::set<std::string> flags;
    for (std::string f; fs >> f;) flags.insert(f);
    return flags;
  }
  return {};
}

}  // namespace

// The path named is the one the CPU's flags allow: a CPU with bf16 instructions never silently
// keeps the emulation, and one without them never claims them.
TEST(CpuBf16Matmul, IsaFollowsTheCpuFlags) {
  const auto flags = cpu_flags();
  if (flags.empty()) GTEST_SKIP() << "no /proc/cpuinfo flags line to compare with";
  const Bf16MatmulIsa isa = mt::cpu::cpu_bf16_matmul_isa_available();
  std::cout << "bf16 matmul path: " << mt::cpu::bf16_matmul_isa_name(isa) << "\n";
  if (flags.count("avx512_bf16") || flags.count("amx_bf16")) {
    EXPECT_NE(isa, Bf16MatmulIsa::Emulated);
  } else {
    EXPECT_EQ(isa, Bf16MatmulIsa::Emulated);
  }
  if (isa == Bf16MatmulIsa::AmxBf16) {
    EXPECT_TRUE(flags.count("amx_bf16"));
  }
  EXPECT_EQ(mt::cpu::bf16_matmul_isa_name(Bf16MatmulIsa::Emulated), "emulated (float32 SGEMM)");
}

TEST(CpuBf16Matmul, EmulationSwitchAndCounters) {
  Emulation on(true);
  EXPECT_EQ(mt::cpu::cpu_bf16_matmul_isa(), Bf16MatmulIsa::Emulated);
  mt::reset_fast_path_stats();
  (void)mt::matmul(rand_bf16({64, 128}, 1), rand_bf16({128, 64}, 2));
  auto s = mt::testing::cpu_matmul_counts();
  EXPECT_EQ(s.bf16_hardware, 0);
  EXPECT_EQ(s.bf16_emulated, 1);
  if (!has_bf16_instructions()) return;
  mt::cpu::set_cpu_bf16_matmul_emulation(false);
  EXPECT_EQ(mt::cpu::cpu_bf16_matmul_isa(), mt::cpu::cpu_bf16_matmul_isa_available());
  (void)mt::matmul(rand_bf16({64, 128}, 1), rand_bf16({128, 64}, 2));
  s = mt::testing::cpu_matmul_counts();
  EXPECT_EQ(s.bf16_hardware, 1);
  EXPECT_EQ(s.bf16_emulated, 1);
  EXPECT_EQ(s.bf16_fallbacks, 0);
}

// bmm and matmul over the layouts the kernel hands oneDNN in place (row-major, transposed,
// broadcast batch) and the one it packs first (a strided view), at sizes small enough for one
// call and large enough to be split across the worker pool, with odd sizes that leave partial
// AMX tiles.
TEST(CpuBf16Matmul, BmmMatchesTheEmulationWithinTheSummationBound) {
  REQUIRE_BF16_INSTRUCTIONS();
  struct Case {
    int64_t b, m, k, n;
  };
  for (const Case c : {Case{1, 17, 65, 33}, Case{3, 16, 48, 16}, Case{1, 512, 1024, 256},
                       Case{1, 64, 2048, 640}, Case{12, 64, 64, 64}, Case{40, 33, 129, 7}}) {
    const Tensor a = rand_bf16({c.b, c.m, c.k}, 10 + c.m);
    const Tensor b = rand_bf16({c.b, c.k, c.n}, 20 + c.n);
    const Tensor bt = rand_bf16({c.b, c.n, c.k}, 30 + c.k).transpose(1, 2);  // transposed view
    const Tensor at = rand_bf16({c.b, c.k, c.m}, 40 + c.k).transpose(1, 2);
    const Tensor strided = rand_bf16({c.b, c.m, 2 * c.k}, 50).slice(2, 0, std::nullopt, 2);
    const Tensor shared = rand_bf16({c.k, c.n}, 60);  // broadcast over the batch by matmul
    const std::string name = std::to_string(c.b) + "x" + std::to_string(c.m) + "x" +
                             std::to_string(c.k) + "x" + std::to_string(c.n);
    mt::reset_fast_path_stats();
    struct Pair {
      Tensor x, y;
      const char* layout;
    };
    for (const Pair& p : {Pair{a, b, "NN"}, Pair{a, bt, "NT"}, Pair{at, b, "TN"},
                          Pair{strided, b, "strided"}, Pair{a, shared, "broadcast"}}) {
      const auto [hw, em] = both_paths([&] { return mt::matmul(p.x, p.y); });
      EXPECT_EQ(hw.dtype(), mt::kBFloat16);
      const Tensor s = mt::matmul(abs64(p.x), abs64(p.y));
      expect_within_bound(hw, em, s, c.k, 1, 0.0, name + " " + p.layout);
    }
    const auto stats = mt::testing::cpu_matmul_counts();
    EXPECT_EQ(stats.bf16_hardware, 5) << name;
    EXPECT_EQ(stats.bf16_fallbacks, 0) << name;
    expect_all_on_amx_tiles(stats, name);
  }
}

// The fused linear kernels (forward with bias and ReLU; the weight, input and bias gradients)
// read bf16 operands as stored and finish with the same passes as the emulation.
TEST(CpuBf16Matmul, LinearForwardAndBackwardMatchTheEmulation) {
  REQUIRE_BF16_INSTRUCTIONS();
  using Act = mt::nn::functional::Activation;
  for (const Act act : {Act::None, Act::Relu}) {
    for (const int64_t m : {int64_t(5), int64_t(256)}) {
      const int64_t k = 384, n = 320;
      const Tensor x0 = rand_bf16({m, k}, 1), w0 = rand_bf16({n, k}, 2), b0 = rand_bf16({n}, 3);
      const Tensor go = rand_bf16({m, n}, 4);
      struct Result {
        Tensor y, gx, gw, gb;
      };
      auto run = [&] {
        Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true),
               b = b0.clone().requires_grad_(true);
        Tensor y = mt::nn::functional::linear(x, w, b, act);
        y.backward(go);
        return Result{y.detach(), x.grad(), w.grad(), b.grad()};
      };
      Result hw, em;
      {
        Emulation off(false);
        mt::reset_fast_path_stats();
        hw = run();
        const auto stats = mt::testing::cpu_matmul_counts();
        EXPECT_EQ(stats.bf16_hardware, 3);  // forward, grad_x, grad_w
        // (With m = 5 the weight gradient sums over 5 rows: too short for a tile, which
        // oneDNN runs on vdpbf16ps instead.)
        if (m >= 32) expect_all_on_amx_tiles(stats, "linear m=" + std::to_string(m));
      }
      {
        Emulation on(true);
        em = run();
      }
      const std::string name =
          std::string(act == Act::Relu ? "relu" : "identity") + " m=" + std::to_string(m);
      const double bias_max = mt::max(abs64(b0)).item<double>();
      expect_within_bound(hw.y, em.y, mt::matmul(abs64(x0), abs64(w0).t()), k, 2, bias_max,
                          name + " forward");
      // ReLU's mask comes from each path's own output: where the outputs straddle zero the
      // gradients legitimately differ, so only elements where both outputs agree in sign count.
      Tensor mask = (hw.y.to(mt::kFloat64) > 0) == (em.y.to(mt::kFloat64) > 0);
      ASSERT_GT(mask.to(mt::kFloat64).sum().item<double>(), 0.99 * double(m * n)) << name;
      const Tensor g =
          act == Act::Relu ? go.to(mt::kFloat64) * mask.to(mt::kFloat64) : go.to(mt::kFloat64);
      expect_within_bound(hw.gw, em.gw, mt::matmul(abs64(g).t(), abs64(x0)), m, 1, 0.0,
                          name + " grad_w");
      if (act == Act::None) {
        expect_within_bound(hw.gx, em.gx, mt::matmul(abs64(go), abs64(w0)), n, 1, 0.0,
                            name + " grad_x");
        // Column sums of the same bf16 gradient: identical.
        EXPECT_TRUE(mt::equal(hw.gb, em.gb)) << name;
      }
    }
  }
}

// The convolution's GEMMs (forward; the input gradient, whose columns col2im sums back onto the
// image; the weight gradient, accumulated over the batch with beta = 1) with bfloat16 operands.
TEST(CpuBf16Matmul, Conv2dMatchesTheEmulationWithinTheSummationBound) {
  REQUIRE_BF16_INSTRUCTIONS();
  // og = 32: the input gradient's products sum over og, and shorter sums are too short for an
  // AMX tile (oneDNN runs them on vdpbf16ps).
  // The weight gradient's products (og x cg kh kw x 32 x 32 = 9.4 M multiply-adds) are large
  // enough to be split across the pool, with beta = 1 (kernels/cpu/gemm/bf16_gemm.cpp).
  const int64_t groups = 2, cg = 16, og = 64, kh = 3, side = 32;
  const Tensor x0 = rand_bf16({2, groups * cg, side, side}, 1);
  const Tensor w0 = rand_bf16({groups * og, cg, kh, kh}, 2);
  const Tensor b0 = rand_bf16({groups * og}, 3);
  const Tensor go = rand_bf16({2, groups * og, side, side}, 4);
  struct Result {
    Tensor y, gx, gw;
  };
  auto run = [&] {
    Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
    Tensor y = mt::conv2d(x, w, b0, 1, 1, 1, groups);
    y.backward(go);
    return Result{y.detach(), x.grad(), w.grad()};
  };
  Result hw, em;
  {
    Emulation off(false);
    mt::reset_fast_path_stats();
    hw = run();
    const auto s = mt::testing::cpu_matmul_counts();
    EXPECT_EQ(s.bf16_hardware, 3 * groups * 2);  // per direction, group and image
    EXPECT_EQ(s.bf16_fallbacks, 0);
    expect_all_on_amx_tiles(s, "conv2d");
  }
  {
    Emulation on(true);
    em = run();
  }
  // S for each result: the same convolution (and its gradients) on |x|, |w|, |go| in float64.
  Tensor x64 = abs64(x0).requires_grad_(true), w64 = abs64(w0).requires_grad_(true);
  mt::conv2d(x64, w64, Tensor(), 1, 1, 1, groups).backward(abs64(go));
  const Tensor s_y = mt::conv2d(abs64(x0), abs64(w0), Tensor(), 1, 1, 1, groups);
  // Forward: K = cg kh kw products, the bias added in float (at most one float unit, below one
  // bf16 unit), one rounding. Input gradient: Og products per column, then up to kh kw columns
  // summed in float in the same order on both paths. Weight gradient: 2 images x 1024 positions.
  const double bias_max = mt::max(abs64(b0)).item<double>();
  expect_within_bound(hw.y, em.y, s_y, cg * kh * kh, 2, bias_max, "conv2d forward");
  expect_within_bound(hw.gx, em.gx, x64.grad(), og + kh * kh, 1, 0.0, "conv2d grad_input");
  expect_within_bound(hw.gw, em.gw, w64.grad(), 2 * side * side, 1, 0.0, "conv2d grad_weight");
}

// A single product small enough for sgemm's in-house loops stays there (a oneDNN call costs more
// than its arithmetic): counted as emulated, the same bits as the forced emulation.
TEST(CpuBf16Matmul, SmallProductsStayOnTheInHouseLoop) {
  REQUIRE_BF16_INSTRUCTIONS();
  ASSERT_TRUE(mt::cpu::sgemm_is_small(8, 4, 16));
  ASSERT_FALSE(mt::cpu::sgemm_is_small(64, 64, 128));
  const Tensor a = rand_bf16({8, 16}, 1), b = rand_bf16({16, 4}, 2);
  mt::reset_fast_path_stats();
  const auto [hw, em] = both_paths([&] { return mt::matmul(a, b); });
  EXPECT_TRUE(mt::equal(hw, em));
  const auto s = mt::testing::cpu_matmul_counts();
  EXPECT_EQ(s.bf16_hardware, 0);
  EXPECT_EQ(s.bf16_emulated, 2);
}

// A product stored as bf16 by the kernel is its float32 sums rounded once: bit for bit the
// float32 product rounded while K is one block of the kernel's, and within the summation bound
// of it (another order of the float32 sums, one rounding) for a long K. Cases: one product, one
// split into row slabs across the pool (A transposed, so each slab is packed), and a batch split
// into ranges.
TEST(CpuBf16Matmul, Bf16StoredProductIsTheFloat32ProductRounded) {
  REQUIRE_BF16_INSTRUCTIONS();
  struct Case {
    int64_t batch, m, n, k;
    bool ta;
  };
  for (const Case c :
       {Case{1, 48, 40, 96, false}, Case{1, 512, 384, 2048, true}, Case{6, 64, 96, 128, false}}) {
    const Tensor a = rand_bf16(c.ta ? Shape{c.batch, c.k, c.m} : Shape{c.batch, c.m, c.k}, 7);
    const Tensor b = rand_bf16({c.batch, c.k, c.n}, 8);
    const mt::cpu::Bf16Matrix ma{a.data<mt::BFloat16>(), c.m * c.k, c.ta, c.ta ? c.m : c.k};
    const mt::cpu::Bf16Matrix mb{b.data<mt::BFloat16>(), c.k * c.n, false, c.n};
    const Shape shape{c.batch, c.m, c.n};
    Tensor wide = mt::empty(shape),
           stored = mt::empty(shape, mt::TensorOptions().dtype(mt::kBFloat16));
    mt::reset_fast_path_stats();
    ASSERT_TRUE(
        mt::cpu::bf16_gemm(c.batch, c.m, c.n, c.k, ma, mb, wide.data<float>(), c.n, c.m * c.n));
    ASSERT_TRUE(mt::cpu::bf16_gemm(c.batch, c.m, c.n, c.k, ma, mb, stored.data<mt::BFloat16>(), c.n,
                                   c.m * c.n));
    EXPECT_EQ(mt::testing::cpu_matmul_counts().bf16_hardware, 2);
    const std::string name = std::to_string(c.batch) + "x" + std::to_string(c.m) + "x" +
                             std::to_string(c.n) + "x" + std::to_string(c.k);
    if (c.k <= 128) {
      EXPECT_TRUE(mt::equal(stored, wide.to(mt::kBFloat16))) << name;
    } else {
      const Tensor op_a = c.ta ? a.transpose(1, 2) : a;
      expect_within_bound(stored, wide, mt::matmul(abs64(op_a), abs64(b)), c.k, 1, 0.0, name);
    }
  }
}

// vdpbf16ps and tdpbf16ps treat subnormal operands as zero whatever MXCSR says; the emulation
// keeps them. Both are bf16 products; the difference is below 2^-126 times the other operand.
TEST(CpuBf16Matmul, SubnormalOperandsAreFlushedOnTheInstructions) {
  REQUIRE_BF16_INSTRUCTIONS();
  const float tiny = std::ldexp(1.0f, -130);  // a bf16 subnormal
  const auto opts = mt::TensorOptions().dtype(mt::kBFloat16);
  Tensor a = mt::zeros({1, 64}, opts);
  a.slice(1, 0, 1).fill_(tiny);
  const Tensor b = mt::full({64, 1024}, 1.0, opts);
  const auto [hw, em] = both_paths([&] { return mt::matmul(a, b); });
  EXPECT_EQ(em.slice(1, 0, 1).to(mt::kFloat32).item<float>(), tiny);
  EXPECT_EQ(hw.slice(1, 0, 1).to(mt::kFloat32).item<float>(), 0.0f);
}

namespace {

// Forces the float32 GEMM library for a scope.
class Float32Library {
 public:
  explicit Float32Library(mt::cpu::Float32GemmLibrary library) {
    mt::cpu::set_cpu_float32_gemm_library(library);
  }
  ~Float32Library() {
    mt::cpu::set_cpu_float32_gemm_library(mt::cpu::Float32GemmLibrary::OpenBlas, true);
  }
};

// The float32 bound: each library sums K float32 products (each rounded, or fused into an FMA)
// in its own order, so each is within gamma_{K+1} S of the exact sum and the two within twice
// that.
void expect_float32_close(const Tensor& x, const Tensor& y, const Tensor& s, int64_t k,
                          const std::string& what) {
  const auto a = x.to_vector<double>(), b = y.to_vector<double>(), sv = s.to_vector<double>();
  ASSERT_EQ(a.size(), sv.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double bound = 2 * gamma(k + 1) * sv[i];
    if (std::abs(a[i] - b[i]) > bound && reported++ < 5)
      ADD_FAILURE() << what << " element " << i << ": " << a[i] << " vs " << b[i] << ", bound "
                    << bound;
  }
}

}  // namespace

// The float32 GEMM's library is named, and OpenBLAS's only when its kernels suit the CPU.
TEST(CpuFloat32Gemm, LibraryIsNamed) {
  const std::string d = mt::cpu::cpu_float32_gemm_description();
  std::cout << "float32 GEMM: " << d << "\n";
  if (mt::cpu::cpu_float32_gemm_library() == mt::cpu::Float32GemmLibrary::OneDnn) {
    EXPECT_EQ(d.rfind("oneDNN (OpenBLAS chose ", 0), 0u) << d;
  } else {
    EXPECT_EQ(d.rfind("OpenBLAS (", 0), 0u) << d;
    for (const char* stale : {"Prescott", "Core2", "Nehalem", "Sandybridge", "Atom"}) {
      EXPECT_EQ(d.find(stale), std::string::npos) << d << ": kernels older than AVX2";
    }
  }
}

// oneDNN and OpenBLAS agree within the float32 summation bound on matmul (every layout) and on
// the convolution's GEMMs (including the weight gradient's, which accumulate into C: beta = 1).
TEST(CpuFloat32Gemm, OneDnnMatchesOpenBlasWithinTheSummationBound) {
  mt::manual_seed(5);
  const Tensor a = mt::testing::random_tensor({3, 96, 200}, mt::kFloat32, false);
  const Tensor b = mt::testing::random_tensor({3, 200, 72}, mt::kFloat32, true);
  const Tensor x = mt::testing::random_tensor({2, 6, 12, 12}, mt::kFloat32, false);
  const Tensor w0 = mt::testing::random_tensor({8, 3, 3, 3}, mt::kFloat32, false);
  const Tensor go = mt::testing::random_tensor({2, 8, 10, 10}, mt::kFloat32, false);
  struct Result {
    Tensor mm, conv, gw;
  };
  auto run = [&] {
    Tensor w = w0.clone().requires_grad_(true);
    Tensor y = mt::conv2d(x, w, Tensor(), 1, 0, 1, /*groups=*/2);
    y.backward(go);
    return Result{mt::matmul(a, b), y.detach(), w.grad()};
  };
  Result blas, dnnl;
  {
    Float32Library f(mt::cpu::Float32GemmLibrary::OpenBlas);
    blas = run();
  }
  mt::reset_fast_path_stats();
  {
    Float32Library f(mt::cpu::Float32GemmLibrary::OneDnn);
    dnnl = run();
  }
  const auto stats = mt::testing::cpu_matmul_counts();
  EXPECT_GE(stats.float32_onednn, 3);
  EXPECT_EQ(stats.float32_fallbacks, 0);
  expect_float32_close(dnnl.mm, blas.mm, mt::matmul(abs64(a), abs64(b)), 200, "matmul");
  // Each output of the grouped convolution sums 3 * 3 * 3 products; each weight gradient sums
  // over the batch's 2 * 10 * 10 positions. S from float64 runs on |x|, |w| and |go|.
  const Tensor s_conv = mt::conv2d(abs64(x), abs64(w0), Tensor(), 1, 0, 1, 2);
  expect_float32_close(dnnl.conv, blas.conv, s_conv, 27, "conv2d");
  Tensor w64 = abs64(w0).requires_grad_(true);
  mt::conv2d(abs64(x), w64, Tensor(), 1, 0, 1, 2).backward(abs64(go));
  expect_float32_close(dnnl.gw, blas.gw, w64.grad(), 200, "conv2d weight gradient");
}
