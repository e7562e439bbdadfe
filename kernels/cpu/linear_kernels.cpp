// CPU fused linear ops. Dense float32, float16 and bfloat16 layers (rows with unit stride) call
// SGEMM directly and apply the bias and ReLU in one pass over the GEMM's output; the backward
// fuses ReLU's derivative with the bias gradient's column sums. Everything else (float64,
// strided operands, GELU, TF32 emulation) runs the shared composition of the bmm, add, sum and
// activation kernels (kernels/linear_composite.h), which is also what the CUDA kernels fall back
// to. The direct path computes exactly what the composition does: the same GEMM on the same
// float32 operands (half types widened exactly), the result rounded to the storage type, the bias
// added in float and rounded again, ReLU after that, and bias gradients accumulated in double row
// by row like the sum kernel. The CPU never makes a ReLU mask: ReLU's backward reads the output.
// bfloat16 layers run their GEMMs on the CPU's bf16 instructions where it has them
// (kernels/cpu/gemm/bf16_gemm.h: the same contract, summed in another order), reading the
// operands as they are stored; the passes after the GEMM are the same.
#include <algorithm>
#include <climits>
#include <type_traits>
#include <vector>

#include "engine/precision.h"
#include "kernels/activation_math.h"
#include "kernels/cpu/convert_dense.h"
#include "kernels/cpu/gemm/bf16_gemm.h"
#include "kernels/cpu/gemm/row_passes.h"
#include "kernels/cpu/gemm/sgemm.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/worker_pool.h"
#include "kernels/linear_composite.h"

namespace mantissa::cpu {
namespace {

// A 2-D matrix of `dtype` whose rows are dense (unit column stride), as row-major GEMM reads it.
bool dense_rows(const Tensor& m, DType dtype) {
  return m.dtype() == dtype && m.dim() == 2 && m.size(0) > 0 && m.size(1) > 0 &&
         m.size(0) <= INT_MAX && m.size(1) <= INT_MAX && m.stride(1) == 1 &&
         m.stride(0) >= m.size(1) && m.stride(0) <= INT_MAX;
}
bool dense(const Tensor& m, DType dtype) {
  return dense_rows(m, dtype) && m.stride(0) == m.size(1);
}
bool contiguous_vector(const Tensor& v, DType dtype, int64_t n) {
  return !v.defined() || (v.dtype() == dtype && v.dim() == 1 && v.size(0) == n && v.stride(0) == 1);
}

// The storage types with a direct path. float32 also needs plain float32 GEMMs: TF32 emulation
// rounds the operands first, which the bmm kernel owns.
bool direct_dtype(DType dtype) {
  if (dtype == DType::Float16 || dtype == DType::BFloat16) return true;
  return dtype == DType::Float32 &&
         effective_matmul_precision(DeviceType::CPU) != MatmulPrecision::High;
}

using FloatScratch = Scratch<float>;  // one per role and thread

// One storage row <-> float: a plain copy for float32, F16C/bit-shift conversion for half types.
template <typename Src, typename Dst>
void convert_row(const Src* src, Dst* dst, int64_t n) {
  if constexpr (std::is_same_v<Src, Dst>) {
    std::copy(src, src + n, dst);
  } else {
    convert_dense(src, dst, n);
  }
}
template <typename T>
void widen(const T* src, float* dst, int64_t n) {
  convert_row(src, dst, n);
}
template <typename T>
void narrow_to(const float* src, T* dst, int64_t n) {
  convert_row(src, dst, n);
}

// Elements converted per call in the half-type passes (stays in L1 with its float copy).
constexpr int64_t kChunkElements = 4096;

// A half-type layer's operand in float (exact).
template <typename T>
void widen_operand(const void* src, float* dst, int64_t n) {
  convert_dense(static_cast<const T*>(src), dst, n);
}

// The GEMM operand for a dense-rows matrix m: itself (float32) or its rows widened into `buf`.
template <typename T>
const float* operand(const Tensor& m, FloatScratch& buf, int& ld) {
  if constexpr (std::is_same_v<T, float>) {
    ld = static_cast<int>(m.stride(0));
    return static_cast<const float*>(m.data_ptr());
  } else {
    const int64_t rows = m.size(0), cols = m.size(1), esize = m.element_size();
    float* dst = buf.get(rows * cols);
    const char* src = static_cast<const char*>(m.data_ptr());
    if (m.stride(0) == cols) {
      widen_operand<T>(src, dst, rows * cols);  // dense: one call, not one per (short) row
    } else {
      for (int64_t r = 0; r < rows; ++r)
        widen_operand<T>(src + r * m.stride(0) * esize, dst + r * cols, cols);
    }
    ld = static_cast<int>(cols);
    return dst;
  }
}

// Stores a half-type layer's float results into `out`, rounded to T.
template <typename T>
void store_rounded(const float* src, const Tensor& out, int64_t n) {
  convert_dense_parallel(src, out.data<T>(), n);
}

// Where the GEMM writes: `out` itself (float32, dense) or a float buffer rounded afterwards.
template <typename T>
float* gemm_target(const Tensor& out, FloatScratch& buf) {
  if constexpr (std::is_same_v<T, float>) {
    return out.data<float>();
  } else {
    return buf.get(out.numel());
  }
}

// A bfloat16 layer's product C[M,N] = op(A) op(B) on the bf16 instructions, operands read as
// stored (dense rows; `trans`: op(X) is X's transpose), C float32 or (Out = BFloat16) rounded to
// bf16 by the kernel's store; false when the emulation must run.
template <typename T, typename Out>
bool hardware_product(const Tensor& a, bool ta, const Tensor& b, bool tb, int64_t M, int64_t N,
                      int64_t K, Out* c) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    const Bf16Matrix ma{static_cast<const BFloat16*>(a.data_ptr()), 0, ta, a.stride(0)};
    const Bf16Matrix mb{static_cast<const BFloat16*>(b.data_ptr()), 0, tb, b.stride(0)};
    return bf16_gemm(1, M, N, K, ma, mb, c, N, 0);
  } else {
    return false;
  }
}

// Elements from which a bias/activation pass is split across the worker pool: twice the pool's
// own grain, so MLP 512's 256 x 512 passes stay on one thread, where splitting them measured no
// gain, and a GPT layer's 2048 x 128 and larger ones split (bench/NOTES.md).
constexpr int64_t kPassGrain = int64_t(1) << 18;

// How the GEMM epilogue stores a layer of storage type T: float32 into C, or rounded to T and
// narrowed into `p` (null: C, with the values rounded but still float).
template <typename T>
GemmEpilogue::Store store_as(T* p) {
  if constexpr (std::is_same_v<T, BFloat16>) return {Rounding::BFloat16, p};
  if constexpr (std::is_same_v<T, Half>) return {Rounding::Float16, p};
  return {};
}

struct Buffers {
  FloatScratch a, b, c, row, row2;
  std::vector<double> sums;  // bias-gradient column sums
};
// The bias-gradient sums, zeroed, from this thread's buffer.
double* zeroed_sums(Buffers& buf, int64_t n) {
  buf.sums.assign(static_cast<size_t>(n), 0.0);
  return buf.sums.data();
}
Buffers& buffers() {
  thread_local Buffers b;
  return b;
}

template <typename T>
void store_sums(const Tensor& out, const double* sums, int64_t n) {
  // As the sum kernel stores: T(double), i.e. through float for the half types.
  if constexpr (std::is_same_v<T, float>) {
    T* dst = out.data<T>();
    for (int64_t j = 0; j < n; ++j) dst[j] = T(sums[j]);
  } else {
    // Through float, then rounded by the vector conversions (float16's scalar one is software).
    float* f = buffers().row.get(n);
    for (int64_t j = 0; j < n; ++j) f[j] = static_cast<float>(sums[j]);
    store_rounded<T>(f, out, n);
  }
}

template <typename T>
void forward_direct(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias,
                    bool relu_out) {
  Buffers& buf = buffers();
  const int64_t M = out.size(0), N = out.size(1), K = x.size(1);
  float* c = gemm_target<T>(out, buf.c);
  const float* bf = nullptr;
  if (bias.defined()) {
    if constexpr (std::is_same_v<T, float>) {
      bf = bias.data<float>();
    } else {
      float* tmp = buf.row2.get(N);
      widen_operand<T>(bias.data_ptr(), tmp, N);
      bf = tmp;
    }
  }
  T* o = out.data<T>();
  bool refused = false;
  if constexpr (std::is_same_v<T, BFloat16>) {
    // The product rounded once by the kernel's store, straight into out; the bias and ReLU then
    // run on it in place, each chunk of rows widened exactly into an L1 buffer (rounding a bf16
    // value again changes nothing: the same values as the float32 C path).
    if (hardware_product<T>(x, false, w, true, M, N, K, o)) {
      if (bf == nullptr && !relu_out) return;
      parallel_ranges(
          M,
          [&](int64_t i0, int64_t i1) {
            const int64_t chunk = std::max<int64_t>(1, kChunkElements / N);
            float* f = buffers().row.get(chunk * N);  // this thread's
            for (int64_t i = i0; i < i1; i += chunk) {
              const int64_t rows = std::min(chunk, i1 - i);
              widen(o + i * N, f, rows * N);
              round_bias_relu_rows(f, rows, N, bf, relu_out, o + i * N);
            }
          },
          M * N, kPassGrain);
      return;
    }
    refused = true;  // emulate below, without asking again (counted once)
  }
  if (refused || !hardware_product<T>(x, false, w, true, M, N, K, c)) {
    int lda = 0, ldb = 0;
    const float* a = operand<T>(x, buf.a, lda);
    const float* b = operand<T>(w, buf.b, ldb);
    // Small layers: bias, ReLU and the roundings in the GEMM's registers.
    const auto ep = GemmEpilogue::linear_forward(
        store_as<T>(o), {bf},
        relu_out ? GemmEpilogue::Activation::Relu : GemmEpilogue::Activation::Identity);
    if (sgemm_fused(CblasNoTrans, CblasTrans, int(M), int(N), int(K), a, lda, b, ldb, c, int(N),
                    ep))
      return;
    sgemm(CblasNoTrans, CblasTrans, int(M), int(N), int(K), a, lda, b, ldb, c, int(N));
  }
  if constexpr (std::is_same_v<T, float>) {
    if (bf == nullptr && !relu_out) return;
    parallel_ranges(
        M, [&](int64_t i0, int64_t i1) { bias_relu_rows(o + i0 * N, i1 - i0, N, bf, relu_out); },
        M * N, kPassGrain);
  } else {
    // Rounded after the GEMM, again after the bias; ReLU on the rounded value (keeps -0).
    parallel_ranges(
        M,
        [&](int64_t i0, int64_t i1) {
          round_bias_relu_rows(c + i0 * N, i1 - i0, N, bf, relu_out, o + i0 * N);
        },
        M * N, kPassGrain);
  }
}

// The bias gradient, column sums of grad_out as stored (16-bit values widened in registers);
// each column's sum still runs over the rows in order, as the sum kernel's does.
template <typename T>
void bias_grad_from_stored(const Tensor& grad_bias, const Tensor& grad_out, Buffers& buf) {
  const int64_t M = grad_out.size(0), N = grad_out.size(1), ld = grad_out.stride(0);
  const T* go = static_cast<const T*>(grad_out.data_ptr());
  double* sums = zeroed_sums(buf, N);
  parallel_ranges(
      N, [&](int64_t j0, int64_t j1) { add_column_sums(sums + j0, go + j0, M, j1 - j0, ld); },
      M * N, kPassGrain);
  store_sums<T>(grad_bias, sums, N);
}

template <typename T>
void backward_weight_direct(const Tensor& grad_w, const Tensor& grad_bias, const Tensor& grad_out,
                            const Tensor& x) {
  Buffers& buf = buffers();
  const int64_t M = grad_out.size(0), N = grad_out.size(1), K = x.size(1);
  // grad_w [N,K] = grad_out^T [N,M] @ x [M,K], rounded once by the kernel's store.
  if (hardware_product<T>(grad_out, true, x, false, N, K, M, grad_w.data<T>())) {
    if (grad_bias.defined()) bias_grad_from_stored<T>(grad_bias, grad_out, buf);
    return;
  }
  float* c = gemm_target<T>(grad_w, buf.c);
  int ldg = 0, ldx = 0;
  const float* g = operand<T>(grad_out, buf.a, ldg);
  const float* xf = operand<T>(x, buf.b, ldx);
  // Small layers round in the GEMM's registers and store straight into grad_w.
  const auto ep = GemmEpilogue::rounded(store_as<T>(static_cast<T*>(grad_w.data_ptr())));
  if (!sgemm_fused(CblasTrans, CblasNoTrans, int(N), int(K), int(M), g, ldg, xf, ldx, c, int(K),
                   ep)) {
    sgemm(CblasTrans, CblasNoTrans, int(N), int(K), int(M), g, ldg, xf, ldx, c, int(K));
    if constexpr (!std::is_same_v<T, float>) store_rounded<T>(c, grad_w, N * K);
  }
  if (!grad_bias.defined()) return;
  double* sums = zeroed_sums(buf, N);
  // Split by columns: each column's sum still runs over the rows in order.
  parallel_ranges(
      N, [&](int64_t j0, int64_t j1) { add_column_sums(sums + j0, g + j0, M, j1 - j0, ldg); },
      M * N, kPassGrain);
  store_sums<T>(grad_bias, sums, N);
}

template <typename T>
void backward_act_direct(const Tensor& grad_pre, const Tensor& grad_bias, const Tensor& grad_out,
                         const Tensor& w, const Tensor& h, bool relu_act) {
  Buffers& buf = buffers();
  const int64_t M = grad_pre.size(0), K = grad_pre.size(1), N = grad_out.size(1);
  // grad_pre [M,K] = grad_out [M,N] @ w [N,K]. With nothing to apply after it, a bf16 layer's
  // product is rounded by the kernel's store, straight into grad_pre.
  const bool plain = !relu_act && !grad_bias.defined();
  bool refused = false;
  if constexpr (std::is_same_v<T, BFloat16>) {
    if (plain) {
      if (hardware_product<T>(grad_out, false, w, false, M, K, N, grad_pre.data<T>())) return;
      refused = true;  // emulate below, without asking again (counted once)
    }
  }
  float* c = gemm_target<T>(grad_pre, buf.c);
  double* sp = grad_bias.defined() ? zeroed_sums(buf, K) : nullptr;
  if (refused || !hardware_product<T>(grad_out, false, w, false, M, K, N, c)) {
    int ldg = 0, ldw = 0;
    const float* g = operand<T>(grad_out, buf.a, ldg);
    const float* wf = operand<T>(w, buf.b, ldw);
    // Small layers finish it in the GEMM's registers.
    const auto ep = GemmEpilogue::activation_backward(
        store_as<T>(grad_pre.data<T>()),
        relu_act ? GemmEpilogue::ReluGrad{h.data_ptr(), h.stride(0)} : GemmEpilogue::ReluGrad{},
        {sp});
    if (sgemm_fused(CblasNoTrans, CblasNoTrans, int(M), int(K), int(N), g, ldg, wf, ldw, c, int(K),
                    ep)) {
      if (sp != nullptr) store_sums<T>(grad_bias, sp, K);
      return;
    }
    sgemm(CblasNoTrans, CblasNoTrans, int(M), int(K), int(N), g, ldg, wf, ldw, c, int(K));
  }
  if (plain) {
    if constexpr (!std::is_same_v<T, float>) store_rounded<T>(c, grad_pre, M * K);
    return;
  }
  T* gp = grad_pre.data<T>();
  const T* hp = relu_act ? static_cast<const T*>(h.data_ptr()) : nullptr;
  const int64_t ldh = relu_act ? h.stride(0) : 0;
  // Split by columns: each column's bias-gradient sum still runs over the rows in order.
  parallel_ranges(
      K,
      [&](int64_t j0, int64_t j1) {
        const int64_t n = j1 - j0;
        // Whole rows of dense matrices are converted a chunk of rows per call.
        const bool blocks = n == K && (hp == nullptr || ldh == K);
        const int64_t chunk_rows = blocks ? std::max<int64_t>(1, kChunkElements / K) : 1;
        Buffers& local = buffers();  // this thread's
        float* hbuf = local.row2.get(std::min(M, chunk_rows) * n);
        for (int64_t i0 = 0; i0 < M; i0 += chunk_rows) {
          const int64_t rows = std::min(chunk_rows, M - i0), e = rows * n;
          T* block = gp + i0 * K + j0;
          float* gf = nullptr;
          if constexpr (std::is_same_v<T, float>) {
            gf = block;
          } else {
            gf = c + i0 * K + j0;  // this range of the GEMM's float buffer, rounded in place
            round_dense(gf, gf, e, T{});
          }
          if (hp != nullptr) {
            const float* hf = nullptr;
            if constexpr (std::is_same_v<T, float>) {
              hf = hp + i0 * ldh + j0;
            } else {
              widen(hp + i0 * ldh + j0, hbuf, e);
              hf = hbuf;
            }
            for (int64_t t = 0; t < e; ++t) gf[t] = formulas::relu_grad(gf[t], hf[t]);
          }
          if constexpr (!std::is_same_v<T, float>) narrow_to(gf, block, e);  // exact
          if (sp != nullptr) add_column_sums(sp + j0, gf, rows, n, n);
        }
      },
      M * K, kPassGrain);
  if (sp != nullptr) store_sums<T>(grad_bias, sp, K);
}

template <typename F>
void with_storage_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::Float16:
      f(Half{});
      return;
    case DType::BFloat16:
      f(BFloat16{});
      return;
    default:
      f(0.0f);
      return;
  }
}

Tensor linear_forward_cpu(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias,
                          LinearActivation act, bool want_aux) {
  const DType dt = out.dtype();
  const bool direct = act != LinearActivation::GeluTanh && direct_dtype(dt) && dense(out, dt) &&
                      dense_rows(x, dt) && dense_rows(w, dt) &&
                      contiguous_vector(bias, dt, out.size(1));
  if (!direct) return linear_composite::forward(out, x, w, bias, act, want_aux);
  with_storage_type(dt, [&](auto tag) {
    forward_direct<decltype(tag)>(out, x, w, bias, act == LinearActivation::Relu);
  });
  return Tensor();
}

void linear_backward_weight_cpu(const Tensor& grad_w, const Tensor& grad_bias,
                                const Tensor& grad_out, const Tensor& x) {
  const DType dt = grad_out.dtype();
  const bool direct = direct_dtype(dt) && dense(grad_w, dt) && dense_rows(grad_out, dt) &&
                      dense_rows(x, dt) && contiguous_vector(grad_bias, dt, grad_out.size(1));
  if (!direct) {
    linear_composite::backward_weight(grad_w, grad_bias, grad_out, x);
    return;
  }
  with_storage_type(
      dt, [&](auto tag) { backward_weight_direct<decltype(tag)>(grad_w, grad_bias, grad_out, x); });
}

void linear_backward_act_cpu(const Tensor& grad_pre, const Tensor& grad_bias,
                             const Tensor& grad_out, const Tensor& w, const Tensor& h,
                             const Tensor& aux, LinearActivation act) {
  const DType dt = grad_pre.dtype();
  const bool relu_act = act == LinearActivation::Relu;
  const bool direct = act != LinearActivation::GeluTanh && direct_dtype(dt) &&
                      dense(grad_pre, dt) && dense_rows(grad_out, dt) && dense_rows(w, dt) &&
                      (!relu_act || (dense_rows(h, dt) && h.size(0) == grad_pre.size(0) &&
                                     h.size(1) == grad_pre.size(1))) &&
                      contiguous_vector(grad_bias, dt, grad_pre.size(1));
  if (!direct) {
    linear_composite::backward_act(grad_pre, grad_bias, grad_out, w, h, aux, act);
    return;
  }
  with_storage_type(dt, [&](auto tag) {
    backward_act_direct<decltype(tag)>(grad_pre, grad_bias, grad_out, w, h, relu_act);
  });
}

}  // namespace

MT_REGISTER_KERNEL(linear_forward_kernel, kCPU, &linear_forward_cpu);
MT_REGISTER_KERNEL(linear_backward_weight_kernel, kCPU, &linear_backward_weight_cpu);
MT_REGISTER_KERNEL(linear_backward_act_kernel, kCPU, &linear_backward_act_cpu);

}  // namespace mantissa::cpu
