// scaled_dot_product_attention on the CPU: output and gradients against PyTorch's math
// (scripts/golden/make_attention.py writes tests/golden/attention.txt, every case of which runs
// here), float16/bfloat16 against float32, dropout, the argument checks, and the memory bound of
// the blocked kernel.
#include <cmath>
#include <optional>

#include "autograd/gradcheck.h"
#include "engine/cpu_allocator.h"
#include "engine/philox.h"
#include "golden_file.h"
#include "test_util.h"

namespace mt = mantissa;
using mt::Shape;
using mt::Tensor;

namespace {

struct Results {
  Tensor out, dq, dk, dv, dmask;
};

// The case's call in dtype dt: mask_kind 0 none, 1 bool (stored as 0/1), 2 float.
Results run_case(const std::map<std::string, Tensor>& t, bool causal, std::optional<double> scale,
                 int mask_kind, mt::DType dt) {
  auto leaf = [&](const char* name) { return t.at(name).to(dt).requires_grad_(); };
  Tensor q = leaf("q"), k = leaf("k"), v = leaf("v"), mask;
  if (mask_kind == 1) mask = t.at("mask") > 0.5;
  if (mask_kind == 2) mask = leaf("mask");
  Tensor out = mt::scaled_dot_product_attention(q, k, v, mask, 0.0, causal, scale);
  out.backward(t.at("dout").to(dt));
  return {out, q.grad(), k.grad(), v.grad(), mask_kind == 2 ? mask.grad() : Tensor()};
}

struct Params {
  bool causal;
  std::optional<double> scale;
  int mask_kind;
};

Params params_of(const mt::testing::GoldenCase& c) {
  const std::vector<double> p = c.first("params");
  EXPECT_EQ(p.size(), 3u) << c.name;
  if (p.size() != 3) return {false, std::nullopt, 0};
  return {p[0] != 0, std::isnan(p[1]) ? std::nullopt : std::optional<double>(p[1]),
          static_cast<int>(p[2])};
}

#define EXPECT_THROW_WITH(expr, what) mt::testing::expect_error([&] { (void)(expr); }, {what})

std::map<std::string, mt::testing::GoldenCase> golden_cases() {
  mt::testing::GoldenFormat format;
  format.value_kinds = {"params"};
  return mt::testing::read_golden_file("attention.txt", format);
}

}  // namespace

// float32 against PyTorch's float32 math: the sums run in another order (key blocks, online
// rescaling), a few ulps per term over at most 130 keys.
TEST(Attention, MatchesPyTorchMath) {
  const auto cases = golden_cases();
  ASSERT_GE(cases.size(), 10u);
  for (const auto& [name, c] : cases) {
    SCOPED_TRACE(name);
    const Params p = params_of(c);
    const auto t = c.tensors_by_name();
    const Results r = run_case(t, p.causal, p.scale, p.mask_kind, mt::kFloat32);
    mt::testing::expect_close(r.out, t.at("out"), 1e-5, 1e-6, name + " out");
    mt::testing::expect_close(r.dq, t.at("dq"), 1e-4, 1e-5, name + " dq");
    mt::testing::expect_close(r.dk, t.at("dk"), 1e-4, 1e-5, name + " dk");
    mt::testing::expect_close(r.dv, t.at("dv"), 1e-4, 1e-5, name + " dv");
    if (t.count("dmask") == 1) {
      ASSERT_TRUE(r.dmask.defined());
      mt::testing::expect_close(r.dmask, t.at("dmask"), 1e-4, 1e-5, name + " dmask");
    }
  }
}

// The fully masked row is NaN, as PyTorch's math gives, and only that row of the output.
TEST(Attention, QueryWithNoKeyIsNaN) {
  const auto cases = golden_cases();
  const auto& c = cases.at("fully_masked_row");
  const auto t = c.tensors_by_name();
  const Results r = run_case(t, false, std::nullopt, 1, mt::kFloat32);
  const auto out = r.out.to_vector<double>();  // [2, 4, 8]; row (1, 2) has no key
  for (int64_t i = 0; i < 2 * 4; ++i)
    for (int64_t e = 0; e < 8; ++e)
      EXPECT_EQ(std::isnan(out[i * 8 + e]), i == 4 + 2) << i << " " << e;
}

// A NaN in one query row makes that row's lse NaN. In the composed math its softmax row is NaN
// at every key, hidden ones included, so the NaN reaches every dK and dV row and that query's dQ
// row only. Row 10 sits in the first 64-query tile, whose keys from 64 on are all hidden: the
// kernel must not skip that block for this tile.
TEST(Attention, NaNQueryRowSpreadsThroughTheCausalBackward) {
  mt::manual_seed(7);
  const int64_t L = 130, E = 16;
  Tensor q0 = mt::randn({1, L, E});
  auto qv = q0.to_vector<float>();
  qv[10 * E + 3] = std::nanf("");
  Tensor q = mt::from_vector(qv, Shape{1, L, E}).requires_grad_();
  Tensor k = mt::randn({1, L, E}).requires_grad_();
  Tensor v = mt::randn({1, L, E}).requires_grad_();
  Tensor out = mt::scaled_dot_product_attention(q, k, v, Tensor(), 0.0, true);
  const auto o = out.to_vector<float>();
  for (int64_t i = 0; i < L; ++i) EXPECT_EQ(std::isnan(o[i * E]), i == 10) << "output row " << i;
  out.sum().backward();
  const auto dq = q.grad().to_vector<float>(), dk = k.grad().to_vector<float>(),
             dv = v.grad().to_vector<float>();
  for (int64_t i = 0; i < L; ++i) {
    EXPECT_EQ(std::isnan(dq[i * E]), i == 10) << "dq row " << i;
    EXPECT_TRUE(std::isnan(dk[i * E])) << "dk row " << i;
    EXPECT_TRUE(std::isnan(dv[i * E])) << "dv row " << i;
  }
}

// float16/bfloat16 compute in float and round once: against float32 on the same (rounded)
// inputs, the error is the output's rounding plus float sums (fp16: 2^-11 relative, bf16: 2^-8).
TEST(Attention, HalfTypesFollowFloat32) {
  const auto cases = golden_cases();
  for (const char* name : {"causal_blocks_70_130", "float_mask_heads_ev12", "bool_mask_scale"}) {
    const auto& c = cases.at(name);
    const Params p = params_of(c);
    for (mt::DType dt : {mt::kFloat16, mt::kBFloat16}) {
      SCOPED_TRACE(std::string(name) + " " + std::string(mt::dtype_name(dt)));
      auto t = c.tensors_by_name();
      for (auto& [key, value] : t) value = value.to(dt).to(mt::kFloat64);
      const Results low = run_case(t, p.causal, p.scale, p.mask_kind, dt);
      const Results ref = run_case(t, p.causal, p.scale, p.mask_kind, mt::kFloat32);
      const double tol = dt == mt::kFloat16 ? 4e-3 : 3e-2;
      EXPECT_EQ(low.out.dtype(), dt);
      mt::testing::expect_close(low.out, ref.out, tol, tol, "out");
      // gradients sum many rounded terms: a few times the output's tolerance
      mt::testing::expect_close(low.dq, ref.dq, 4 * tol, 4 * tol, "dq");
      mt::testing::expect_close(low.dk, ref.dk, 4 * tol, 4 * tol, "dk");
      mt::testing::expect_close(low.dv, ref.dv, 4 * tol, 4 * tol, "dv");
    }
  }
}

TEST(Attention, RefusesBadArguments) {
  const Tensor q = mt::randn({2, 5, 8}), k = mt::randn({2, 6, 8}), v = mt::randn({2, 6, 4});
  const Tensor mask = mt::ones({5, 6}, mt::TensorOptions().dtype(mt::kBool));
  EXPECT_THROW_WITH(mt::scaled_dot_product_attention(q, k, v, mask, 0.0, true),
                    "attn_mask should not be set when is_causal=True");
  EXPECT_THROW_WITH(mt::scaled_dot_product_attention(q, k, v, mask.to(mt::kFloat64)),
                    "expected attn_mask of dtype bool or the query's dtype");
  EXPECT_THROW_WITH(mt::scaled_dot_product_attention(q, mt::randn({2, 6, 7}), v),
                    "one embedding size E");
  EXPECT_THROW_WITH(mt::scaled_dot_product_attention(q, k, mt::randn({2, 7, 4})),
                    "one sequence length S");
  EXPECT_THROW_WITH(mt::scaled_dot_product_attention(q, k, v, mt::ones({3, 6}) > 0),
                    "cannot be broadcast");
  EXPECT_THROW_WITH(mt::scaled_dot_product_attention(q, k, v, Tensor(), 1.5), "dropout_p");
  EXPECT_THROW_WITH(mt::scaled_dot_product_attention(q, k.to(mt::kFloat64), v),
                    "one floating dtype");
}

// With v the identity, the output is the dropped attention weights themselves: each is 0 or
// the undropped weight / (1 - p), about p of them 0.
TEST(Attention, DropoutDropsWeightsAndScalesTheRest) {
  const int64_t L = 64, S = 64;
  const double p = 0.25;
  const Tensor q = mt::randn({2, L, 8}), k = mt::randn({2, S, 8});
  const Tensor idx = mt::arange(S, mt::TensorOptions().dtype(mt::kInt64));
  const Tensor eye =
      mt::eq(idx.view({S, 1}), idx.view({1, S})).to(mt::kFloat32).unsqueeze(0).expand({2, S, S});
  const Tensor weights = mt::scaled_dot_product_attention(q, k, eye);
  mt::Generator gen(5);
  const Tensor dropped =
      mt::scaled_dot_product_attention(q, k, eye, Tensor(), p, false, std::nullopt, &gen);
  EXPECT_EQ(gen.offset(), static_cast<uint64_t>(2 * L * S));
  const auto w = weights.to_vector<double>(), d = dropped.to_vector<double>();
  int64_t zeros = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    // Weight (b, i, j) is dropped by Philox counter (b * L + i) * S + j of the op's stream, as
    // on CUDA.
    const mt::Philox4 r = mt::philox4x32(5, i);
    EXPECT_EQ(d[i] == 0, !(mt::philox_uniform01_double(r.v[0], r.v[1]) < 1 - p)) << i;
    if (d[i] == 0) {
      ++zeros;
    } else {
      EXPECT_NEAR(d[i], w[i] / (1 - p), 1e-6 * (1 + w[i])) << i;
    }
  }
  EXPECT_NEAR(static_cast<double>(zeros) / static_cast<double>(w.size()), p, 0.03);
  mt::Generator again(5), other(6);
  mt::testing::expect_close(
      mt::scaled_dot_product_attention(q, k, eye, Tensor(), p, false, std::nullopt, &again),
      dropped, 0, 0, "same seed");
  EXPECT_FALSE(mt::allclose(
      mt::scaled_dot_product_attention(q, k, eye, Tensor(), p, false, std::nullopt, &other),
      dropped));
}

// The backward regenerates the forward's dropout mask: gradcheck with the generator reset for
// every evaluation, with and without the causal mask.
TEST(Attention, DropoutGradcheck) {
  const auto opts = mt::TensorOptions().dtype(mt::kFloat64);
  const Tensor q = mt::randn({2, 7, 4}, opts).requires_grad_();
  const Tensor k = mt::randn({2, 9, 4}, opts).requires_grad_();
  const Tensor v = mt::randn({2, 9, 3}, opts).requires_grad_();
  for (bool causal : {false, true}) {
    EXPECT_TRUE(mt::autograd::gradcheck(
        [causal](const std::vector<Tensor>& x) {
          mt::Generator gen(3);
          return mt::scaled_dot_product_attention(x[0], x[1], x[2], Tensor(), 0.4, causal,
                                                  std::nullopt, &gen);
        },
        {q, k, v}))
        << causal;
  }
}

// No tensor of the attention weights' size is allocated, forward or backward.
TEST(Attention, NeverAllocatesTheWeights) {
  const int64_t L = 512, S = 512;
  const Tensor q = mt::randn({1, L, 8}).requires_grad_();
  const Tensor k = mt::randn({1, S, 8}).requires_grad_();
  const Tensor v = mt::randn({1, S, 8}).requires_grad_();
  const int64_t before = mt::cpu_memory_stats().allocated_bytes;
  mt::reset_cpu_peak_memory_stats();
  Tensor out = mt::scaled_dot_product_attention(q, k, v, Tensor(), 0.0, true);
  out.sum().backward();
  const int64_t peak = mt::cpu_memory_stats().peak_allocated_bytes - before;
  EXPECT_LT(peak, L * S * 4 / 4) << "peak " << peak << " bytes";
}
