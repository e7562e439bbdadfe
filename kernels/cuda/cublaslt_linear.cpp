// CUDA fused linear kernels on cuBLASLt: the bias, ReLU and GELU ride in the GEMM's epilogue,
// and the backward reduces the bias gradient inside a GEMM. Epilogues used (docs/kernels.md):
//
//   linear_forward          D = act(W x + b)      BIAS, RELU_BIAS / RELU_AUX_BIAS,
//                                                 GELU_BIAS / GELU_AUX_BIAS (tanh GELU)
//   linear_backward_weight  dW = g^T x, db = sum g           BGRADB (DEFAULT without db)
//   linear_backward_act     dZ = (g W) * act'(aux), db = sum dZ   DRELU_BGRAD / DGELU_BGRAD
//
// cuBLASLt is column-major and our matrices row-major, so every call computes the transpose:
// a row-major [r, c] matrix with unit column stride is a column-major c x r matrix with leading
// dimension stride(0). The forward is D [N x M] = op_T(W) [N x K] * x^T [K x M], which puts the
// per-feature bias on D's rows, where BIAS broadcasts it; dW^T [K x N] = x^T [K x M] * g [M x N]
// puts the bias gradient on the columns of B = g, which BGRADB reduces over the k = M dimension.
//
// Where an epilogue does not apply the kernels fall back to the CPU's composition of bmm, add,
// sum and activation kernels (kernels/linear_composite.h), on this device:
//  - float64 and integer dtypes: we keep them on the plain cuBLAS/bmm path (the epilogues are
//    meant for tensor-core types, and cuBLASLt's heuristics need not offer them for 64F);
//  - an operand without unit column stride (cuBLASLt takes a leading dimension, not two strides);
//  - a bias that is not a packed [N] vector (a broadcast 0-d or [1] bias has stride 0);
//  - GELU aux/ReLU-mask layout constraints (aux leading dimension a multiple of 8 elements);
//  - empty operands and K == 0 (the GEMM is a fill, which bmm handles);
//  - no algorithm returned by the heuristic for this shape and alignment.
// The fallback then computes the same values (one more rounding for half types, exactly as the
// CPU does) and, for ReLU, makes no mask: linear_backward_act reads ReLU's derivative from h.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/factory.h"
#include "engine/kernel_tables.h"
#include "engine/precision.h"
#include "kernels/cuda/cublas_handle.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_guard.h"
#include "kernels/cuda/stream.h"
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

// One column-major GEMM D [m x n] = op_a(A) [m x k] * op_b(B) [k x n] with an epilogue.
struct LtGemm {
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
  void* aux = nullptr;         // GELU pre-activation or ReLU bit mask
  int64_t aux_ld = 0;
};

// The storage type and compute type for `dtype`, or false where cuBLASLt is not used.
bool lt_types(DType dtype, cudaDataType_t& type, cublasComputeType_t& compute) {
  compute = CUBLAS_COMPUTE_32F;  // half types accumulate in float32
  switch (dtype) {
    case DType::Float32:
      type = CUDA_R_32F;
      if (effective_matmul_precision(DeviceType::CUDA) == MatmulPrecision::High)
        compute = CUBLAS_COMPUTE_32F_FAST_TF32;
      return true;
    case DType::Float16:
      type = CUDA_R_16F;
      return true;
    case DType::BFloat16:
      type = CUDA_R_16BF;
      return true;
    default:
      return false;
  }
}

// Enqueues g on the current stream; false (nothing enqueued) when cuBLASLt offers no algorithm.
bool lt_matmul(const LtGemm& g, DType dtype, int device) {
  cudaDataType_t type = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  if (!lt_types(dtype, type, compute)) return false;

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

  PreferenceGuard pref;
  MT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.pref));
  set_pref(pref.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, kMaxWorkspaceBytes);
  set_pref(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment_of(g.a));
  set_pref(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment_of(g.b));
  set_pref(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment_of(g.d));
  set_pref(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment_of(g.d));

  const cublasLtHandle_t handle = cublaslt_handle(device);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  // NOT_SUPPORTED (no kernel for this combination) is an answer, not an error: fall back.
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      handle, desc.desc, la.layout, lb.layout, ld.layout, ld.layout, pref.pref, 1, &result, &found);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || found == 0) return false;
  MT_CUBLAS_CHECK(status);

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

// The ReLU bit mask's leading dimension: cuBLASLt wants a multiple of 128 bits.
int64_t relu_mask_ld(int64_t rows) { return (rows + 127) / 128 * 128; }

Tensor linear_forward_cuda(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias,
                           LinearActivation act, bool want_aux) {
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  if (out.numel() == 0) return Tensor();
  DeviceGuard guard(out.device().index());
  const int64_t ldx = row_major_ld(x), ldw = row_major_ld(w);
  const bool has_bias = bias.defined();
  // GELU's aux is the [M, N] pre-activation with leading dimension N, which cuBLASLt wants to
  // be a multiple of 8 elements.
  const bool aux_ok = !want_aux || act != LinearActivation::GeluTanh || N % 8 == 0;
  if (K > 0 && ldx != 0 && ldw != 0 && (!has_bias || packed_vector(bias)) && aux_ok) {
    LtGemm g;
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
        g.epilogue = has_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
        break;
      case LinearActivation::Relu:
        if (want_aux) {
          g.aux_ld = relu_mask_ld(N);
          aux = empty(Shape{M, g.aux_ld / 8}, TensorOptions(out.device()).dtype(DType::UInt8));
          g.aux = aux.data_ptr();
          g.epilogue = has_bias ? CUBLASLT_EPILOGUE_RELU_AUX_BIAS : CUBLASLT_EPILOGUE_RELU_AUX;
        } else {
          g.epilogue = has_bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
        }
        break;
      case LinearActivation::GeluTanh:
        if (want_aux) {
          aux = empty(Shape{M, N}, TensorOptions(out.device()).dtype(out.dtype()));
          g.aux = aux.data_ptr();
          g.aux_ld = N;
          g.epilogue = has_bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
        } else {
          g.epilogue = has_bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
        }
        break;
    }
    if (lt_matmul(g, out.dtype(), out.device().index())) return aux;
  }
  return linear_composite::forward(out, x, w, bias, act, want_aux);
}

void linear_backward_weight_cuda(const Tensor& grad_w, const Tensor& grad_bias,
                                 const Tensor& grad_out, const Tensor& x) {
  const int64_t M = x.size(0), K = x.size(1), N = grad_out.size(1);
  if (grad_w.numel() == 0 && (!grad_bias.defined() || grad_bias.numel() == 0)) return;
  DeviceGuard guard(grad_w.device().index());
  const int64_t ldx = row_major_ld(x), ldg = row_major_ld(grad_out);
  if (M > 0 && K > 0 && N > 0 && ldx != 0 && ldg != 0) {
    LtGemm g;
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
    if (lt_matmul(g, grad_w.dtype(), grad_w.device().index())) return;
  }
  linear_composite::backward_weight(grad_w, grad_bias, grad_out, x);
}

void linear_backward_act_cuda(const Tensor& grad_pre, const Tensor& grad_bias,
                              const Tensor& grad_out, const Tensor& w, const Tensor& h,
                              const Tensor& aux, LinearActivation act) {
  const int64_t M = grad_out.size(0), N = grad_out.size(1), K = w.size(1);
  if (grad_pre.numel() == 0) {
    if (grad_bias.defined() && grad_bias.numel() > 0)
      linear_composite::column_sums(grad_bias, grad_pre);
    return;
  }
  DeviceGuard guard(grad_pre.device().index());
  const int64_t ldg = row_major_ld(grad_out), ldw = row_major_ld(w);
  // The mask exists only when the forward ran on cuBLASLt; GELU needs its pre-activation with
  // leading dimension K (a multiple of 8).
  const bool aux_ok =
      act == LinearActivation::None ||
      (act == LinearActivation::Relu && aux.defined() && aux.dtype() == DType::UInt8) ||
      (act == LinearActivation::GeluTanh && aux.defined() && aux.is_contiguous() && K % 8 == 0);
  if (N > 0 && ldg != 0 && ldw != 0 && aux_ok) {
    LtGemm g;
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
    g.bias = db ? grad_bias.data_ptr() : nullptr;  // reduced over D's columns: [K]
    switch (act) {
      case LinearActivation::None:
        // No activation between the layers: a bias gradient alone is a plain column sum.
        g.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
        g.bias = nullptr;
        break;
      case LinearActivation::Relu:
        g.epilogue = db ? CUBLASLT_EPILOGUE_DRELU_BGRAD : CUBLASLT_EPILOGUE_DRELU;
        g.aux = aux.data_ptr();
        g.aux_ld = relu_mask_ld(K);
        break;
      case LinearActivation::GeluTanh:
        g.epilogue = db ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU;
        g.aux = aux.data_ptr();
        g.aux_ld = K;
        break;
    }
    if (lt_matmul(g, grad_pre.dtype(), grad_pre.device().index())) {
      if (act == LinearActivation::None && db) linear_composite::column_sums(grad_bias, grad_pre);
      return;
    }
  }
  linear_composite::backward_act(grad_pre, grad_bias, grad_out, w, h, aux, act);
}

}  // namespace

MT_REGISTER_KERNEL(linear_forward_kernel, kCUDA, &linear_forward_cuda);
MT_REGISTER_KERNEL(linear_backward_weight_kernel, kCUDA, &linear_backward_weight_cuda);
MT_REGISTER_KERNEL(linear_backward_act_kernel, kCUDA, &linear_backward_act_cuda);

}  // namespace mantissa::cuda
