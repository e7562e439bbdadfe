// CPU fused linear ops. Dense float32 layers (the common case) call SGEMM directly and apply the
// bias and ReLU in one pass over the GEMM's output; the backward fuses ReLU's derivative with the
// bias gradient's column sums. Everything else (other dtypes, strided operands, GELU, TF32
// emulation) runs the shared composition of the bmm, add, sum and activation kernels
// (kernels/linear_composite.h), which is also what the CUDA kernels fall back to. The direct path
// computes exactly what the composition does: the same GEMM, bias added in float32 after it, ReLU
// after the bias, and bias gradients accumulated in double row by row like the sum kernel. The
// CPU never makes a ReLU mask: ReLU's backward reads the layer's output.
#include <cblas.h>

#include <climits>
#include <memory>

#include "engine/precision.h"
#include "kernels/linear_composite.h"

namespace mantissa::cpu {
namespace {

// A 2-D float32 matrix whose rows are dense (unit column stride), as row-major GEMM reads it.
bool dense_rows(const Tensor& m) {
  return m.dtype() == DType::Float32 && m.dim() == 2 && m.size(0) > 0 && m.size(1) > 0 &&
         m.size(0) <= INT_MAX && m.size(1) <= INT_MAX && m.stride(1) == 1 &&
         m.stride(0) >= m.size(1) && m.stride(0) <= INT_MAX;
}

bool contiguous_vector(const Tensor& v, int64_t n) {
  return !v.defined() ||
         (v.dtype() == DType::Float32 && v.dim() == 1 && v.size(0) == n && v.stride(0) == 1);
}

// TF32 emulation rounds the operands first; the bmm kernel owns that.
bool plain_float32_gemm() {
  return effective_matmul_precision(DeviceType::CPU) != MatmulPrecision::High;
}

float relu(float v) { return v < 0.0f ? 0.0f : v; }  // NaN propagates, as in functors.h

// sums[j] += rows of m [rows, cols] (dense rows, leading dim ld), in double, in row order.
void accumulate_columns(double* sums, const float* m, int64_t rows, int64_t cols, int64_t ld) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = m + r * ld;
    for (int64_t j = 0; j < cols; ++j) sums[j] += static_cast<double>(row[j]);
  }
}

void store_sums(const Tensor& out, const double* sums, int64_t n) {
  float* dst = out.data<float>();
  for (int64_t j = 0; j < n; ++j) dst[j] = static_cast<float>(sums[j]);
}

Tensor linear_forward_cpu(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias,
                          LinearActivation act, bool want_aux) {
  const bool direct = act != LinearActivation::GeluTanh && dense_rows(out) && dense_rows(x) &&
                      dense_rows(w) && out.stride(0) == out.size(1) &&
                      contiguous_vector(bias, out.size(1)) && plain_float32_gemm();
  if (!direct) return linear_composite::forward(out, x, w, bias, act, want_aux);
  const int64_t M = out.size(0), N = out.size(1), K = x.size(1);
  float* c = out.data<float>();
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(M), int(N), int(K), 1.0f,
              static_cast<const float*>(x.data_ptr()), int(x.stride(0)),
              static_cast<const float*>(w.data_ptr()), int(w.stride(0)), 0.0f, c, int(N));
  const float* b = bias.defined() ? static_cast<const float*>(bias.data_ptr()) : nullptr;
  const bool relu_out = act == LinearActivation::Relu;
  if (b == nullptr && !relu_out) return Tensor();
  for (int64_t i = 0; i < M; ++i) {
    float* row = c + i * N;
    if (b != nullptr && relu_out) {
      for (int64_t j = 0; j < N; ++j) row[j] = relu(row[j] + b[j]);
    } else if (b != nullptr) {
      for (int64_t j = 0; j < N; ++j) row[j] += b[j];
    } else {
      for (int64_t j = 0; j < N; ++j) row[j] = relu(row[j]);
    }
  }
  return Tensor();
}

void linear_backward_weight_cpu(const Tensor& grad_w, const Tensor& grad_bias,
                                const Tensor& grad_out, const Tensor& x) {
  const bool direct = dense_rows(grad_w) && grad_w.stride(0) == grad_w.size(1) &&
                      dense_rows(grad_out) && dense_rows(x) &&
                      contiguous_vector(grad_bias, grad_out.size(1)) && plain_float32_gemm();
  if (!direct) return linear_composite::backward_weight(grad_w, grad_bias, grad_out, x);
  const int64_t M = grad_out.size(0), N = grad_out.size(1), K = x.size(1);
  const float* g = static_cast<const float*>(grad_out.data_ptr());
  // grad_w [N,K] = grad_out^T [N,M] @ x [M,K]
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(N), int(K), int(M), 1.0f, g,
              int(grad_out.stride(0)), static_cast<const float*>(x.data_ptr()), int(x.stride(0)),
              0.0f, grad_w.data<float>(), int(K));
  if (!grad_bias.defined()) return;
  const std::unique_ptr<double[]> sums(new double[N]());
  accumulate_columns(sums.get(), g, M, N, grad_out.stride(0));
  store_sums(grad_bias, sums.get(), N);
}

void linear_backward_act_cpu(const Tensor& grad_pre, const Tensor& grad_bias,
                             const Tensor& grad_out, const Tensor& w, const Tensor& h,
                             const Tensor& aux, LinearActivation act) {
  const bool direct = act != LinearActivation::GeluTanh && dense_rows(grad_pre) &&
                      grad_pre.stride(0) == grad_pre.size(1) && dense_rows(grad_out) &&
                      dense_rows(w) && (act == LinearActivation::None || dense_rows(h)) &&
                      contiguous_vector(grad_bias, grad_pre.size(1)) && plain_float32_gemm();
  if (!direct) {
    return linear_composite::backward_act(grad_pre, grad_bias, grad_out, w, h, aux, act);
  }
  const int64_t M = grad_pre.size(0), K = grad_pre.size(1), N = grad_out.size(1);
  float* gp = grad_pre.data<float>();
  // grad_pre [M,K] = grad_out [M,N] @ w [N,K]
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(M), int(K), int(N), 1.0f,
              static_cast<const float*>(grad_out.data_ptr()), int(grad_out.stride(0)),
              static_cast<const float*>(w.data_ptr()), int(w.stride(0)), 0.0f, gp, int(K));
  std::unique_ptr<double[]> sums;
  if (grad_bias.defined()) sums.reset(new double[K]());
  const float* hp =
      act == LinearActivation::Relu ? static_cast<const float*>(h.data_ptr()) : nullptr;
  for (int64_t i = 0; i < M; ++i) {
    float* row = gp + i * K;
    if (hp != nullptr) {
      const float* hrow = hp + i * h.stride(0);
      for (int64_t j = 0; j < K; ++j) row[j] = hrow[j] <= 0.0f ? 0.0f : row[j];
    }
    if (sums) {
      for (int64_t j = 0; j < K; ++j) sums[j] += static_cast<double>(row[j]);
    }
  }
  if (sums) store_sums(grad_bias, sums.get(), K);
}

}  // namespace

MT_REGISTER_KERNEL(linear_forward_kernel, kCPU, &linear_forward_cpu);
MT_REGISTER_KERNEL(linear_backward_weight_kernel, kCPU, &linear_backward_weight_cpu);
MT_REGISTER_KERNEL(linear_backward_act_kernel, kCPU, &linear_backward_act_cpu);

}  // namespace mantissa::cpu
