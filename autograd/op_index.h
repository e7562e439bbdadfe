// The op index: every op of the functional API (autograd/functions.h, autograd/linear_act.h)
// once, with
//  - its autocast policy (after PyTorch's autocast lists; autograd/autocast_wrapper.h applies
//    it at the op's public entry): LowerPrecision ops run in the scope's float16/bfloat16,
//    Float32 ops widen float16/bfloat16 inputs, Promote ops cast their inputs to the widest
//    floating type among them, None ops run in their inputs' dtype, and Banned ops (PyTorch's
//    "banned" list) throw when called with a tensor on a device with an autocast scope;
//  - whether it is differentiable (records a backward node for floating inputs);
//  - the file (under autograd/ops/) holding its forward and backward;
//  - the kernel tables (engine/kernel_tables.h) its forward and backward run on, directly or
//    through the ops they call; none for ops that only make views.
// tests/test_op_index.cpp walks this list: every op has a CPU kernel for each table (a CUDA one
// when CUDA is built), a gradcheck case when differentiable and an autocast-policy case. Adding
// an op: see "How to add an op" in docs/architecture.md.
#pragma once

#include <cstdint>

namespace mantissa {

enum class CastPolicy : uint8_t { LowerPrecision, Float32, Promote, None, Banned };

// clang-format off
#define MT_FORALL_OPS(X)                                                                          \
  /* op                  autocast policy  grad   file           kernel tables                  */ \
  X(add,                 None,           true,  elementwise,  "add")                              \
  X(sub,                 None,           true,  elementwise,  "add")                              \
  X(mul,                 None,           true,  elementwise,  "mul")                              \
  X(div,                 None,           true,  elementwise,  "div mul neg")                      \
  X(pow,                 Float32,        true,  elementwise,  "pow mul log where")                \
  X(maximum,             None,           true,  elementwise,  "maximum where")                    \
  X(minimum,             None,           true,  elementwise,  "minimum where")                    \
  X(neg,                 None,           true,  elementwise,  "neg")                              \
  X(abs,                 None,           true,  elementwise,  "abs sign mul")                     \
  X(exp,                 Float32,        true,  elementwise,  "exp mul")                          \
  X(log,                 Float32,        true,  elementwise,  "log div")                          \
  X(sqrt,                None,           true,  elementwise,  "sqrt div mul")                     \
  X(rsqrt,               None,           true,  elementwise,  "rsqrt mul")                        \
  X(square,              None,           true,  elementwise,  "square mul")                       \
  X(sign,                None,           true,  elementwise,  "sign fill")                        \
  X(reciprocal,          None,           true,  elementwise,  "reciprocal mul")                   \
  X(sin,                 None,           true,  elementwise,  "sin cos mul")                      \
  X(cos,                 None,           true,  elementwise,  "cos sin mul")                      \
  X(log1p,               None,           true,  elementwise,  "log1p div")                        \
  X(expm1,               None,           true,  elementwise,  "expm1 mul")                        \
  X(relu,                None,           true,  elementwise,  "relu relu_backward")               \
  X(gelu,                None,           true,  elementwise,  "gelu gelu_tanh gelu_backward "     \
                                                              "gelu_tanh_backward")               \
  X(silu,                None,           true,  elementwise,  "silu silu_backward")               \
  X(sigmoid,             None,           true,  elementwise,  "sigmoid sigmoid_backward")         \
  X(tanh,                None,           true,  elementwise,  "tanh tanh_backward")               \
  X(clamp,               None,           true,  elementwise,  "clamp where")                      \
  X(where,               None,           true,  elementwise,  "where fill")                       \
  X(eq,                  None,           false, elementwise,  "eq")                               \
  X(ne,                  None,           false, elementwise,  "ne")                               \
  X(lt,                  None,           false, elementwise,  "lt")                               \
  X(le,                  None,           false, elementwise,  "le")                               \
  X(gt,                  None,           false, elementwise,  "gt")                               \
  X(ge,                  None,           false, elementwise,  "ge")                               \
  X(logical_and,         None,           false, operators,    "where")                            \
  X(logical_or,          None,           false, operators,    "where")                            \
  X(logical_not,         None,           false, operators,    "eq")                               \
  X(to,                  None,           true,  views,        "copy")                             \
  X(clone,               None,           true,  views,        "copy")                             \
  X(contiguous,          None,           true,  views,        "copy")                             \
  X(reshape,             None,           true,  views,        "copy")                             \
  X(view,                None,           true,  views,        "")                                 \
  X(transpose,           None,           true,  views,        "")                                 \
  X(permute,             None,           true,  views,        "")                                 \
  X(narrow,              None,           true,  views,        "fill copy")                        \
  X(select,              None,           true,  views,        "fill copy")                        \
  X(squeeze,             None,           true,  views,        "")                                 \
  X(unsqueeze,           None,           true,  views,        "")                                 \
  X(expand,              None,           true,  views,        "sum")                              \
  X(flatten,             None,           true,  views,        "copy")                             \
  X(broadcast_tensors,   None,           true,  views,        "sum")                              \
  X(sum,                 Float32,        true,  reductions,   "sum")                              \
  X(mean,                None,           true,  reductions,   "mean div")                         \
  X(amax,                None,           true,  reductions,   "amax eq where sum div")            \
  X(amin,                None,           true,  reductions,   "amin eq where sum div")            \
  X(max,                 None,           true,  reductions,   "amax max_dim eq where")            \
  X(min,                 None,           true,  reductions,   "amin min_dim eq where")            \
  X(argmax,              None,           false, reductions,   "max_dim")                          \
  X(argmin,              None,           false, reductions,   "min_dim")                          \
  X(var,                 None,           true,  reductions,   "var mean mul")                     \
  X(std,                 None,           true,  reductions,   "var sqrt mean mul")                \
  X(norm,                Float32,        true,  reductions,   "norm mul div where")               \
  X(all_finite,          None,           false, reductions,   "all_finite")                       \
  X(softmax,             Float32,        true,  softmax,      "softmax softmax_backward")         \
  X(log_softmax,         Float32,        true,  softmax,      "log_softmax log_softmax_backward") \
  X(mm,                  LowerPrecision, true,  linalg,       "bmm")                              \
  X(bmm,                 LowerPrecision, true,  linalg,       "bmm")                              \
  X(matmul,              LowerPrecision, true,  linalg,       "bmm")                              \
  X(linear,              LowerPrecision, true,  linear,       "linear_forward "                   \
                                                              "linear_backward_weight "           \
                                                              "linear_backward_act")              \
  X(linear_act,          LowerPrecision, true,  linear,       "linear_forward "                   \
                                                              "linear_backward_weight "           \
                                                              "linear_backward_act "              \
                                                              "relu_backward gelu_tanh_backward") \
  X(linear_act_linear,   LowerPrecision, true,  linear,       "linear_forward "                   \
                                                              "linear_backward_weight "           \
                                                              "linear_backward_act")              \
  X(gather,              None,           true,  indexing,     "gather scatter_add")               \
  X(scatter_add,         None,           true,  indexing,     "copy scatter_add gather")          \
  X(index_select,        None,           true,  indexing,     "index_select index_add")           \
  X(index_add,           None,           true,  indexing,     "copy index_add index_select")      \
  X(one_hot,             None,           false, indexing,     "fill scatter_add")                 \
  X(cat,                 Promote,        true,  indexing,     "copy")                             \
  X(stack,               Promote,        true,  indexing,     "copy")                             \
  X(dropout,             None,           true,  dropout,      "bernoulli mul")                    \
  X(conv2d,              LowerPrecision, true,  conv,         "conv2d_forward "                   \
                                                              "conv2d_backward_input "            \
                                                              "conv2d_backward_weight sum")       \
  X(max_pool2d,          None,           true,  conv,         "max_pool2d_forward "               \
                                                              "max_pool2d_backward")              \
  X(avg_pool2d,          None,           true,  conv,         "avg_pool2d_forward "               \
                                                              "avg_pool2d_backward")              \
  X(layer_norm,          Float32,        true,  norm,         "layer_norm_forward "               \
                                                              "layer_norm_backward")              \
  X(batch_norm,          None,           true,  norm,         "norm_stats norm_apply "            \
                                                              "norm_backward copy add mul rsqrt") \
  X(group_norm,          Float32,        true,  norm,         "norm_stats norm_apply "            \
                                                              "norm_backward copy")               \
  X(rms_norm,            Float32,        true,  norm,         "norm_stats norm_apply "            \
                                                              "norm_backward copy")               \
  X(mse_loss,          Float32,        true,  loss_regression,     "add mul sum mean")             \
  X(l1_loss,           Float32,        true,  loss_regression,     "add abs mul sum mean")         \
  X(nll_loss,          Float32,        true,  loss_classification, "where sum div mul")            \
  X(cross_entropy,     Float32,        true,  loss_classification, "log_softmax where sum div "    \
                                                                   "log_softmax_backward mul neg") \
  X(binary_cross_entropy_with_logits,                                                              \
                       Float32,        true,  loss_probability,    "add mul neg abs exp log1p "    \
                                                                   "maximum sum mean")             \
  X(smooth_l1_loss,    Float32,        true,  loss_regression,     "add abs mul div lt where "     \
                                                                   "clamp gt copy sum mean")       \
  X(huber_loss,        Float32,        true,  loss_regression,     "add abs mul lt where clamp "   \
                                                                   "sum mean")                     \
  X(binary_cross_entropy,                                                                          \
                       Banned,         true,  loss_probability,    "add mul neg log log1p "        \
                                                                   "maximum amin amax div "        \
                                                                   "sum mean")                     \
  X(kl_div,            Float32,        true,  loss_probability,    "add mul exp log ne where "     \
                                                                   "neg div sum mean")              \
  /* reductions, scans, sorting, splitting and products of several operands               */ \
  X(logsumexp,           Float32,        true,  scan_sort,    "amax abs eq where add exp sum "    \
                                                              "log mul")                          \
  X(prod,                Float32,        true,  scan_sort,    "prod cumprod mul")                 \
  X(cumsum,              Float32,        true,  scan_sort,    "cumsum")                           \
  X(cumprod,             Float32,        true,  scan_sort,    "cumprod cumprod_backward")         \
  X(any,                 None,           false, scan_sort,    "any")                              \
  X(all,                 None,           false, scan_sort,    "all")                              \
  X(topk,                None,           true,  scan_sort,    "sort fill scatter_add")            \
  X(sort,                None,           true,  scan_sort,    "sort fill scatter_add")            \
  X(split,               None,           true,  shape,        "fill copy")                        \
  X(chunk,               None,           true,  shape,        "fill copy")                        \
  X(repeat,              None,           true,  shape,        "copy sum")                         \
  X(einsum,              LowerPrecision, true,  products,     "bmm sum copy")                     \
  X(addmm,               LowerPrecision, true,  products,     "bmm mul add")                      \
  X(baddbmm,             LowerPrecision, true,  products,     "bmm mul add")                      \
  /* nn modules: embedding, transposed convolution, adaptive pooling */                           \
  X(embedding,           None,           true,  embedding_pool, "embedding_forward "              \
                                                                "embedding_backward")             \
  X(adaptive_avg_pool2d, None,           true,  embedding_pool, "adaptive_avg_pool2d_forward "    \
                                                                "adaptive_avg_pool2d_backward")   \
  X(conv_transpose2d,    LowerPrecision, true,  conv,         "conv2d_backward_input "            \
                                                              "conv2d_forward "                   \
                                                              "conv2d_backward_weight add sum")   \
  X(max_pool2d_with_indices, None,       true,  conv,         "max_pool2d_forward "               \
                                                              "max_pool2d_backward")              \
  /* pointwise and masking ops */                                                                 \
  X(floor_divide,        None,           false, pointwise,    "floor_divide eq sum")              \
  X(remainder,           None,           true,  pointwise,    "remainder eq sum mul neg "         \
                                                              "floor_divide")                     \
  X(fmod,                None,           true,  pointwise,    "fmod eq sum mul neg add div")      \
  X(masked_fill,         None,           true,  pointwise,    "where copy sum")                   \
  X(isnan,               None,           false, pointwise,    "isnan")                            \
  X(isinf,               None,           false, pointwise,    "isinf")                            \
  X(isfinite,            None,           false, pointwise,    "isfinite")                         \
  X(leaky_relu,          None,           true,  pointwise,    "leaky_relu leaky_relu_backward")   \
  X(elu,                 None,           true,  pointwise,    "elu elu_backward")                 \
  X(softplus,            Float32,        true,  pointwise,    "softplus softplus_backward")       \
  X(lerp,                None,           true,  pointwise,    "lerp mul add sum")                 \
  X(addcmul,             Promote,        true,  pointwise,    "addcmul mul sum")                  \
  X(tril,                None,           true,  pointwise,    "arange add le where")              \
  X(triu,                None,           true,  pointwise,    "arange add ge where")            \
  /* attention */                                                                                 \
  X(scaled_dot_product_attention,                                                                 \
                         LowerPrecision, true,  attention,    "attention_forward "                \
                                                              "attention_backward copy sum")
// clang-format on

enum class OpId : uint16_t {
#define MT_OP_ID(name, policy, grad, file, tables) name,
  MT_FORALL_OPS(MT_OP_ID)
#undef MT_OP_ID
      kCount
};
inline constexpr int kNumOps = static_cast<int>(OpId::kCount);

struct OpInfo {
  const char* name;
  CastPolicy policy;
  bool differentiable;
  const char* file;           // relative to the source root
  const char* kernel_tables;  // space-separated table names; empty for view-only ops
};

inline constexpr OpInfo kOpIndex[] = {
#define MT_OP_INFO(name, policy, grad, file, tables) \
  {#name, CastPolicy::policy, grad, "autograd/ops/" #file ".cpp", tables},
    MT_FORALL_OPS(MT_OP_INFO)
#undef MT_OP_INFO
};

constexpr const OpInfo& op_info(OpId op) { return kOpIndex[static_cast<int>(op)]; }
constexpr CastPolicy cast_policy(OpId op) { return op_info(op).policy; }

// ---- double backward ------------------------------------------------------------------------
// The differentiable ops whose backward supports create_graph (autograd/backward.h): every node
// they record declares DoubleBackward::Supported (autograd/recorder.h). tests/test_double_backward
// gradgradchecks each in float64 on its op cases, and checks that every other differentiable op
// refuses create_graph, so this list is exactly what works.
// clang-format off
#define MT_FORALL_DOUBLE_BACKWARD_OPS(X)                                                           \
  X(add) X(sub) X(mul) X(div) X(pow) X(maximum) X(minimum) X(neg) X(abs) X(exp) X(log) X(sqrt)     \
  X(rsqrt) X(square) X(sign) X(reciprocal) X(sin) X(cos) X(log1p) X(expm1) X(relu) X(gelu)         \
  X(silu) X(sigmoid) X(tanh) X(clamp) X(where)                                                     \
  X(to) X(clone) X(contiguous) X(reshape) X(view) X(transpose) X(permute) X(narrow) X(select)      \
  X(squeeze) X(unsqueeze) X(expand) X(flatten) X(broadcast_tensors)                                \
  X(sum) X(mean) X(amax) X(amin) X(max) X(min) X(var) X(std) X(norm)                               \
  X(softmax) X(log_softmax) X(mm) X(bmm) X(matmul) X(linear) X(mse_loss) X(l1_loss)                \
  X(cat) X(stack) X(dropout) X(nll_loss) X(split) X(chunk) X(repeat) X(einsum) X(addmm)         \
  X(baddbmm)
// clang-format on

inline constexpr OpId kDoubleBackwardOps[] = {
#define MT_DOUBLE_BACKWARD_ID(name) OpId::name,
    MT_FORALL_DOUBLE_BACKWARD_OPS(MT_DOUBLE_BACKWARD_ID)
#undef MT_DOUBLE_BACKWARD_ID
};

constexpr bool supports_double_backward(OpId op) {
  for (OpId o : kDoubleBackwardOps)
    if (o == op) return true;
  return false;
}

}  // namespace mantissa
