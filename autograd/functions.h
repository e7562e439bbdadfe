// The functional op API: every differentiable op, callable as mt::op(...) (most also as Tensor
// methods). Each is defined in autograd/ops/<group>.cpp together with its backward formula.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "engine/factory.h"
#include "engine/tensor.h"

namespace mantissa {

// ---- elementwise (autograd/ops/elementwise.cpp) ----------------------------------------------
// Binary ops broadcast and promote types as PyTorch does (result_type below).
Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);
Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);  // true division: integers give float32
Tensor pow(const Tensor& a, const Tensor& exponent);
Tensor pow(const Tensor& a, const Scalar& exponent);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, const Scalar& b);
Tensor sub(const Tensor& a, const Scalar& b);
Tensor mul(const Tensor& a, const Scalar& b);
Tensor div(const Tensor& a, const Scalar& b);
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor square(const Tensor& x);
Tensor sign(const Tensor& x);
Tensor reciprocal(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor log1p(const Tensor& x);
Tensor expm1(const Tensor& x);
Tensor relu(const Tensor& x);
// approximate: "none" (exact, erf) or "tanh", as in torch.nn.functional.gelu.
Tensor gelu(const Tensor& x, std::string_view approximate = "none");
Tensor silu(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max);
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& condition, const Tensor& a, const Scalar& b);
// Comparisons (bool results, not differentiable).
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
// Logical and/or of bool tensors (also as `a & b`, `a | b`).
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_not(const Tensor& a);
Tensor operator&(const Tensor& a, const Tensor& b);
Tensor operator|(const Tensor& a, const Tensor& b);
Tensor operator!(const Tensor& a);
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);
bool equal(const Tensor& a, const Tensor& b);  // same shape and values

// PyTorch's result_type: tensors with dims outrank 0-d tensors, which outrank scalars, within
// the same category (bool < integer < floating).
DType result_type(const Tensor& a, const Tensor& b);
DType result_type(const Tensor& a, const Scalar& b);

// ---- conversions and views (autograd/ops/views.cpp) -------------------------------------------
Tensor to(const Tensor& x, DType dtype);
Tensor to(const Tensor& x, Device device, bool non_blocking = false);
Tensor clone(const Tensor& x);
Tensor contiguous(const Tensor& x);
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor view(const Tensor& x, const Shape& shape);
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);
Tensor permute(const Tensor& x, const Shape& dims);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
Tensor select(const Tensor& x, int64_t dim, int64_t index);
Tensor squeeze(const Tensor& x, std::optional<int64_t> dim = std::nullopt);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor expand(const Tensor& x, const Shape& shape);
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
// Tensors broadcast to one shape (as views).
std::vector<Tensor> broadcast_tensors(const std::vector<Tensor>& tensors);

// ---- reductions (autograd/ops/reductions.cpp) -------------------------------------------------
// `dims` empty means all dims. Integer/bool sums give int64, as in PyTorch.
Tensor sum(const Tensor& x, const Shape& dims = {}, bool keepdim = false,
           std::optional<DType> dtype = std::nullopt);
Tensor mean(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor amax(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
// Max/min over everything (0-d result), and along a dim with indices.
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
struct ValuesIndices {
  Tensor values;
  Tensor indices;  // int64
};
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim = false);
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor argmin(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
// Variance with Bessel's correction by default (correction = 1), as torch.var.
Tensor var(const Tensor& x, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor std(const Tensor& x, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false);
// p-norm over dims (p = 2 default; p = inf gives max |x|).
Tensor norm(const Tensor& x, double p = 2.0, const Shape& dims = {}, bool keepdim = false);
// True when every element is finite (one bool element).
Tensor all_finite(const Tensor& x);

// ---- softmax (autograd/ops/softmax.cpp) -------------------------------------------------------
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

// ---- matrix products (autograd/ops/linalg.cpp) ------------------------------------------------
Tensor mm(const Tensor& a, const Tensor& b);      // [n,k] x [k,m]
Tensor bmm(const Tensor& a, const Tensor& b);     // [b,n,k] x [b,k,m]
Tensor matmul(const Tensor& a, const Tensor& b);  // torch.matmul, with batch broadcasting
// x @ weight^T + bias (weight [out, in], as nn.Linear).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// ---- indexing and joining (autograd/ops/indexing.cpp) -----------------------------------------
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// Out-of-place scatter_add: x with src added at index along dim.
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
// int64 class indices -> int64 one-hot with a trailing dim of num_classes (-1: max + 1).
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);

// ---- random ops with autograd meaning ---------------------------------------------------------
// Dropout: zeroes with probability p and scales the rest by 1/(1-p) when training.
Tensor dropout(const Tensor& x, double p, bool training, Generator* gen = nullptr);

// ---- convolution and pooling (autograd/ops/conv.cpp) ------------------------------------------
// A (height, width) pair for conv/pool arguments; one value means both, as in PyTorch.
struct Size2 {
  Size2(int64_t v) : h(v), w(v) {}  // NOLINT: `2` means (2, 2)
  Size2(int64_t height, int64_t width) : h(height), w(width) {}
  int64_t h, w;
  friend bool operator==(const Size2& a, const Size2& b) { return a.h == b.h && a.w == b.w; }
};

// torch.nn.functional.conv2d (cross-correlation): input [N, C, H, W] or unbatched [C, H, W],
// weight [O, C / groups, kh, kw], bias [O] or undefined. Output [N, O, Ho, Wo] with
// Ho = (H + 2 * padding.h - dilation.h * (kh - 1) - 1) / stride.h + 1 (likewise Wo).
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
              Size2 stride = 1, Size2 padding = 0, Size2 dilation = 1, int64_t groups = 1);
// torch.nn.functional.max_pool2d over [N, C, H, W] or [C, H, W]; stride defaults to kernel_size.
// Padding cells never win; ceil_mode rounds the output size up (keeping the last window's
// start inside the input or the left padding).
Tensor max_pool2d(const Tensor& input, Size2 kernel_size,
                  std::optional<Size2> stride = std::nullopt, Size2 padding = 0, Size2 dilation = 1,
                  bool ceil_mode = false);
// torch.nn.functional.avg_pool2d; count_include_pad counts padding cells in the divisor, and a
// divisor_override replaces the divisor.
Tensor avg_pool2d(const Tensor& input, Size2 kernel_size,
                  std::optional<Size2> stride = std::nullopt, Size2 padding = 0,
                  bool ceil_mode = false, bool count_include_pad = true,
                  std::optional<int64_t> divisor_override = std::nullopt);
// torch.nn.functional.max_pool2d(..., return_indices=True): the values and the int64 indices of
// each window's maximum, flat (h * W + w) within its input plane, as PyTorch's.
ValuesIndices max_pool2d_with_indices(const Tensor& input, Size2 kernel_size,
                                      std::optional<Size2> stride = std::nullopt, Size2 padding = 0,
                                      Size2 dilation = 1, bool ceil_mode = false);
// torch.nn.functional.conv_transpose2d: input [N, C_in, H, W] or [C_in, H, W], weight
// [C_in, C_out / groups, kh, kw], bias [C_out] or undefined. Output height
// (H - 1) * stride.h - 2 * padding.h + dilation.h * (kh - 1) + output_padding.h + 1 (likewise
// width); output_padding must be smaller than the stride or the dilation. The gradient of conv2d
// with respect to its input, so it runs conv2d's backward-input kernel.
Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
                        Size2 stride = 1, Size2 padding = 0, Size2 output_padding = 0,
                        int64_t groups = 1, Size2 dilation = 1);

// ---- embedding and adaptive pooling (autograd/ops/embedding_pool.cpp) -------------------------
// torch.nn.functional.embedding: the rows of weight [V, D] at int64 indices of any shape ->
// indices.shape + [D]. padding_idx (negative counts from V; nullopt: none) names a row whose
// gradient stays zero.
Tensor embedding(const Tensor& indices, const Tensor& weight,
                 std::optional<int64_t> padding_idx = std::nullopt);
// torch.nn.functional.adaptive_avg_pool2d over [N, C, H, W] or [C, H, W] to output_size.
Tensor adaptive_avg_pool2d(const Tensor& input, Size2 output_size);

// ---- normalization (autograd/ops/norm.cpp) ----------------------------------------------------
// torch.nn.functional.layer_norm: normalises over the trailing dims given by normalized_shape,
// then applies weight and bias (each optional, shaped like normalized_shape).
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// torch.nn.functional.batch_norm: x [N, C, *] normalised per channel. In training, with the
// batch's mean and biased variance; running_mean/running_var (when defined) are updated in place
// as (1 - momentum) * running + momentum * batch statistic, with the unbiased variance. In
// evaluation, with the running statistics. The statistics are float32 (float64 for a float64
// input); a float16/bfloat16 input may come with float32 weight, bias and running statistics.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                  bool training = false, double momentum = 0.1, double eps = 1e-5);
// torch.nn.functional.group_norm: x [N, C, *], each sample's C channels in num_groups groups
// normalised separately; weight and bias [C].
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// RMS norm (torch.nn.functional.rms_norm of PyTorch 2.4; PyTorch 1.13 has none):
// y = x / sqrt(mean(x^2) + eps) * weight over the trailing normalized_shape dims. eps defaults
// to the machine epsilon of the statistics' dtype (float32's, float64's for a float64 input).
Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                std::optional<double> eps = std::nullopt);

// ---- losses (autograd/ops/loss_regression.cpp, loss_classification.cpp, loss_probability.cpp) --
// How a loss folds its per-element values: None keeps them, Mean and Sum give a 0-d tensor.
enum class Reduction { None, Mean, Sum };

// Input and target broadcast (with a warning when their shapes differ, as in PyTorch).
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
// input: log-probabilities [N, C] (or [C], or [N, C, d1, ...]); target: int64/int32 class
// indices [N] (or a 0-d, or [N, d1, ...]). ignore_index entries contribute nothing. weight
// (optional, [C]) scales each target's loss by its class's weight; Mean divides by the sum of
// the counted targets' weights (their number without weights).
Tensor nll_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                int64_t ignore_index = -100, const Tensor& weight = Tensor());
// input: logits shaped as nll_loss's; target: class indices as nll_loss's, or class
// probabilities shaped like input. weight as nll_loss's; with probabilities it scales each
// class's term and Mean divides by the number of distributions, as PyTorch.
Tensor cross_entropy(const Tensor& input, const Tensor& target,
                     Reduction reduction = Reduction::Mean, double label_smoothing = 0.0,
                     int64_t ignore_index = -100, const Tensor& weight = Tensor());
// target shaped like input; pos_weight (optional) broadcasts against it (one weight per class);
// weight (optional) scales each element's loss and broadcasts to the loss's shape.
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        Reduction reduction = Reduction::Mean,
                                        const Tensor& pos_weight = Tensor(),
                                        const Tensor& weight = Tensor());
// Quadratic for |input - target| < beta, linear beyond (beta 0: l1_loss); beta >= 0.
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target,
                      Reduction reduction = Reduction::Mean, double beta = 1.0);
// Quadratic for |input - target| < delta, linear beyond; delta > 0.
Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                  double delta = 1.0);
// input: probabilities in [0, 1]; target shaped like input; log terms clamp at -100, as PyTorch.
// weight (optional) broadcasts to the input's shape. Refused inside an autocast scope.
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target,
                            Reduction reduction = Reduction::Mean, const Tensor& weight = Tensor());
// kl_div's reductions (torch.nn.functional.kl_div's reduction strings): BatchMean divides the
// sum by input.size(0), Mean by the number of elements.
enum class KlDivReduction { None, BatchMean, Sum, Mean };
// input: log-probabilities; target: probabilities (log-probabilities with log_target), broadcast
// against input. Pointwise target (log(target) - input).
Tensor kl_div(const Tensor& input, const Tensor& target,
              KlDivReduction reduction = KlDivReduction::Mean, bool log_target = false);

// ---- more reductions, scans and sorting (autograd/ops/scan_sort.cpp) --------------------------
// log(sum(exp(x))) over `dims` (empty: all), computed stably as PyTorch does (the max is taken
// out first; an infinite max is not). Integer inputs give float32.
Tensor logsumexp(const Tensor& x, const Shape& dims, bool keepdim = false);
// Products over everything (0-d result) or along one dim. Integer/bool inputs give int64.
Tensor prod(const Tensor& x, std::optional<DType> dtype = std::nullopt);
Tensor prod(const Tensor& x, int64_t dim, bool keepdim = false,
            std::optional<DType> dtype = std::nullopt);
// Inclusive scans along `dim`. Integer/bool inputs give int64.
Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);
Tensor cumprod(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);
// Whether any (all) elements are non-zero, over everything or along one dim: bool results, uint8
// for uint8 inputs (as PyTorch 1.13).
Tensor any(const Tensor& x);
Tensor any(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor all(const Tensor& x);
Tensor all(const Tensor& x, int64_t dim, bool keepdim = false);
// The k largest (smallest) values along `dim` with their int64 indices. Results always come in
// sorted order, equal values in input order (`sorted` = false is accepted and changes nothing).
ValuesIndices topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true,
                   bool sorted = true);
// Values sorted along `dim` with the int64 positions they came from. The sort is always stable
// (equal values keep their input order), so `stable` changes nothing; NaN sorts above every
// number.
ValuesIndices sort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);

// ---- splitting and repeating (autograd/ops/shape.cpp) -----------------------------------------
// Views of consecutive pieces along `dim`: of split_size each (the last may be smaller), or of
// the given sizes, which must add up to the dim's size.
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& split_sizes,
                          int64_t dim = 0);
// At most `chunks` views of ceil(size / chunks) elements along `dim` (torch.chunk).
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
// x tiled repeats[d] times along each dim (leading repeats add dims), as a new tensor.
Tensor repeat(const Tensor& x, const Shape& repeats);

// ---- products of several operands (autograd/ops/products.cpp) ---------------------------------
// Einstein summation ("ij,jk->ik", "...ij->...ji", implicit outputs, broadcasting through "..."),
// contracted pairwise left to right with permute/reshape/bmm/sum. A label repeated within one
// operand (a diagonal, "ii->i") is not supported.
Tensor einsum(std::string_view equation, const std::vector<Tensor>& operands);
// beta * input + alpha * (mat1 @ mat2); input broadcasts to the product's shape and is ignored
// (NaN included) when beta is 0.
Tensor addmm(const Tensor& input, const Tensor& mat1, const Tensor& mat2, const Scalar& beta = 1,
             const Scalar& alpha = 1);
// beta * input + alpha * bmm(batch1, batch2), likewise.
Tensor baddbmm(const Tensor& input, const Tensor& batch1, const Tensor& batch2,
               const Scalar& beta = 1, const Scalar& alpha = 1);
// ---- pointwise and masking ops (autograd/ops/pointwise.cpp) ------------------------------------
// Broadcast and promoted as the arithmetic ops. Integer operands with a zero divisor throw (as
// PyTorch's CPU kernels raise ZeroDivisionError). floor_divide records no gradient (PyTorch has
// none); remainder and fmod differentiate in both operands.
Tensor floor_divide(const Tensor& a, const Tensor& b);
Tensor floor_divide(const Tensor& a, const Scalar& b);
Tensor remainder(const Tensor& a, const Tensor& b);  // the sign of b, as Python's %
Tensor remainder(const Tensor& a, const Scalar& b);
Tensor fmod(const Tensor& a, const Tensor& b);  // the sign of a, as C's fmod
Tensor fmod(const Tensor& a, const Scalar& b);
// self where mask (bool, broadcast with self) is false, value where it is true. The value is a
// Scalar or a 0-d tensor (differentiable), converted to self's dtype.
Tensor masked_fill(const Tensor& self, const Tensor& mask, const Scalar& value);
Tensor masked_fill(const Tensor& self, const Tensor& mask, const Tensor& value);
// Floating-point class tests: bool results, any dtype (integers are finite), not differentiable.
Tensor isnan(const Tensor& x);
Tensor isinf(const Tensor& x);
Tensor isfinite(const Tensor& x);
// Activations with parameters, as torch.nn.functional's (floating dtypes).
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
Tensor elu(const Tensor& x, double alpha = 1.0);
// log(1 + exp(beta * x)) / beta, and x itself where beta * x > threshold.
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
// start + weight * (end - start); start, end and a tensor weight share one floating dtype.
Tensor lerp(const Tensor& start, const Tensor& end, const Scalar& weight);
Tensor lerp(const Tensor& start, const Tensor& end, const Tensor& weight);
// self + value * t1 * t2, the three promoted to one dtype.
Tensor addcmul(const Tensor& self, const Tensor& t1, const Tensor& t2, const Scalar& value = 1);
// The lower (upper) triangle of each matrix in the last two dims, from the diagonal `diagonal`
// on (0: the main diagonal; > 0 above it, < 0 below it); the rest zeroed.
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);

// ---- attention (autograd/ops/attention.cpp) ----------------------------------------------------
// torch.nn.functional.scaled_dot_product_attention (PyTorch 2.x): query [..., L, E], key
// [..., S, E], value [..., S, Ev] -> [..., L, Ev], batch dims broadcast as matmul's.
// softmax(query key^T * scale + mask) value, scale defaulting to 1/sqrt(E). attn_mask is bool
// (true: attend) or of the query's dtype (added), broadcastable to [..., L, S]; is_causal masks
// key j > query i (top-left aligned) and excludes attn_mask. dropout_p > 0 drops attention
// weights (scaling the rest by 1/(1-p)) from `gen` (the device's default generator when null);
// pass 0 outside training. A query that may attend to no key gives NaN, as PyTorch's math does.
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask = Tensor(), double dropout_p = 0.0,
                                    bool is_causal = false,
                                    std::optional<double> scale = std::nullopt,
                                    Generator* gen = nullptr);

}  // namespace mantissa
