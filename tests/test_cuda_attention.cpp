// scaled_dot_product_attention and embedding on CUDA against the CPU, forward and backward, in
// float32, float16 and bfloat16, with and without the causal mask, odd sequence lengths and head
// dims 64 and 128 — through cuDNN's flash attention, and with it switched off through the
// in-house fused forward; and which attention path ran (engine/fast_path_stats.h, paths
// "cuda.cudnn_attention" and "cuda.attention"), strict mode included. Skipped without a GPU.
#include <string>

#include "cuda_test_util.h"
#include "engine/fast_path_stats.h"
#include "test_util.h"

namespace mt = mantissa;
using mt::Shape;
using mt::Tensor;
using mt::testing::kGpu;

namespace {

struct Grads {
  Tensor out, dq, dk, dv, dmask;
};

// The same call on `device`, from the same float32 host values cast to dt.
Grads attend(const std::vector<Tensor>& host, const Tensor& mask, bool causal, mt::DType dt,
             mt::Device device) {
  auto leaf = [&](const Tensor& t) { return t.to(dt).to(device).requires_grad_(); };
  Tensor q = leaf(host[0]), k = leaf(host[1]), v = leaf(host[2]), m;
  if (mask.defined()) m = mask.dtype() == mt::kBool ? mask.to(device) : leaf(mask);
  Tensor out = mt::scaled_dot_product_attention(q, k, v, m, 0.0, causal);
  out.backward(host[3].to(dt).to(device));
  return {out, q.grad(), k.grad(), v.grad(),
          m.defined() && m.requires_grad() ? m.grad() : Tensor()};
}

struct Tol {
  double out, grad;
};

// Both devices read the same dtype-rounded inputs and compute in float (double for none here).
//  float32: the CPU's blocked loop and the GPU's bmm/softmax sum in other orders: a few ulps over
//           tens of terms (matmul precision "highest", so no TF32).
//  float16, fused: both accumulate in float and round the output once, so they differ by about
//           one fp16 ulp (2^-10 relative); the gradients are recomputed in float32 on the GPU
//           and rounded once too, but sum up to L terms: a few ulps.
//  bfloat16, fused: the same with bf16's 2^-7.
//  composed (masks): the GPU rounds the scores and the weights to the half type between ops,
//           about three roundings more than the CPU kernel.
Tol tolerance(mt::DType dt, bool composed) {
  if (dt == mt::kFloat32) return {2e-5, 1e-4};
  const double ulp = dt == mt::kFloat16 ? 1.0 / 1024 : 1.0 / 128;
  return composed ? Tol{6 * ulp, 12 * ulp} : Tol{2 * ulp, 6 * ulp};
}

void expect_match(const Grads& gpu, const Grads& cpu, Tol tol, const std::string& what) {
  mt::testing::expect_close(gpu.out.to(mt::kCPU), cpu.out, tol.out, tol.out, what + " out");
  mt::testing::expect_close(gpu.dq.to(mt::kCPU), cpu.dq, tol.grad, tol.grad, what + " dq");
  mt::testing::expect_close(gpu.dk.to(mt::kCPU), cpu.dk, tol.grad, tol.grad, what + " dk");
  mt::testing::expect_close(gpu.dv.to(mt::kCPU), cpu.dv, tol.grad, tol.grad, what + " dv");
  ASSERT_EQ(gpu.dmask.defined(), cpu.dmask.defined()) << what;
  if (cpu.dmask.defined())
    mt::testing::expect_close(gpu.dmask.to(mt::kCPU), cpu.dmask, tol.grad, tol.grad,
                              what + " dmask");
}

// While it lives, cuDNN's attention is off, so that the in-house fused forward takes the calls.
struct InHouseAttention {
  InHouseAttention() { mt::set_fast_path_enabled("cuda.cudnn_attention", false); }
  ~InHouseAttention() { mt::set_fast_path_enabled("cuda.cudnn_attention", true); }
};

std::vector<Tensor> inputs(int64_t L, int64_t S, int64_t D) {
  return {mt::randn({2, 3, L, D}), mt::randn({2, 3, S, D}), mt::randn({2, 3, S, D}),
          mt::randn({2, 3, L, D})};
}

}  // namespace

// cuDNN's flash attention, forward and backward, per half dtype, causal or not, odd and unequal
// lengths, head dims 64 and 128.
TEST(CudaAttention, CudnnFlashAttentionMatchesTheCpu) {
  MT_REQUIRE_GPU();
  mt::manual_seed(23);
  {
    const auto probe = inputs(8, 8, 64);
    mt::reset_fast_path_stats();
    (void)attend(probe, Tensor(), false, mt::kFloat16, kGpu);
    if (mt::fast_path_stats().fell_back("cuda.cudnn_attention", "NotBuilt") > 0)
      GTEST_SKIP() << "this build has no cuDNN frontend (configure with -DCUDNN_FRONTEND_ROOT)";
  }
  for (int64_t D : {64, 128}) {
    for (bool causal : {false, true}) {
      for (auto [L, S] : std::vector<std::pair<int64_t, int64_t>>{{37, 37}, {9, 77}, {45, 13}}) {
        const auto host = inputs(L, S, D);
        for (mt::DType dt : {mt::kFloat16, mt::kBFloat16}) {
          const std::string what = "cuDNN " + std::string(mt::dtype_name(dt)) +
                                   " D=" + std::to_string(D) + (causal ? " causal" : "") +
                                   " L=" + std::to_string(L) + " S=" + std::to_string(S);
          mt::reset_fast_path_stats();
          const Grads gpu = attend(host, Tensor(), causal, dt, kGpu);
          const Grads cpu = attend(host, Tensor(), causal, dt, mt::kCPU);
          // cuDNN's backward rounds dP and dS to the half type for its matmuls: the composed
          // path's tolerance.
          expect_match(gpu, cpu, tolerance(dt, true), what);
          // The composed path ran where the loaded cuDNN declined the graph: reported as library
          // behaviour, with cuDNN's message, instead of the route checks.
          if (mt::testing::report_library_refusals("cuda.cudnn_attention") > 0) continue;
          const mt::FastPathStats st = mt::fast_path_stats();
          EXPECT_EQ(st.ran("cuda.cudnn_attention", "forward", dt), 1) << what << "\n"
                                                                      << st.to_string();
          EXPECT_EQ(st.ran("cuda.cudnn_attention", "backward", dt), 1) << what;
          EXPECT_EQ(st.ran("cuda.attention", "fused"), 0) << what;
        }
      }
    }
  }
}

TEST(CudaAttention, MatchesTheCpu) {
  MT_REQUIRE_GPU();
  InHouseAttention in_house;
  mt::manual_seed(19);
  for (int64_t D : {64, 128}) {
    for (bool causal : {false, true}) {
      // odd lengths, L < S and L > S, one tile of queries and several blocks of keys
      for (auto [L, S] : std::vector<std::pair<int64_t, int64_t>>{{37, 37}, {9, 77}, {45, 13}}) {
        const auto host = inputs(L, S, D);
        for (mt::DType dt : {mt::kFloat32, mt::kFloat16, mt::kBFloat16}) {
          const std::string what = std::string(mt::dtype_name(dt)) + " D=" + std::to_string(D) +
                                   (causal ? " causal" : "") + " L=" + std::to_string(L) +
                                   " S=" + std::to_string(S);
          mt::reset_fast_path_stats();
          const Grads gpu = attend(host, Tensor(), causal, dt, kGpu);
          const Grads cpu = attend(host, Tensor(), causal, dt, mt::kCPU);
          expect_match(gpu, cpu, tolerance(dt, false), what);
          const mt::FastPathStats st = mt::fast_path_stats();
          if (dt == mt::kFloat32) {
            EXPECT_EQ(st.fell_back("cuda.attention", "Dtype"), 1) << what;
            EXPECT_EQ(st.ran("cuda.attention", "fused"), 0) << what;
          } else {
            EXPECT_EQ(st.ran("cuda.attention", "fused", dt), 1) << what;
            EXPECT_EQ(st.ran("cuda.attention", "composed_backward"), 1) << what;
          }
        }
      }
    }
  }
}

// Masks, other head dims and float32 take the composed path; it matches the CPU kernel too,
// the fully masked row's NaN included.
TEST(CudaAttention, ComposedPathMatchesTheCpu) {
  MT_REQUIRE_GPU();
  mt::manual_seed(7);
  const int64_t L = 21, S = 35;
  Tensor bool_mask = mt::rand({L, S}) > 0.3;
  bool_mask = mt::logical_or(
      bool_mask, mt::arange(S, mt::TensorOptions().dtype(mt::kInt64)).view({1, S}) == 0);
  const Tensor float_mask = mt::randn({2, 1, L, S});
  for (int64_t D : {8, 64}) {
    const auto host = inputs(L, S, D);
    for (mt::DType dt : {mt::kFloat32, mt::kFloat16, mt::kBFloat16}) {
      for (const Tensor& mask : {bool_mask, float_mask}) {
        const std::string what = std::string(mt::dtype_name(dt)) + " D=" + std::to_string(D) +
                                 (mask.dtype() == mt::kBool ? " bool" : " float") + " mask";
        expect_match(attend(host, mask, false, dt, kGpu), attend(host, mask, false, dt, mt::kCPU),
                     tolerance(dt, true), what);
      }
    }
  }
  // a query with no key: NaN on both devices
  Tensor none = mt::ones({L, S}, mt::TensorOptions().dtype(mt::kBool));
  none.narrow(0, 4, 1).fill_(false);
  const auto host = inputs(L, S, 64);
  const Grads gpu = attend(host, none, false, mt::kFloat16, kGpu);
  const Grads cpu = attend(host, none, false, mt::kFloat16, mt::kCPU);
  mt::testing::expect_close(gpu.out.to(mt::kCPU), cpu.out, 1e-2, 1e-2, "no-key row");
  EXPECT_TRUE(mt::isnan(gpu.out.to(mt::kCPU).narrow(2, 4, 1)).all().item<bool>());
}

TEST(CudaAttention, StrictModeRefusesAFallback) {
  MT_REQUIRE_GPU();
  InHouseAttention in_house;
  const auto host = inputs(17, 17, 64);
  const auto on = [&](mt::DType dt) {
    std::vector<Tensor> t;
    for (const Tensor& h : host) t.push_back(h.to(dt).to(kGpu));
    return t;
  };
  mt::set_strict_fast_path("cuda.attention", true);
  const auto half = on(mt::kFloat16);
  EXPECT_NO_THROW(mt::scaled_dot_product_attention(half[0], half[1], half[2], Tensor(), 0.0, true));
  mt::testing::expect_error(
      [&] { mt::scaled_dot_product_attention(half[0], half[1], half[2], Tensor(), 0.1); },
      {"Dropout", "set_strict_fast_path"});
  const auto f32 = on(mt::kFloat32);
  mt::testing::expect_error([&] { mt::scaled_dot_product_attention(f32[0], f32[1], f32[2]); },
                            {"Dtype"});
  mt::set_strict_fast_path("cuda.attention", false);
  EXPECT_NO_THROW(mt::scaled_dot_product_attention(f32[0], f32[1], f32[2]));
}

// embedding gathers rows and sums gradients in a fixed order on both devices: the same bits.
TEST(CudaAttention, EmbeddingMatchesTheCpu) {
  MT_REQUIRE_GPU();
  mt::manual_seed(3);
  const Tensor idx = mt::randint(0, 50, {4, 33}, mt::kInt64);
  const Tensor w = mt::randn({50, 64}), g = mt::randn({4, 33, 64});
  for (mt::DType dt : {mt::kFloat32, mt::kFloat16, mt::kBFloat16}) {
    for (std::optional<int64_t> pad : {std::optional<int64_t>(), std::optional<int64_t>(7)}) {
      Tensor results[2][2];
      int n = 0;
      for (mt::Device device : {mt::Device(mt::kCPU), kGpu}) {
        Tensor weight = w.to(dt).to(device).requires_grad_();
        Tensor out = mt::embedding(idx.to(device), weight, pad);
        out.backward(g.to(dt).to(device));
        results[n][0] = out.to(mt::kCPU);
        results[n][1] = weight.grad().to(mt::kCPU);
        ++n;
      }
      const std::string what = std::string(mt::dtype_name(dt)) + (pad ? " padding_idx" : "");
      mt::testing::expect_close(results[1][0], results[0][0], 0, 0, what + " forward");
      mt::testing::expect_close(results[1][1], results[0][1], 0, 0, what + " backward");
    }
  }
}
