// CPU 2-D convolution as im2col + GEMM on OpenBLAS, one image at a time.
//
// For image n and group g, im2col lays the receptive fields out as a column matrix
// col [K = C/g*kh*kw, L = Ho*Wo] (zeros where a window hangs over the padding), so that
//   forward:         out[n,g]  = W[g] [O/g, K] @ col
//   backward input:  col'      = W[g]^T @ grad_out[n,g], then col2im sums col' back into the image
//   backward weight: gW[g]    += grad_out[n,g] @ col^T   (accumulated over n in batch order)
// GEMMs accumulate in float (double for float64). bfloat16 runs on the CPU's bf16 instructions
// where it has them (kernels/cpu/gemm/bf16_gemm.h): col and the operands stay bfloat16. Otherwise
// half types are widened while building col. Results are rounded once on store. Images are
// processed in order and every im2col/col2im loop splits work by channel, so results do not depend
// on the thread count. A 1x1 / stride 1 / no padding convolution skips im2col: the image itself is
// the column matrix.
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <type_traits>
#include <vector>

#include "engine/cpu_matmul_paths.h"
#include "engine/kernel_tables.h"
#include "kernels/conv_columns.h"
#include "kernels/conv_composite.h"
#include "kernels/cpu/convert_dense.h"
#include "kernels/cpu/gemm/bf16_gemm.h"
#include "kernels/cpu/gemm/blas.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/scratch.h"

namespace mantissa::cpu {
namespace {

// C = alpha * op(A) @ op(B) + beta * C, row-major with dense leading dims.
inline void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  blas_gemm(ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, lda,
            b, ldb, beta, c, ldc);
}
inline void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
                 const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  blas_gemm(ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0, a, lda, b,
            ldb, beta, c, ldc);
}

// bfloat16 operands with float C: on the bf16 instructions, or (emulation, a product small enough
// for the in-house loops, a layout oneDNN refuses) widened exactly to float for blas_gemm.
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const BFloat16* a, int64_t lda,
          const BFloat16* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (bf16_gemm(1, m, n, k, {a, 0, ta, lda}, {b, 0, tb, ldb}, c, ldc, 0, beta)) return;
  thread_local Scratch<float> fa, fb;
  // A stored matrix of `rows` rows with row stride ld, of which each row holds `cols` values.
  auto widened = [](const BFloat16* x, int64_t rows, int64_t cols, int64_t ld,
                    Scratch<float>& buf) {
    const int64_t n = rows > 0 ? (rows - 1) * ld + cols : 0;
    float* dst = buf.get(n);
    convert_dense(x, dst, n);
    return dst;
  };
  const float* wa = widened(a, ta ? k : m, ta ? m : k, lda, fa);
  const float* wb = widened(b, tb ? n : k, tb ? k : n, ldb, fb);
  gemm(ta, tb, m, n, k, wa, lda, wb, ldb, beta, c, ldc);
}

// The geometry shared by the three kernels, read off the operands' shapes.
struct Geometry {
  int64_t N, C, H, W, O, kh, kw, Ho, Wo, groups;
  int64_t Cg, Og, K, L;  // per-group channels, col rows and columns
  int64_t sh, sw, ph, pw, dh, dw;
  bool pointwise;  // 1x1, stride 1, no padding: col is the image itself

  Geometry(const Shape& in, const Shape& w, const Shape& out, const Conv2dParams& p)
      : N(in[0]),
        C(in[1]),
        H(in[2]),
        W(in[3]),
        O(w[0]),
        kh(w[2]),
        kw(w[3]),
        Ho(out[2]),
        Wo(out[3]),
        groups(p.groups),
        Cg(w[1]),
        Og(w[0] / p.groups),
        K(w[1] * w[2] * w[3]),
        L(out[2] * out[3]),
        sh(p.stride[0]),
        sw(p.stride[1]),
        ph(p.padding[0]),
        pw(p.padding[1]),
        dh(p.dilation[0]),
        dw(p.dilation[1]) {
    pointwise = kh == 1 && kw == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0;
    MT_CHECK(K <= INT_MAX && L <= INT_MAX && O <= INT_MAX, "conv2d: sizes exceed the BLAS ",
             "integer range (input ", in, ", weight ", w, ")");
  }
};

// col [K, L] <- the receptive fields of x [Cg, H, W] (element type T, widened to Acc).
template <typename Acc, typename T>
void im2col(const T* x, Acc* col, const Geometry& g) {
#pragma omp parallel for if (g.K * g.L >= kOmpGrain)
  for (int64_t c = 0; c < g.Cg; ++c) {
    const T* plane = x + c * g.H * g.W;
    for (int64_t i = 0; i < g.kh; ++i) {
      for (int64_t j = 0; j < g.kw; ++j) {
        Acc* row = col + ((c * g.kh + i) * g.kw + j) * g.L;
        for (int64_t oh = 0; oh < g.Ho; ++oh) {
          Acc* dst = row + oh * g.Wo;
          const int64_t ih = oh * g.sh - g.ph + i * g.dh;
          if (ih < 0 || ih >= g.H) {
            std::fill(dst, dst + g.Wo, Acc(0.0f));
            continue;
          }
          const T* src = plane + ih * g.W;
          for (int64_t ow = 0; ow < g.Wo; ++ow) {
            const int64_t iw = ow * g.sw - g.pw + j * g.dw;
            dst[ow] = (iw >= 0 && iw < g.W) ? static_cast<Acc>(static_cast<opmath_t<T>>(src[iw]))
                                            : Acc(0.0f);
          }
        }
      }
    }
  }
}

// x [Cg, H, W] += col [K, L] folded back onto the image (overlapping windows sum).
template <typename Acc>
void col2im(const Acc* col, Acc* x, const Geometry& g) {
#pragma omp parallel for if (g.K * g.L >= kOmpGrain)
  for (int64_t c = 0; c < g.Cg; ++c) {
    Acc* plane = x + c * g.H * g.W;
    for (int64_t i = 0; i < g.kh; ++i) {
      for (int64_t j = 0; j < g.kw; ++j) {
        const Acc* row = col + ((c * g.kh + i) * g.kw + j) * g.L;
        for (int64_t oh = 0; oh < g.Ho; ++oh) {
          const int64_t ih = oh * g.sh - g.ph + i * g.dh;
          if (ih < 0 || ih >= g.H) continue;
          const Acc* src = row + oh * g.Wo;
          Acc* dst = plane + ih * g.W;
          for (int64_t ow = 0; ow < g.Wo; ++ow) {
            const int64_t iw = ow * g.sw - g.pw + j * g.dw;
            if (iw >= 0 && iw < g.W) dst[iw] += src[ow];
          }
        }
      }
    }
  }
}

template <typename Acc, typename T>
void widen(const T* src, Acc* dst, int64_t n) {
#pragma omp parallel for if (n >= kOmpGrain)
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<Acc>(static_cast<opmath_t<T>>(src[i]));
}
template <typename Acc, typename T>
void narrow_store(const Acc* src, T* dst, int64_t n) {
#pragma omp parallel for if (n >= kOmpGrain)
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<T>(src[i]);
}

// A T tensor's data as Acc: the data itself when the types agree, else a widened copy in `buf`.
template <typename Acc, typename T>
const Acc* as_acc(const Tensor& t, std::vector<Acc>& buf) {
  if constexpr (std::is_same_v<Acc, T>) {
    return t.data<T>();
  } else {
    buf.resize(static_cast<size_t>(t.numel()));
    widen(t.data<T>(), buf.data(), t.numel());
    return buf.data();
  }
}

// The column matrix of one image group: built in `col`, or the image itself when that is one.
template <typename Acc, typename T>
const Acc* columns(const T* x, std::vector<Acc>& col, bool use_col, const Geometry& g) {
  if constexpr (std::is_same_v<Acc, T>) {
    if (!use_col) return x;
  }
  im2col<Acc, T>(x, col.data(), g);
  return col.data();
}

template <typename T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Op is the GEMM operands' type: T itself for bfloat16 on the bf16 instructions, else Acc.
template <typename T, typename Op>
void forward_impl(const Tensor& out, const Tensor& input, const Tensor& weight, const Tensor& bias,
                  const Geometry& g) {
  using Acc = acc_t<T>;
  constexpr bool kSame = std::is_same_v<Acc, T>;
  std::vector<Acc> b_buf, out_img;
  std::vector<Op> w_buf, col;
  const Op* w = as_acc<Op, T>(weight, w_buf);
  const Acc* b = bias.defined() ? as_acc<Acc, T>(bias, b_buf) : nullptr;
  const T* x = input.data<T>();
  T* y = out.data<T>();
  const bool use_col = !g.pointwise || !std::is_same_v<Op, T>;
  if (use_col) col.resize(static_cast<size_t>(g.K * g.L));
  if (!kSame) out_img.resize(static_cast<size_t>(g.O * g.L));

  for (int64_t n = 0; n < g.N; ++n) {
    Acc* y_img = nullptr;
    if constexpr (kSame) {
      y_img = y + n * g.O * g.L;
    } else {
      y_img = out_img.data();
    }
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      const T* x_g = x + (n * g.C + grp * g.Cg) * g.H * g.W;
      const Op* cols = columns<Op, T>(x_g, col, use_col, g);
      gemm(false, false, g.Og, g.L, g.K, w + grp * g.Og * g.K, g.K, cols, g.L, Acc(0),
           y_img + grp * g.Og * g.L, g.L);
    }
    if (b != nullptr) {
#pragma omp parallel for if (g.O * g.L >= kOmpGrain)
      for (int64_t o = 0; o < g.O; ++o) {
        Acc* row = y_img + o * g.L;
        for (int64_t l = 0; l < g.L; ++l) row[l] += b[o];
      }
    }
    if constexpr (!kSame) narrow_store(y_img, y + n * g.O * g.L, g.O * g.L);
  }
}

template <typename T, typename Op>
void backward_input_impl(const Tensor& grad_input, const Tensor& grad_out, const Tensor& weight,
                         const Geometry& g) {
  using Acc = acc_t<T>;
  constexpr bool kSame = std::is_same_v<Acc, T>;
  constexpr bool kOpSame = std::is_same_v<Op, T>;
  std::vector<Acc> col, gx_img;
  std::vector<Op> w_buf, go_buf;
  const Op* w = as_acc<Op, T>(weight, w_buf);
  const T* go = grad_out.data<T>();
  T* gx = grad_input.data<T>();
  const int64_t img = g.C * g.H * g.W;
  if (!g.pointwise) col.resize(static_cast<size_t>(g.K * g.L));
  if (!kSame) gx_img.resize(static_cast<size_t>(img));
  if (!kOpSame) go_buf.resize(static_cast<size_t>(g.O * g.L));

  for (int64_t n = 0; n < g.N; ++n) {
    Acc* gx_n = nullptr;
    if constexpr (kSame) {
      gx_n = gx + n * img;
    } else {
      gx_n = gx_img.data();
    }
    const Op* go_n = nullptr;
    if constexpr (kOpSame) {
      go_n = go + n * g.O * g.L;
    } else {
      widen(go + n * g.O * g.L, go_buf.data(), g.O * g.L);
      go_n = go_buf.data();
    }
    // The pointwise case writes the GEMM result straight into the image; otherwise col2im
    // accumulates into a zeroed image.
    if (!g.pointwise) std::fill(gx_n, gx_n + img, Acc(0));
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      Acc* gx_g = gx_n + grp * g.Cg * g.H * g.W;
      Acc* dst = g.pointwise ? gx_g : col.data();
      gemm(true, false, g.K, g.L, g.Og, w + grp * g.Og * g.K, g.K, go_n + grp * g.Og * g.L, g.L,
           Acc(0), dst, g.L);
      if (!g.pointwise) col2im(col.data(), gx_g, g);
    }
    if constexpr (!kSame) narrow_store(gx_n, gx + n * img, img);
  }
}

template <typename T, typename Op>
void backward_weight_impl(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& input,
                          const Geometry& g) {
  using Acc = acc_t<T>;
  constexpr bool kSame = std::is_same_v<Acc, T>;
  constexpr bool kOpSame = std::is_same_v<Op, T>;
  std::vector<Acc> gw_buf;
  std::vector<Op> go_buf, col;
  const T* x = input.data<T>();
  const T* go = grad_out.data<T>();
  T* gw_out = grad_weight.data<T>();
  const int64_t wn = g.O * g.K;
  Acc* gw = nullptr;
  if constexpr (kSame) {
    gw = gw_out;
  } else {
    gw_buf.resize(static_cast<size_t>(wn));
    gw = gw_buf.data();
  }
  if (!kOpSame) go_buf.resize(static_cast<size_t>(g.O * g.L));
  std::fill(gw, gw + wn, Acc(0));
  const bool use_col = !g.pointwise || !kOpSame;
  if (use_col) col.resize(static_cast<size_t>(g.K * g.L));

  for (int64_t n = 0; n < g.N; ++n) {
    const Op* go_n = nullptr;
    if constexpr (kOpSame) {
      go_n = go + n * g.O * g.L;
    } else {
      widen(go + n * g.O * g.L, go_buf.data(), g.O * g.L);
      go_n = go_buf.data();
    }
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      const T* x_g = x + (n * g.C + grp * g.Cg) * g.H * g.W;
      const Op* cols = columns<Op, T>(x_g, col, use_col, g);
      gemm(false, true, g.Og, g.K, g.L, go_n + grp * g.Og * g.L, g.L, cols, g.L, Acc(1),
           gw + grp * g.Og * g.K, g.K);
    }
  }
  if constexpr (!kSame) narrow_store(gw, gw_out, wn);
}

// Calls f(Op{}) with the GEMM operands' type for storage type T: bfloat16 itself when the CPU
// runs bf16 products on its instructions, else the accumulation type.
template <typename T, typename F>
void with_operand_type(F&& f) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    if (cpu_bf16_matmul_isa() != Bf16MatmulIsa::Emulated) {
      f(BFloat16{});
      return;
    }
  }
  f(acc_t<T>{});
}

void conv2d_forward_cpu(const Tensor& out, const Tensor& input, const Tensor& weight,
                        const Tensor& bias, const Conv2dParams& p) {
  if (out.numel() == 0) return;
  const Geometry g(input.shape(), weight.shape(), out.shape(), p);
  dispatch_dtype<kFloatingTypes>(out.dtype(), "conv2d", out.device(), [&](auto tag) {
    with_operand_type<typename decltype(tag)::type>([&](auto op) {
      forward_impl<typename decltype(tag)::type, decltype(op)>(out, input, weight, bias, g);
    });
  });
}

void conv2d_backward_input_cpu(const Tensor& grad_input, const Tensor& grad_out,
                               const Tensor& weight, const Conv2dParams& p) {
  if (grad_input.numel() == 0) return;
  const Geometry g(grad_input.shape(), weight.shape(), grad_out.shape(), p);
  dispatch_dtype<kFloatingTypes>(
      grad_input.dtype(), "conv2d_backward_input", grad_input.device(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        if (g.O == 0) {
          std::memset(grad_input.data_ptr(), 0, static_cast<size_t>(grad_input.nbytes()));
          return;
        }
        with_operand_type<T>([&](auto op) {
          backward_input_impl<T, decltype(op)>(grad_input, grad_out, weight, g);
        });
      });
}

void conv2d_backward_weight_cpu(const Tensor& grad_weight, const Tensor& grad_out,
                                const Tensor& input, const Conv2dParams& p) {
  if (grad_weight.numel() == 0) return;
  const Geometry g(input.shape(), grad_weight.shape(), grad_out.shape(), p);
  dispatch_dtype<kFloatingTypes>(
      grad_weight.dtype(), "conv2d_backward_weight", grad_weight.device(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        with_operand_type<T>([&](auto op) {
          backward_weight_impl<T, decltype(op)>(grad_weight, grad_out, input, g);
        });
      });
}

// The column matrices of the composed convolution (kernels/conv_composite.h): elementwise over
// the output with the index math of kernels/conv_columns.h, the same as the CUDA kernels run.
void conv2d_im2col_cpu(const Tensor& cols, const Tensor& input, const Conv2dParams& p, int64_t kh,
                       int64_t kw) {
  const conv_columns::Geometry g = conv_composite::geometry(input.shape(), p, kh, kw);
  const int64_t n = cols.numel();
  dispatch_dtype<kFloatingTypes>(cols.dtype(), "conv2d_im2col", cols.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = static_cast<const T*>(input.data_ptr());
    T* out = static_cast<T*>(cols.data_ptr());
#pragma omp parallel for if (n >= kOmpGrain)
    for (int64_t e = 0; e < n; ++e) out[e] = conv_columns::im2col_element(x, g, e);
  });
}

void conv2d_col2im_cpu(const Tensor& input, const Tensor& cols, const Conv2dParams& p, int64_t kh,
                       int64_t kw) {
  const conv_columns::Geometry g = conv_composite::geometry(input.shape(), p, kh, kw);
  const int64_t n = input.numel();
  dispatch_dtype<kFloatingTypes>(input.dtype(), "conv2d_col2im", input.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* c = static_cast<const T*>(cols.data_ptr());
    T* out = static_cast<T*>(input.data_ptr());
#pragma omp parallel for if (n >= kOmpGrain)
    for (int64_t e = 0; e < n; ++e)
      out[e] = static_cast<T>(conv_columns::col2im_element<opmath_t<T>>(c, g, e));
  });
}

}  // namespace

MT_REGISTER_KERNEL(conv2d_im2col_kernel, kCPU, &conv2d_im2col_cpu);
MT_REGISTER_KERNEL(conv2d_col2im_kernel, kCPU, &conv2d_col2im_cpu);
MT_REGISTER_KERNEL(conv2d_forward_kernel, kCPU, &conv2d_forward_cpu);
MT_REGISTER_KERNEL(conv2d_backward_input_kernel, kCPU, &conv2d_backward_input_cpu);
MT_REGISTER_KERNEL(conv2d_backward_weight_kernel, kCPU, &conv2d_backward_weight_cpu);

}  // namespace mantissa::cpu
