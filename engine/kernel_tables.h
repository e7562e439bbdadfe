// Every op's kernel table. Kernels receive tensors already checked, promoted and allocated by
// the op (autograd/ops/*): elementwise inputs are expanded to the output's shape and share one
// dtype; outputs may be strided (in-place ops pass `self`).
//
// To find an op's kernels, search for its table name (e.g. `add_kernel`) in kernels/cpu and
// kernels/cuda; the tables of the elementwise lists below are registered from the lists, by the
// functor each names, whose math lives in kernels/functors.h, shared by both devices.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/dispatch.h"
#include "engine/generator.h"
#include "engine/kernel_lists.h"  // made by the build from engine/ops.def
#include "engine/linear_activation.h"
#include "engine/macros.h"
#include "engine/scalar.h"
#include "engine/tensor.h"

namespace mantissa {

// The elementwise tables with generic kernels: the lists MT_FORALL_UNARY_OPS,
// MT_FORALL_BINARY_OPS, MT_FORALL_ACTIVATION_BACKWARD_OPS, MT_FORALL_COMPARISON_OPS and
// MT_FORALL_PREDICATE_OPS, X(table, Functor) per table, made by the build from the MT_KERNEL lines
// of engine/ops.def (each beside its op) into engine/kernel_lists.h. The tables are declared from
// them below; kernels/cpu/elementwise_kernels.cpp, pointwise_kernels.cpp and
// kernels/cuda/{unary,binary,compare,pointwise}_kernels.cu register the generic CPU and CUDA
// kernel of every entry, by the functor of kernels/functors.h that holds its math; a faster CPU
// kernel specializes the generic one there (gelu). Unary and predicate tables are out = f(in);
// binary, activation-backward and comparison tables out = f(a, b): the activations' backward is
// grad_in = grad_out * d(op)/dx from (grad_out, saved), saved being the forward input, or the
// output for relu, sigmoid and tanh; comparisons give bool; floor_divide, remainder and fmod's
// integer operands have no zero divisor (the op checks).

using UnaryKernel = void (*)(const Tensor& out, const Tensor& in);
using BinaryKernel = void (*)(const Tensor& out, const Tensor& a, const Tensor& b);
#define MT_UNARY_TABLE(name, functor) MT_KERNEL_TABLE(name, UnaryKernel)
#define MT_BINARY_TABLE(name, functor) MT_KERNEL_TABLE(name, BinaryKernel)
MT_FORALL_UNARY_OPS(MT_UNARY_TABLE)
MT_FORALL_BINARY_OPS(MT_BINARY_TABLE)
MT_FORALL_ACTIVATION_BACKWARD_OPS(MT_BINARY_TABLE)
MT_FORALL_COMPARISON_OPS(MT_BINARY_TABLE)
MT_FORALL_PREDICATE_OPS(MT_UNARY_TABLE)
#undef MT_UNARY_TABLE
#undef MT_BINARY_TABLE

// out = a + alpha * b
using AddKernel = void (*)(const Tensor& out, const Tensor& a, const Tensor& b,
                           const Scalar& alpha);
MT_KERNEL_TABLE(add, AddKernel)
// out = cond ? a : b
using WhereKernel = void (*)(const Tensor& out, const Tensor& cond, const Tensor& a,
                             const Tensor& b);
MT_KERNEL_TABLE(where, WhereKernel)
// out = min(max(in, lo), hi), either bound optional
using ClampKernel = void (*)(const Tensor& out, const Tensor& in, const Scalar* lo,
                             const Scalar* hi);
MT_KERNEL_TABLE(clamp, ClampKernel)

// dst = src, converting dtype; same device, same shape (src may be expanded), any strides.
using CopyKernel = void (*)(const Tensor& dst, const Tensor& src);
MT_KERNEL_TABLE(copy, CopyKernel)
using FillKernel = void (*)(const Tensor& out, const Scalar& value);
MT_KERNEL_TABLE(fill, FillKernel)
// The casts of FP8 training (kernels/float8_math.h). float8_cast: out (a float8 dtype) =
// saturate(float32(x) * scale), x floating, scale float32; x and scale are expanded to out's
// shape. amax_to_scale: scale (float32) = fp8_max / max(amax, 1e-12), computed in float64 and
// rounded to float32, rounded down to a power of two when asked; amax (floating) and scale have
// the same shape.
using Float8CastKernel = void (*)(const Tensor& out, const Tensor& x, const Tensor& scale);
MT_KERNEL_TABLE(float8_cast, Float8CastKernel)
using AmaxToScaleKernel = void (*)(const Tensor& scale, const Tensor& amax, double fp8_max,
                                   bool power_of_2);
MT_KERNEL_TABLE(amax_to_scale, AmaxToScaleKernel)
// out[i] = start + i * step
using ArangeKernel = void (*)(const Tensor& out, const Scalar& start, const Scalar& step);
MT_KERNEL_TABLE(arange, ArangeKernel)
// out[i] evenly spaced from start to end inclusive, computed symmetrically from both ends
using LinspaceKernel = void (*)(const Tensor& out, double start, double end);
MT_KERNEL_TABLE(linspace, LinspaceKernel)

// Reductions. `out` has in's rank with size 1 on every reduced dim (keepdim form); a dim is
// reduced where out's size is 1 and in's is not. Accumulation is in opmath (double for float64).
using ReduceKernel = void (*)(const Tensor& out, const Tensor& in);
MT_KERNEL_TABLE(sum, ReduceKernel)
MT_KERNEL_TABLE(mean, ReduceKernel)
MT_KERNEL_TABLE(amax, ReduceKernel)
MT_KERNEL_TABLE(amin, ReduceKernel)
MT_KERNEL_TABLE(all_finite, ReduceKernel)  // out (bool, 1 element): no inf/nan in `in`
using VarKernel = void (*)(const Tensor& out, const Tensor& in, int64_t correction);
MT_KERNEL_TABLE(var, VarKernel)
using VectorNormKernel = void (*)(const Tensor& out, const Tensor& in, double p);
MT_KERNEL_TABLE(vector_norm, VectorNormKernel)
// values/indices (int64) of the max/min along `dim`; both in keepdim form.
using ArgReduceKernel = void (*)(const Tensor& values, const Tensor& indices, const Tensor& in,
                                 int64_t dim);
MT_KERNEL_TABLE(max_dim, ArgReduceKernel)
MT_KERNEL_TABLE(min_dim, ArgReduceKernel)

// Softmax along `dim` (out contiguous, same shape as in).
using SoftmaxKernel = void (*)(const Tensor& out, const Tensor& in, int64_t dim);
MT_KERNEL_TABLE(softmax, SoftmaxKernel)
MT_KERNEL_TABLE(log_softmax, SoftmaxKernel)
// grad_in from grad_out and the forward output
using SoftmaxBackwardKernel = void (*)(const Tensor& grad_in, const Tensor& grad_out,
                                       const Tensor& output, int64_t dim);
MT_KERNEL_TABLE(softmax_backward, SoftmaxBackwardKernel)
MT_KERNEL_TABLE(log_softmax_backward, SoftmaxBackwardKernel)

// Cross-entropy of rows of logits against class indices, and optionally its gradient, in one pass
// per row (kernels/cross_entropy_math.h has the math both devices share). logits [n, V] is
// contiguous of a floating dtype T; target int64 [n]; loss [n] contiguous in opmath (float32 for
// the half types and float32, float64 for float64) receives, per row,
//   (1 - s) (lse - z[t]) + s (lse - mean(z)),  lse = log(sum(exp(z))), s = label_smoothing,
// 0 for a row whose target is ignore_index and NaN for a target outside [0, V) (the op checks
// host-resident targets before; a device cannot throw). With `grad`, logits is overwritten with
//   scale[i] (softmax(z) - s / V - (1 - s) onehot(t)),
// rounded once to T (0 for an ignored row, NaN for an out-of-range target); scale is opmath [n]
// with any stride (0: one value for every row), or undefined for 1. Rows are independent.
struct CrossEntropyRowsParams {
  double label_smoothing = 0.0;
  int64_t ignore_index = -100;
  bool grad = false;
};
using CrossEntropyRowsKernel = void (*)(const Tensor& logits, const Tensor& loss,
                                        const Tensor& target, const Tensor& scale,
                                        const CrossEntropyRowsParams& p);
MT_KERNEL_TABLE(cross_entropy_rows, CrossEntropyRowsKernel)

// Batched matrix multiply: out[b] = a[b] @ b[b] for 3-D operands [B,M,K] x [B,K,N] -> [B,M,N]
// (any strides, out contiguous). 2-D mm passes B = 1 views. Half types accumulate in float32
// and round once.
using BmmKernel = void (*)(const Tensor& out, const Tensor& a, const Tensor& b);
MT_KERNEL_TABLE(bmm, BmmKernel)
// c [M,N] = a [M,K] @ b [K,N], or c += a @ b with accumulate, in opmath: a and b share a floating
// dtype (any strides whose rows or columns are dense, else they are packed), c is contiguous
// float32 (float64 for float64 operands) and is the accumulator, so a sum of products over chunks
// of K rounds once, where its caller rounds it. Products of half types are exact in float32, so
// this is bmm's result before its rounding on store, up to the order of the sums. TF32 applies to
// float32 operands as in bmm. The chunked lm_head + cross-entropy sums its weight gradient so.
using GemmOpmathKernel = void (*)(const Tensor& c, const Tensor& a, const Tensor& b,
                                  bool accumulate);
MT_KERNEL_TABLE(gemm_opmath, GemmOpmathKernel)
// The epilogue of a scaled matrix product (scaled_mm): out [M,N] (contiguous, a floating or
// float8 dtype) = acc [M,N] (contiguous float32, the GEMM's sums) * scale_a[i] * scale_b[j] +
// bias[j], rounded once (kernels/scaled_mm_math.h). scale_a is contiguous float32 with 1 or M
// elements, scale_b with 1 or N; bias is contiguous float32 [N], or undefined.
using ScaledMmEpilogueKernel = void (*)(const Tensor& out, const Tensor& acc, const Tensor& scale_a,
                                        const Tensor& scale_b, const Tensor& bias);
MT_KERNEL_TABLE(scaled_mm_epilogue, ScaledMmEpilogueKernel)

// Indexing along `dim` with an int64 index tensor.
using GatherKernel = void (*)(const Tensor& out, const Tensor& in, int64_t dim,
                              const Tensor& index);
MT_KERNEL_TABLE(gather, GatherKernel)
// self[index[i][j]][j] += src[i][j] (dim 0 shown); `self` is updated in place.
using ScatterAddKernel = void (*)(const Tensor& self, int64_t dim, const Tensor& index,
                                  const Tensor& src);
MT_KERNEL_TABLE(scatter_add, ScatterAddKernel)
// out = in.index_select(dim, index) (index is 1-D)
MT_KERNEL_TABLE(index_select, GatherKernel)
// self.index_add_(dim, index, src): self.select(dim, index[i]) += src.select(dim, i)
using IndexAddKernel = void (*)(const Tensor& self, int64_t dim, const Tensor& index,
                                const Tensor& src);
MT_KERNEL_TABLE(index_add, IndexAddKernel)

// Random numbers from the Philox4x32-10 counter-based generator (PhiloxState, engine/generator.h).
using UniformKernel = void (*)(const Tensor& out, double low, double high, PhiloxState state);
MT_KERNEL_TABLE(uniform, UniformKernel)
using NormalKernel = void (*)(const Tensor& out, double mean, double stddev, PhiloxState state);
MT_KERNEL_TABLE(normal, NormalKernel)
using BernoulliKernel = void (*)(const Tensor& out, double p, PhiloxState state);
MT_KERNEL_TABLE(bernoulli, BernoulliKernel)
using RandintKernel = void (*)(const Tensor& out, int64_t low, int64_t high, PhiloxState state);
MT_KERNEL_TABLE(randint, RandintKernel)

// ---- convolution and pooling (kernels/cpu/conv_kernels.cpp, pool_kernels.cpp) ----------------
// The op passes every operand contiguous (NCHW, weight [O, C/groups, kh, kw]) and in one dtype,
// with shapes already checked against PyTorch's output-size formulas; outputs are fresh and fully
// overwritten. This is the layout cuDNN's NCHW descriptors take as they are.
struct Conv2dParams {
  int64_t stride[2], padding[2], dilation[2];  // {height, width}
  int64_t groups;
};
// out [N,O,Ho,Wo] = conv(input [N,C,H,W], weight) + bias ([O], or undefined for none).
using Conv2dForwardKernel = void (*)(const Tensor& out, const Tensor& input, const Tensor& weight,
                                     const Tensor& bias, const Conv2dParams& p);
MT_KERNEL_TABLE(conv2d_forward, Conv2dForwardKernel)
// grad_input [N,C,H,W] from grad_out [N,O,Ho,Wo] and weight (a transposed convolution).
using Conv2dBackwardInputKernel = void (*)(const Tensor& grad_input, const Tensor& grad_out,
                                           const Tensor& weight, const Conv2dParams& p);
MT_KERNEL_TABLE(conv2d_backward_input, Conv2dBackwardInputKernel)
// grad_weight [O,C/groups,kh,kw] from grad_out and the forward input, summed over the batch.
using Conv2dBackwardWeightKernel = void (*)(const Tensor& grad_weight, const Tensor& grad_out,
                                            const Tensor& input, const Conv2dParams& p);
MT_KERNEL_TABLE(conv2d_backward_weight, Conv2dBackwardWeightKernel)
// The column matrices of the composed convolution (kernels/conv_composite.h, the CUDA path where
// cuDNN offers no algorithm; kernels/conv_columns.h has the index math): cols [N, C*kh*kw, Ho*Wo]
// <- the receptive fields of input [N,C,H,W] through a kh x kw window (0 over the padding), and
// its adjoint, input [N,C,H,W] <- for each element the sum of the column entries that read it,
// accumulated in opmath and rounded once. Contiguous operands of one dtype; p.groups unused.
using Conv2dIm2colKernel = void (*)(const Tensor& cols, const Tensor& input, const Conv2dParams& p,
                                    int64_t kh, int64_t kw);
MT_KERNEL_TABLE(conv2d_im2col, Conv2dIm2colKernel)
using Conv2dCol2imKernel = void (*)(const Tensor& input, const Tensor& cols, const Conv2dParams& p,
                                    int64_t kh, int64_t kw);
MT_KERNEL_TABLE(conv2d_col2im, Conv2dCol2imKernel)

// Pooling over [N,C,H,W] planes. Windows start at o * stride - padding; in ceil_mode the output
// size rounds up, but the last window still starts inside the input or its left padding.
struct Pool2dParams {
  int64_t kernel[2], stride[2], padding[2], dilation[2];  // {height, width}; avg: dilation 1
  bool ceil_mode;
  bool count_include_pad;    // avg: padding cells count in the divisor
  int64_t divisor_override;  // avg: divide by this instead when nonzero
};
// out and indices (int64) [N,C,Ho,Wo]; indices are flat h * W + w within each input plane, as
// PyTorch's (NaN wins, first maximum on ties). The CUDA slot needs its own indexing kernel:
// cuDNN pooling has neither indices nor dilation.
using MaxPool2dForwardKernel = void (*)(const Tensor& out, const Tensor& indices,
                                        const Tensor& input, const Pool2dParams& p);
MT_KERNEL_TABLE(max_pool2d_forward, MaxPool2dForwardKernel)
// grad_input [N,C,H,W] = grad_out scattered (summed) to the saved indices.
using MaxPool2dBackwardKernel = void (*)(const Tensor& grad_input, const Tensor& grad_out,
                                         const Tensor& indices, const Pool2dParams& p);
MT_KERNEL_TABLE(max_pool2d_backward, MaxPool2dBackwardKernel)
using AvgPool2dForwardKernel = void (*)(const Tensor& out, const Tensor& input,
                                        const Pool2dParams& p);
MT_KERNEL_TABLE(avg_pool2d_forward, AvgPool2dForwardKernel)
// grad_input [N,C,H,W] from grad_out [N,C,Ho,Wo] (each window's share, summed).
using AvgPool2dBackwardKernel = void (*)(const Tensor& grad_input, const Tensor& grad_out,
                                         const Pool2dParams& p);
MT_KERNEL_TABLE(avg_pool2d_backward, AvgPool2dBackwardKernel)

// ---- linear with fused epilogues and layer norm (kernels/cpu/linear_kernels.cpp,
// layer_norm_kernels.cpp; kernels/cuda/cublaslt_linear.cpp, layer_norm_kernels.cu) ----------------
// The activation a linear layer may fuse into its GEMM: engine/linear_activation.h.
// out [M,N] = act(x [M,K] @ w[N,K]^T + bias[N]), bias optional (undefined). x and w have any
// strides; out is contiguous; all operands share a dtype. With want_aux (a backward will run) the
// kernel returns an aux tensor for the activation's backward (else undefined):
//  - GeluTanh: the pre-activation x @ w^T + bias, contiguous [M,N] in out's dtype.
//  - Relu: none on any device; ReLU's backward reads `out` itself (out > 0 exactly where the
//    pre-activation is, and a NaN output passes the gradient, as PyTorch's threshold_backward).
using LinearForwardKernel = Tensor (*)(const Tensor& out, const Tensor& x, const Tensor& w,
                                       const Tensor& bias, LinearActivation act, bool want_aux);
MT_KERNEL_TABLE(linear_forward, LinearForwardKernel)
// grad_w [N,K] = grad_out[M,N]^T @ x[M,K] and, when grad_bias is defined, grad_bias [N] = column
// sums of grad_out, in one pass over grad_out (cuBLASLt's BGRADB epilogue). grad_w and grad_bias
// are contiguous and overwritten; grad_out and x have any strides.
using LinearBackwardWeightKernel = void (*)(const Tensor& grad_w, const Tensor& grad_bias,
                                            const Tensor& grad_out, const Tensor& x);
MT_KERNEL_TABLE(linear_backward_weight, LinearBackwardWeightKernel)
// The backward of a linear layer whose input h was produced by a fused linear + activation:
// grad_pre [M,K] = (grad_out [M,N] @ w [N,K]) * act'(pre) and, when grad_bias is defined,
// grad_bias [K] = column sums of grad_pre (cuBLASLt's DGELU_BGRAD epilogue for GeluTanh).
// h [M,K] is the forward's activation output and `aux` what linear_forward returned for it with
// want_aux. grad_pre and grad_bias are contiguous and overwritten; grad_out and w have any strides.
using LinearBackwardActKernel = void (*)(const Tensor& grad_pre, const Tensor& grad_bias,
                                         const Tensor& grad_out, const Tensor& w, const Tensor& h,
                                         const Tensor& aux, LinearActivation act);
MT_KERNEL_TABLE(linear_backward_act, LinearBackwardActKernel)

// Layer norm over the last N elements of M rows: out = (x - mean) * rstd * weight + bias, with
// rstd = 1 / sqrt(var + eps) (biased variance). x and out are contiguous [M,N]; weight and bias
// are contiguous [N] or undefined. mean and rstd are contiguous [M] in x's opmath dtype (float32
// for float32/float16/bfloat16, float64 for float64) and are what the backward reads.
using LayerNormForwardKernel = void (*)(const Tensor& out, const Tensor& mean, const Tensor& rstd,
                                        const Tensor& x, const Tensor& weight, const Tensor& bias,
                                        double eps);
MT_KERNEL_TABLE(layer_norm_forward, LayerNormForwardKernel)
// grad_x [M,N], grad_weight [N], grad_bias [N] (each undefined when not wanted; grad_weight
// only with a weight) from grad_out [M,N] (contiguous) and the forward's x, mean, rstd, weight.
using LayerNormBackwardKernel = void (*)(const Tensor& grad_x, const Tensor& grad_weight,
                                         const Tensor& grad_bias, const Tensor& grad_out,
                                         const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                         const Tensor& weight);
MT_KERNEL_TABLE(layer_norm_backward, LayerNormBackwardKernel)

// ---- products, logical reductions, scans and sorting (kernels/cpu/reduce_kernels.cpp,
// scan_sort_kernels.cpp; kernels/cuda/prod_logic_kernels.cu, scan_sort_kernels.cu) ----------------
// prod: in keepdim form as the reductions above; floating inputs give their dtype, integer and
// bool inputs int64 (as sum). any/all: out bool, or uint8 for a uint8 input (PyTorch's rule).
MT_KERNEL_TABLE(prod, ReduceKernel)
MT_KERNEL_TABLE(any, ReduceKernel)
MT_KERNEL_TABLE(all, ReduceKernel)
// Scans along `dim`: out[i] folds in[0..i] (reverse: in[i..n-1]); exclusive leaves in[i] out of
// out[i] (the identity where nothing is left). out and in share shape and dtype (not bool); floats
// accumulate in double, integers in int64, and each output rounds once.
using ScanKernel = void (*)(const Tensor& out, const Tensor& in, int64_t dim, bool reverse,
                            bool exclusive);
MT_KERNEL_TABLE(cumsum, ScanKernel)
MT_KERNEL_TABLE(cumprod, ScanKernel)
// grad_in of out = cumprod(in, dim) from grad_out, exact where `in` has zeros; all four tensors
// share shape and a floating dtype.
using CumprodBackwardKernel = void (*)(const Tensor& grad_in, const Tensor& grad_out,
                                       const Tensor& in, const Tensor& out, int64_t dim);
MT_KERNEL_TABLE(cumprod_backward, CumprodBackwardKernel)
// Stable sort along `dim`: values (in's dtype) and indices (int64) are contiguous with in's shape.
// NaN sorts above every number (last ascending, first descending); equal keys keep input order.
using SortKernel = void (*)(const Tensor& values, const Tensor& indices, const Tensor& in,
                            int64_t dim, bool descending);
MT_KERNEL_TABLE(sort, SortKernel)
// ---- embedding and adaptive pooling (kernels/cpu/embedding_kernels.cpp,
// adaptive_pool_kernels.cpp; kernels/cuda/embedding_kernels.cu, adaptive_pool_kernels.cu)
// ------------------------------------- out [N, D] = the rows of weight [V, D] at indices [N]
// (int64); all contiguous. An index outside [0, V) throws the CPU's message on every device.
using EmbeddingForwardKernel = void (*)(const Tensor& out, const Tensor& weight,
                                        const Tensor& indices);
MT_KERNEL_TABLE(embedding_forward, EmbeddingForwardKernel)
// grad_weight [V, D] (overwritten) = grad_out [N, D] rows summed into the rows indices [N] name,
// except padding_idx's (-1: none), which stays zero. Each row adds its contributions in order of
// n, in opmath, and rounds once: deterministic, and the same bits on every device.
using EmbeddingBackwardKernel = void (*)(const Tensor& grad_weight, const Tensor& grad_out,
                                         const Tensor& indices, int64_t padding_idx);
MT_KERNEL_TABLE(embedding_backward, EmbeddingBackwardKernel)
// Adaptive average pooling of [N,C,H,W] planes to out's [Ho, Wo]: output (oh, ow) averages rows
// [floor(oh*H/Ho), ceil((oh+1)*H/Ho)) and the matching columns (PyTorch's start/end formula).
using AdaptiveAvgPool2dForwardKernel = void (*)(const Tensor& out, const Tensor& input);
MT_KERNEL_TABLE(adaptive_avg_pool2d_forward, AdaptiveAvgPool2dForwardKernel)
// grad_input [N,C,H,W] (overwritten) from grad_out [N,C,Ho,Wo]: each window's share, summed.
using AdaptiveAvgPool2dBackwardKernel = void (*)(const Tensor& grad_input, const Tensor& grad_out);
MT_KERNEL_TABLE(adaptive_avg_pool2d_backward, AdaptiveAvgPool2dBackwardKernel)
// ---- pointwise ops and the activations with parameters (autograd/ops/pointwise.cpp and
// activations.cpp; kernels/cpu/pointwise_kernels.cpp, kernels/cuda/pointwise_kernels.cu) -------
// The listed activations' tables are in engine/activation_kernel_tables.h.
// out = lerp(start, end, weight), all of out's shape (expanded) and dtype; an undefined weight
// means scalar_weight, taken in opmath (PyTorch does not round it to a half type).
using LerpKernel = void (*)(const Tensor& out, const Tensor& start, const Tensor& end,
                            const Tensor& weight, double scalar_weight);
MT_KERNEL_TABLE(lerp, LerpKernel)
// out = self + value * t1 * t2, all of out's shape (expanded) and dtype.
using AddcmulKernel = void (*)(const Tensor& out, const Tensor& self, const Tensor& t1,
                               const Tensor& t2, const Scalar& value);
MT_KERNEL_TABLE(addcmul, AddcmulKernel)
// ---- batch norm, group norm, RMS norm (kernels/cpu/norm_kernels.cpp,
// kernels/cuda/norm_kernels.cu) x is contiguous [N, C, L] (L the product of the spatial dims; RMS
// norm's [M, D] is N = M, C = D, L = 1) and its elements fall into statistics sets of whole
// channels: with per_sample, set n * G + g holds channels [g * C/G, (g + 1) * C/G) of sample n
// (group norm; RMS norm with G = 1); without, set g holds those channels of every sample (batch
// norm, G = C). Weight and bias are per channel. centered: subtract the set's mean (batch/group
// norm); else only scale by the root mean square (RMS norm).
struct NormSets {
  int64_t N = 0, C = 0, L = 0, G = 1;
  bool per_sample = true;
  bool centered = true;
  MT_HOST_DEVICE int64_t sets() const { return per_sample ? N * G : G; }
  // The set holding channel c of sample n.
  MT_HOST_DEVICE int64_t set_of(int64_t n, int64_t c) const {
    const int64_t g = c / (C / G);
    return per_sample ? n * G + g : g;
  }
};
// mean [S] (centered only, else undefined), rstd [S] = 1 / sqrt(var + eps) with the biased
// variance (centered) or the mean of squares, and, when defined, unbiased_var [S] (the running
// statistics' update). All contiguous in x's opmath dtype; sums accumulate in double (CPU).
using NormStatsKernel = void (*)(const Tensor& mean, const Tensor& rstd, const Tensor& unbiased_var,
                                 const Tensor& x, const NormSets& sets, double eps);
MT_KERNEL_TABLE(norm_stats, NormStatsKernel)
// out [N,C,L] = (x - mean[s]) * rstd[s] * weight[c] + bias[c]; mean undefined when not centered,
// weight and bias contiguous [C] or undefined, in x's dtype or (for a float16/bfloat16 x) float32.
using NormApplyKernel = void (*)(const Tensor& out, const Tensor& x, const Tensor& mean,
                                 const Tensor& rstd, const Tensor& weight, const Tensor& bias,
                                 const NormSets& sets);
MT_KERNEL_TABLE(norm_apply, NormApplyKernel)
// The backward of norm_apply, with xhat = (x - mean) * rstd and g = grad_out * weight:
//   stats_from_x (the forward's statistics came from x):
//     grad_x = rstd * (g - mean_set(g) - xhat * mean_set(g * xhat))   (no mean_set(g) term when
//     not centered);
//   else (batch norm in eval mode): grad_x = rstd * g;
//   grad_weight[c] = sum over channel c of grad_out * xhat, grad_bias[c] = sum of grad_out.
// Each output is undefined when not wanted, and contiguous and overwritten otherwise (the
// parameter grads in the parameters' dtype).
using NormBackwardKernel = void (*)(const Tensor& grad_x, const Tensor& grad_weight,
                                    const Tensor& grad_bias, const Tensor& grad_out,
                                    const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                    const Tensor& weight, const NormSets& sets, bool stats_from_x);
MT_KERNEL_TABLE(norm_backward, NormBackwardKernel)

// ---- attention (kernels/cpu/attention_kernels.cpp, kernels/cuda/attention_kernels.cu) -------
// scaled_dot_product_attention over B = the flattened batch dims: scores s = q k^T * scale plus
// the mask (bool: -inf where false; else added), -inf above the diagonal when causal;
// out = dropout(softmax(s)) v. lse (opmath dtype: float32, float64 for float64) keeps each row's
// logsumexp of s for the backward, NaN for a row that may attend to no key (whose out is NaN).
// Dropout keeps element (b, i, j) when philox_uniform01_double of counter
// rng.offset + (b * L + i) * S + j is below 1 - dropout_p, and scales it by 1 / (1 - dropout_p).
struct AttentionForwardArgs {
  Tensor out;      // [B, L, Ev], contiguous, q's dtype (overwritten)
  Tensor lse;      // [B, L], contiguous (overwritten)
  Tensor q, k, v;  // [B, L, E], [B, S, E], [B, S, Ev], contiguous, one dtype
  Tensor mask;     // undefined, or a [batch..., L, S] broadcast view (any strides) whose
                   // batch dims flatten row-major to B; bool or q's dtype
  bool causal = false;
  double scale = 1.0;
  double dropout_p = 0.0;
  PhiloxState rng{0, 0};
};
// Returns false, computing nothing, when the device's kernel does not handle the case (the op
// then runs its composed path); the CPU kernel handles every case.
using AttentionForwardKernel = bool (*)(const AttentionForwardArgs& args);
MT_KERNEL_TABLE(attention_forward, AttentionForwardKernel)
// The gradients from grad_out [B, L, Ev] (contiguous), recomputing the probabilities from the
// forward's lse: dV = P_d^T dO, dP = dropout(dO V^T), dS = P * (dP - rowsum(dO * O)),
// dQ = dS K * scale, dK = dS^T Q * scale. grad_q/k/v are contiguous like q/k/v (overwritten);
// grad_mask is undefined, or [B, L, S] contiguous in q's dtype and receives dS. Returns false,
// computing nothing, when the device's kernel does not handle the case.
struct AttentionBackwardArgs {
  Tensor grad_q, grad_k, grad_v, grad_mask;
  Tensor grad_out;
  AttentionForwardArgs fwd;  // the forward's inputs, out and lse
};
using AttentionBackwardKernel = bool (*)(const AttentionBackwardArgs& args);
MT_KERNEL_TABLE(attention_backward, AttentionBackwardKernel)

}  // namespace mantissa
