// CUDA fused linear kernels on cuBLASLt: the bias and GELU ride in the GEMM's epilogue, and the
// backward reduces the bias gradient inside a GEMM. Epilogues used (docs/kernels.md):
//
//   linear_forward          D = act(W x + b)      BIAS (DEFAULT without b),
//                                                 GELU_BIAS / GELU_AUX_BIAS (tanh GELU)
//   linear_backward_weight  dW = g^T x, db = sum g           BGRADB (DEFAULT without db)
//   linear_backward_act     dZ = (g W) * act'(aux), db = sum dZ   DGELU_BGRAD (DGELU without db)
//
// ReLU never uses cuBLASLt's RELU* / DRELU* epilogues: they compute max(x, 0), which turns NaN
// into 0, while the CPU and PyTorch propagate it (a zeroed NaN can hide an overflow from the
// GradScaler), and their bit mask keeps no trace of a NaN to repair afterwards. ReLU's forward is
// the BIAS (or DEFAULT) GEMM followed by the relu kernel in place (functors::Relu, as on the
// CPU), and it returns no aux; linear_backward_act for ReLU is the DEFAULT GEMM followed by the
// composition's relu_backward on h and column sums (linear_composite::finish_backward_act). ReLU
// therefore costs one extra elementwise pass each way, for the same values on both devices.
//
// cuBLASLt is column-major and our matrices row-major, so every call computes the transpose:
// a row-major [r, c] matrix with unit column stride is a column-major c x r matrix with leading
// dimension stride(0). The forward is D [N x M] = op_T(W) [N x K] * x^T [K x M], which puts the
// per-feature bias on D's rows, where BIAS broadcasts it; dW^T [K x N] = x^T [K x M] * g [M x N]
// puts the bias gradient on the columns of B = g, which BGRADB reduces over the k = M dimension.
//
// Where cuBLASLt does not run, the kernels compute the CPU's composition of bmm, add, sum and
// activation kernels (kernels/linear_composite.h) on this device, and count why in
// engine/fast_path_stats.h (path "cuda.linear"). By design, decided before cuBLASLt is asked:
//  - float64 and integer dtypes: we keep them on the plain cuBLAS/bmm path (the epilogues are
//    meant for tensor-core types, and cuBLASLt's heuristics need not offer them for 64F);
//  - an operand without unit column stride (cuBLASLt takes a leading dimension, not two strides);
//  - a bias that is not a packed [N] vector (a broadcast 0-d or [1] bias has stride 0);
//  - GELU's aux leading dimension not a multiple of 8 elements (cuBLASLt's requirement);
//  - an empty reduction dimension (the GEMM is a fill, which bmm handles).
// A refusal: the heuristic returns no algorithm for this shape and alignment. Strict mode
// (MANTISSA_STRICT_FAST_PATHS=1, set_strict_fast_paths) makes a refusal an error naming
// the call; otherwise the composition computes the same values (one more rounding for half
// types, exactly as the CPU does).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "cuda/cublas_handle.h"
#include "cuda/cuda_check.h"
#include "cuda/current_stream.h"
#include "cuda/device_guard.h"
#include "engine/error.h"
#include "engine/factory.h"
#include "engine/fast_path_stats.h"
#include "engine/kernel_tables.h"
#include "engine/precision.h"
#include "kernels/linear_composite.h"

namespace mantissa::cuda {
namespace {

// Workspace cuBLASLt may use per call; taken from the caching allocator, so it is reused.
constexpr uint64_t kMaxWorkspaceBytes = 4u << 20;

struct DescGuard {
  cublasLtMatmulDesc_t desc = nullptr;
  ~DescGuard() {
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};
struct LayoutGuard {
  cublasLtMatrixLayout_t layout = nullptr;
  ~LayoutGuard() {
    if (layout) cublasLtMatrixLayoutDestroy(layout);
  }
};
struct PreferenceGuard {
  cublasLtMatmulPreference_t pref = nullptr;
  ~PreferenceGuard() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
  }
};

template <typename V>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const V& value) {
  MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}
template <typename V>
void set_pref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
              const V& value) {
  MT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
}

// The largest power of two (up to 256) dividing the address: heuristics assume 256-byte aligned
// operands unless told otherwise, and a view into a larger buffer often is not.
uint32_t alignment_of(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

// The fast-path counters' name of each epilogue we use (the RELU ones are never used, see the top).
const char* epilogue_name(cublasLtEpilogue_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_BIAS:
      return "BIAS";
    case CUBLASLT_EPILOGUE_GELU:
      return "GELU";
    case CUBLASLT_EPILOGUE_GELU_BIAS:
      return "GELU_BIAS";
    case CUBLASLT_EPILOGUE_GELU_AUX:
      return "GELU_AUX";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
      return "GELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_BGRADB:
      return "BGRADB";
    case CUBLASLT_EPILOGUE_DGELU:
      return "DGELU";
    case CUBLASLT_EPILOGUE_DGELU_BGRAD:
      return "DGELU_BGRAD";
    default:
      MT_ASSERT(e == CUBLASLT_EPILOGUE_DEFAULT, "cublaslt_linear: unexpected epilogue ",
                static_cast<int>(e));
      return "DEFAULT";
  }
}

// One column-major GEMM D [m x n] = op_a(A) [m x k] * op_b(B) [k x n] with an epilogue.
struct LtGemm {
  // The calling op and its own (row-major) sizes, for strict mode's error.
  const char* op = "";
  int64_t op_m = 0, op_n = 0, op_k = 0;
  int64_t m = 0, n = 0, k = 0;
  cublasOperation_t op_a = CUBLAS_OP_N, op_b = CUBLAS_OP_N;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* d = nullptr;
  int64_t ldd = 0;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;  // BIAS epilogues read it; BGRAD epilogues write it
  void* aux = nullptr;         // GELU pre-activation
  int64_t aux_ld = 0;
};

bool lt_dtype(DType dtype) {
  return dtype == DType::Float32 || dtype == DType::Float16 || dtype == DType::BFloat16;
}

// The storage type and compute type for one of the lt_dtype()s.
void lt_types(DType dtype, cudaDataType_t& type, cublasComputeType_t& compute) {
  compute = CUBLAS_COMPUTE_32F;  // half types accumulate in float32
  switch (dtype) {
    case DType::Float32:
      type = CUDA_R_32F;
      if (effective_matmul_precision(DeviceType::CUDA) == MatmulPrecision::High)
        compute = CUBLAS_COMPUTE_32F_FAST_TF32;
      return;
    case DType::Float16:
      type = CUDA_R_16F;
      return;
    case DType::BFloat16:
      type = CUDA_R_16BF;
      return;
    default:
      MT_ASSERT(false, "cublaslt_linear: no cuBLASLt type for ", dtype);
  }
}

// A fallback decided before cuBLASLt is asked: counted, never an error.
void fall_back_by_design(const char* reason) {
  (void)::mantissa::detail::count_fallback("cuda.linear", reason, /*refusal=*/false);
}

// Enqueues g on the current stream and counts its epilogue; false (nothing enqueued, the refusal
// counted) when cuBLASLt offers no algorithm, or throws for that in strict mode.
bool lt_matmul(const LtGemm& g, DType dtype, int device) {
  cudaDataType_t type = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  lt_types(dtype, type, compute);

  DescGuard desc;
  MT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc.desc, compute, CUDA_R_32F));
  set_desc(desc.desc, CUBLASLT_MATMUL_DESC_TRANSA, g.op_a);
  set_desc(desc.desc, CUBLASLT_MATMUL_DESC_TRANSB, g.op_b);
  set_desc(desc.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, g.epilogue);
  if (g.bias != nullptr) set_desc(desc.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias);
  if (g.aux != nullptr) {
    set_desc(desc.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.aux);
    set_desc(desc.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, g.aux_ld);
  }

  // Layouts describe the stored matrices: op T reads a k x m (or n x k) matrix transposed.
  const bool ta = g.op_a != CUBLAS_OP_N, tb = g.op_b != CUBLAS_OP_N;
  LayoutGuard la, lb, ld;
  MT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la.layout, type,
                                             static_cast<uint64_t>(ta ? g.k : g.m),
                                             static_cast<uint64_t>(ta ? g.m : g.k), g.lda));
  MT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb.layout, type,
                                             static_cast<uint64_t>(tb ? g.n : g.k),
                                             static_cast<uint64_t>(tb ? g.k : g.n), g.ldb));
  MT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld.layout, type, static_cast<uint64_t>(g.m),
                                             static_cast<uint64_t>(g.n), g.ldd));

  const uint32_t align_a = alignment_of(g.a), align_b = alignment_of(g.b),
                 align_d = alignment_of(g.d);
  PreferenceGuard pref;
  MT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.pref));
  set_pref(pref.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, kMaxWorkspaceBytes);
  set_pref(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a);
  set_pref(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b);
  set_pref(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_d);
  set_pref(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_d);

  const cublasLtHandle_t handle = cublaslt_handle(device);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  // No algorithm is an answer, not an error: NOT_SUPPORTED (no kernel for this combination),
  // an empty answer, or (as some versions answer for degenerate shapes) INVALID_VALUE. The
  // composition computes the same values, so only strict mode makes it an error.
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      handle, desc.desc, la.layout, lb.layout, ld.layout, ld.layout, pref.pref, 1, &result, &found);
  const char* epilogue = epilogue_name(g.epilogue);
  if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
    const std::string why = ::mantissa::detail::str_cat(
        g.op, ": cuBLASLt ", cublasLtGetVersion(), " offered no algorithm (heuristic status ",
        static_cast<int>(status), ", ", found, " found) for epilogue ", epilogue, " in ", dtype,
        " (M ", g.op_m, ", N ", g.op_n, ", K ", g.op_k, "; column-major GEMM m ", g.m, " n ", g.n,
        " k ", g.k, ", ld ", g.lda, "/", g.ldb, "/", g.ldd, g.aux != nullptr ? ", aux ld " : "",
        g.aux != nullptr ? std::to_string(g.aux_ld) : std::string(), ", alignments A/B/D ", align_a,
        "/", align_b, "/", align_d, " bytes)");
    if (::mantissa::detail::count_fallback("cuda.linear", "NoAlgorithm", /*refusal=*/true, dtype,
                                           why)) {
      MT_THROW(why,
               ", and strict fast paths are on (MANTISSA_STRICT_FAST_PATHS or "
               "set_strict_fast_paths); without them the composed path would run");
    }
    return false;
  }

  Tensor workspace;
  if (result.workspaceSize > 0) {
    workspace = empty(Shape{static_cast<int64_t>(result.workspaceSize)},
                      TensorOptions(Device::cuda(device)).dtype(DType::UInt8));
  }
  const float alpha = 1.0f, beta = 0.0f;
  MT_CUBLAS_CHECK(cublasLtMatmul(handle, desc.desc, &alpha, g.a, la.layout, g.b, lb.layout, &beta,
                                 g.d, ld.layout, g.d, ld.layout, &result.algo,
                                 workspace.defined() ? workspace.data_ptr() : nullptr,
                                 result.workspaceSize, detail::current_stream()));
  ::mantissa::detail::count_fast_path("cuda.linear", epilogue, dtype);
  return true;
}

// The leading dimension of a row-major [rows, cols] matrix read column-major (as its
// transpose), or 0 when its columns are not unit-stride (the caller then falls back).
int64_t row_major_ld(const Tensor& t) {
  const int64_t rows = t.size(0), cols = t.size(1);
  if (cols != 1 && t.stride(1) != 1) return 0;
  const int64_t ld = rows == 1 ? std::max<int64_t>(1, cols) : t.stride(0);
  return ld >= std::max<int64_t>(1, cols) ? ld : 0;
}

bool packed_vector(const Tensor& v) { return v.size(0) == 1 || v.stride(0) == 1; }

Tensor linear_forward_cuda(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias,
                           LinearActivation act, bool want_aux) {
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  if (out.numel() == 0) return Tensor();
  DeviceGuard guard(out.device().index());
  const int64_t ldx = row_major_ld(x), ldw = row_major_ld(w);
  const bool has_bias = bias.defined();
  const bool gelu_aux = want_aux && act == LinearActivation::GeluTanh;
  const char* by_design = nullptr;
  if (!lt_dtype(out.dtype())) {
    by_design = "UnsupportedDtype";
  } else if (K == 0) {
    by_design = "Empty";
  } else if (ldx == 0 || ldw == 0) {
    by_design = "NonUnitStride";
  } else if (has_bias && !packed_vector(bias)) {
    by_design = "NonPackedBias";
  } else if (gelu_aux && N % 8 != 0) {
    // GELU's aux is the [M, N] pre-activation with leading dimension N, which cuBLASLt wants to
    // be a multiple of 8 elements.
    by_design = "AuxLayout";
  }
  if (by_design) {
    fall_back_by_design(by_design);
    return linear_composite::forward(out, x, w, bias, act, want_aux);
  }

  LtGemm g;
  g.op = "linear_forward";
  g.op_m = M;
  g.op_n = N;
  g.op_k = K;
  g.m = N;
  g.n = M;
  g.k = K;
  g.op_a = CUBLAS_OP_T;  // W [N, K] row-major is K x N column-major
  g.a = w.data_ptr();
  g.lda = ldw;
  g.op_b = CUBLAS_OP_N;  // x [M, K] row-major is K x M column-major: x^T
  g.b = x.data_ptr();
  g.ldb = ldx;
  g.d = out.data_ptr();
  g.ldd = N;
  g.bias = has_bias ? bias.data_ptr() : nullptr;
  Tensor aux;
  switch (act) {
    case LinearActivation::None:
    case LinearActivation::Relu:  // relu follows the GEMM (see the top)
      g.epilogue = has_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
      break;
    case LinearActivation::GeluTanh:
      if (gelu_aux) {
        aux = empty(Shape{M, N}, TensorOptions(out.device()).dtype(out.dtype()));
        g.aux = aux.data_ptr();
        g.aux_ld = N;
        g.epilogue = has_bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
      } else {
        g.epilogue = has_bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
      }
      break;
  }
  if (!lt_matmul(g, out.dtype(), out.device().index()))
    return linear_composite::forward(out, x, w, bias, act, want_aux);
  if (act == LinearActivation::Relu) {
    // NaN-propagating, and no aux: the backward reads ReLU's derivative from out.
    linear_composite::activate(out, out, act);
    ::mantissa::detail::count_fast_path("cuda.linear", "relu_forward", out.dtype());
  }
  return aux;
}

void linear_backward_weight_cuda(const Tensor& grad_w, const Tensor& grad_bias,
                                 const Tensor& grad_out, const Tensor& x) {
  const int64_t M = x.size(0), K = x.size(1), N = grad_out.size(1);
  if (grad_w.numel() == 0 && (!grad_bias.defined() || grad_bias.numel() == 0)) return;
  DeviceGuard guard(grad_w.device().index());
  const int64_t ldx = row_major_ld(x), ldg = row_major_ld(grad_out);
  const char* by_design = nullptr;
  if (!lt_dtype(grad_w.dtype())) {
    by_design = "UnsupportedDtype";
  } else if (M == 0 || K == 0 || N == 0) {
    by_design = "Empty";
  } else if (ldx == 0 || ldg == 0) {
    by_design = "NonUnitStride";
  }
  if (by_design) {
    fall_back_by_design(by_design);
    linear_composite::backward_weight(grad_w, grad_bias, grad_out, x);
    return;
  }
  LtGemm g;
  g.op = "linear_backward_weight";
  g.op_m = M;
  g.op_n = N;
  g.op_k = K;
  g.m = K;
  g.n = N;
  g.k = M;
  g.op_a = CUBLAS_OP_N;  // x [M, K] row-major: x^T, K x M
  g.a = x.data_ptr();
  g.lda = ldx;
  g.op_b = CUBLAS_OP_T;  // grad_out [M, N] row-major is N x M column-major; op T gives M x N
  g.b = grad_out.data_ptr();
  g.ldb = ldg;
  g.d = grad_w.data_ptr();  // dW [N, K] row-major is dW^T, K x N column-major
  g.ldd = K;
  if (grad_bias.defined()) {
    g.epilogue = CUBLASLT_EPILOGUE_BGRADB;  // column sums of B over k = M: [N]
    g.bias = grad_bias.data_ptr();
  }
  if (!lt_matmul(g, grad_w.dtype(), grad_w.device().index()))
    linear_composite::backward_weight(grad_w, grad_bias, grad_out, x);
}

void linear_backward_act_cuda(const Tensor& grad_pre, const Tensor& grad_bias,
                              const Tensor& grad_out, const Tensor& w, const Tensor& h,
                              const Tensor& aux, LinearActivation act) {
  const int64_t M = grad_out.size(0), N = grad_out.size(1), K = w.size(1);
  if (grad_pre.numel() == 0) {
    if (grad_bias.defined() && grad_bias.numel() > 0) {
      fall_back_by_design("Empty");
      linear_composite::column_sums(grad_bias, grad_pre);
    }
    return;
  }
  DeviceGuard guard(grad_pre.device().index());
  const int64_t ldg = row_major_ld(grad_out), ldw = row_major_ld(w);
  const char* by_design = nullptr;
  if (!lt_dtype(grad_pre.dtype())) {
    by_design = "UnsupportedDtype";
  } else if (N == 0) {
    by_design = "Empty";
  } else if (ldg == 0 || ldw == 0) {
    by_design = "NonUnitStride";
  } else if (act == LinearActivation::GeluTanh &&
             !(aux.defined() && aux.is_contiguous() && K % 8 == 0)) {
    // DGELU reads the forward's pre-activation with leading dimension K (a multiple of 8); a
    // forward that fell back for its aux layout left one with K % 8 != 0.
    by_design = "AuxLayout";
  }
  if (by_design) {
    fall_back_by_design(by_design);
    linear_composite::backward_act(grad_pre, grad_bias, grad_out, w, h, aux, act);
    return;
  }
  LtGemm g;
  g.op = "linear_backward_act";
  g.op_m = M;
  g.op_n = N;
  g.op_k = K;
  g.m = K;
  g.n = M;
  g.k = N;
  g.op_a = CUBLAS_OP_N;  // W [N, K] row-major is K x N column-major
  g.a = w.data_ptr();
  g.lda = ldw;
  g.op_b = CUBLAS_OP_N;  // grad_out [M, N] row-major is N x M column-major
  g.b = grad_out.data_ptr();
  g.ldb = ldg;
  g.d = grad_pre.data_ptr();  // grad_pre [M, K] row-major is K x M column-major
  g.ldd = K;
  const bool db = grad_bias.defined();
  if (act == LinearActivation::GeluTanh) {
    g.epilogue = db ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU;
    g.bias = db ? grad_bias.data_ptr() : nullptr;  // reduced over D's columns: [K]
    g.aux = aux.data_ptr();
    g.aux_ld = K;
  }  // else DEFAULT: act' (for ReLU) and the bias gradient follow the GEMM
  if (!lt_matmul(g, grad_pre.dtype(), grad_pre.device().index())) {
    linear_composite::backward_act(grad_pre, grad_bias, grad_out, w, h, aux, act);
    return;
  }
  if (act != LinearActivation::GeluTanh) {
    linear_composite::finish_backward_act(grad_pre, grad_bias, h, aux, act);
    if (act == LinearActivation::Relu)
      ::mantissa::detail::count_fast_path("cuda.linear", "relu_backward", grad_pre.dtype());
  }
}

}  // namespace

MT_REGISTER_KERNEL(linear_forward_kernel, kCUDA, &linear_forward_cuda);
MT_REGISTER_KERNEL(linear_backward_weight_kernel, kCUDA, &linear_backward_weight_cuda);
MT_REGISTER_KERNEL(linear_backward_act_kernel, kCUDA, &linear_backward_act_cuda);

}  // namespace mantissa::cuda
