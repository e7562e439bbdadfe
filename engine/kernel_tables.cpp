#include "engine/kernel_tables.h"

namespace mantissa {

namespace {
std::vector<KernelTableEntry>& table_list() {
  static std::vector<KernelTableEntry> list;
  return list;
}
bool list_table(KernelTableEntry entry) {
  table_list().push_back(entry);
  return true;
}
}  // namespace

const std::vector<KernelTableEntry>& kernel_table_list() { return table_list(); }

// Each table, and its entry in kernel_table_list() (whose `has` reads the slots when called,
// after every kernel has registered).
#define MT_DEFINE_TABLE(name, type)                       \
  KernelTable<type> name##_kernel{#name};                 \
  [[maybe_unused]] const bool name##_listed = list_table( \
      {#name, [](DeviceType d) { return name##_kernel.slots[static_cast<int>(d)] != nullptr; }});
#define MT_DEFINE_UNARY(name) MT_DEFINE_TABLE(name, UnaryKernel)
#define MT_DEFINE_BINARY(name) MT_DEFINE_TABLE(name, BinaryKernel)
MT_FORALL_UNARY_OPS(MT_DEFINE_UNARY)
MT_FORALL_BINARY_OPS(MT_DEFINE_BINARY)
MT_FORALL_COMPARISON_OPS(MT_DEFINE_BINARY)
MT_DEFINE_TABLE(add, AddKernel)
MT_DEFINE_TABLE(where, WhereKernel)
MT_DEFINE_TABLE(clamp, ClampKernel)
MT_DEFINE_TABLE(relu_backward, BinaryKernel)
MT_DEFINE_TABLE(gelu_backward, BinaryKernel)
MT_DEFINE_TABLE(gelu_tanh_backward, BinaryKernel)
MT_DEFINE_TABLE(silu_backward, BinaryKernel)
MT_DEFINE_TABLE(sigmoid_backward, BinaryKernel)
MT_DEFINE_TABLE(tanh_backward, BinaryKernel)
MT_DEFINE_TABLE(copy, CopyKernel)
MT_DEFINE_TABLE(fill, FillKernel)
MT_DEFINE_TABLE(arange, ArangeKernel)
MT_DEFINE_TABLE(linspace, LinspaceKernel)
MT_DEFINE_TABLE(sum, ReduceKernel)
MT_DEFINE_TABLE(mean, ReduceKernel)
MT_DEFINE_TABLE(amax, ReduceKernel)
MT_DEFINE_TABLE(amin, ReduceKernel)
MT_DEFINE_TABLE(all_finite, ReduceKernel)
MT_DEFINE_TABLE(var, VarKernel)
MT_DEFINE_TABLE(norm, NormKernel)
MT_DEFINE_TABLE(max_dim, ArgReduceKernel)
MT_DEFINE_TABLE(min_dim, ArgReduceKernel)
MT_DEFINE_TABLE(softmax, SoftmaxKernel)
MT_DEFINE_TABLE(log_softmax, SoftmaxKernel)
MT_DEFINE_TABLE(softmax_backward, SoftmaxBackwardKernel)
MT_DEFINE_TABLE(log_softmax_backward, SoftmaxBackwardKernel)
MT_DEFINE_TABLE(bmm, BmmKernel)
MT_DEFINE_TABLE(gather, GatherKernel)
MT_DEFINE_TABLE(scatter_add, ScatterAddKernel)
MT_DEFINE_TABLE(index_select, GatherKernel)
MT_DEFINE_TABLE(index_add, IndexAddKernel)
MT_DEFINE_TABLE(uniform, UniformKernel)
MT_DEFINE_TABLE(normal, NormalKernel)
MT_DEFINE_TABLE(bernoulli, BernoulliKernel)
MT_DEFINE_TABLE(randint, RandintKernel)
MT_DEFINE_TABLE(sgd_step, SgdStepKernel)
MT_DEFINE_TABLE(adam_step, AdamStepKernel)
MT_DEFINE_TABLE(sgd_multi_step, SgdMultiStepKernel)
MT_DEFINE_TABLE(adam_multi_step, AdamMultiStepKernel)
MT_DEFINE_TABLE(rmsprop_multi_step, RmspropMultiStepKernel)
MT_DEFINE_TABLE(adagrad_multi_step, AdagradMultiStepKernel)
MT_DEFINE_TABLE(nadam_multi_step, NadamMultiStepKernel)
MT_DEFINE_TABLE(radam_multi_step, RadamMultiStepKernel)
MT_DEFINE_TABLE(conv2d_forward, Conv2dForwardKernel)
MT_DEFINE_TABLE(conv2d_backward_input, Conv2dBackwardInputKernel)
MT_DEFINE_TABLE(conv2d_backward_weight, Conv2dBackwardWeightKernel)
MT_DEFINE_TABLE(conv2d_im2col, Conv2dIm2colKernel)
MT_DEFINE_TABLE(conv2d_col2im, Conv2dCol2imKernel)
MT_DEFINE_TABLE(max_pool2d_forward, MaxPool2dForwardKernel)
MT_DEFINE_TABLE(max_pool2d_backward, MaxPool2dBackwardKernel)
MT_DEFINE_TABLE(avg_pool2d_forward, AvgPool2dForwardKernel)
MT_DEFINE_TABLE(avg_pool2d_backward, AvgPool2dBackwardKernel)
MT_DEFINE_TABLE(embedding_forward, EmbeddingForwardKernel)
MT_DEFINE_TABLE(embedding_backward, EmbeddingBackwardKernel)
MT_DEFINE_TABLE(adaptive_avg_pool2d_forward, AdaptiveAvgPool2dForwardKernel)
MT_DEFINE_TABLE(adaptive_avg_pool2d_backward, AdaptiveAvgPool2dBackwardKernel)
MT_DEFINE_TABLE(linear_forward, LinearForwardKernel)
MT_DEFINE_TABLE(linear_backward_weight, LinearBackwardWeightKernel)
MT_DEFINE_TABLE(linear_backward_act, LinearBackwardActKernel)
MT_DEFINE_TABLE(layer_norm_forward, LayerNormForwardKernel)
MT_DEFINE_TABLE(layer_norm_backward, LayerNormBackwardKernel)
// products, logical reductions, scans and sorting
MT_DEFINE_TABLE(prod, ReduceKernel)
MT_DEFINE_TABLE(any, ReduceKernel)
MT_DEFINE_TABLE(all, ReduceKernel)
MT_DEFINE_TABLE(cumsum, ScanKernel)
MT_DEFINE_TABLE(cumprod, ScanKernel)
MT_DEFINE_TABLE(cumprod_backward, CumprodBackwardKernel)
MT_DEFINE_TABLE(sort, SortKernel)
// pointwise ops
MT_DEFINE_TABLE(floor_divide, BinaryKernel)
MT_DEFINE_TABLE(remainder, BinaryKernel)
MT_DEFINE_TABLE(fmod, BinaryKernel)
MT_DEFINE_TABLE(isnan, UnaryKernel)
MT_DEFINE_TABLE(isinf, UnaryKernel)
MT_DEFINE_TABLE(isfinite, UnaryKernel)
MT_DEFINE_TABLE(leaky_relu, ParamActivationKernel)
MT_DEFINE_TABLE(elu, ParamActivationKernel)
MT_DEFINE_TABLE(softplus, ParamActivationKernel)
MT_DEFINE_TABLE(leaky_relu_backward, ParamActivationBackwardKernel)
MT_DEFINE_TABLE(elu_backward, ParamActivationBackwardKernel)
MT_DEFINE_TABLE(softplus_backward, ParamActivationBackwardKernel)
MT_DEFINE_TABLE(lerp, LerpKernel)
MT_DEFINE_TABLE(addcmul, AddcmulKernel)
MT_DEFINE_TABLE(norm_stats, NormStatsKernel)
MT_DEFINE_TABLE(norm_apply, NormApplyKernel)
MT_DEFINE_TABLE(norm_backward, NormBackwardKernel)
MT_DEFINE_TABLE(attention_forward, AttentionForwardKernel)
MT_DEFINE_TABLE(attention_backward, AttentionBackwardKernel)

namespace detail {
void throw_no_kernel(const char* op, DeviceType device) {
  MT_THROW("op ", op, " has no kernel for device type ", device,
           device == DeviceType::CUDA && !cuda::is_compiled() ? " (this build has no CUDA)" : "");
}
void throw_not_implemented(const char* op, DType dtype, Device device) {
  MT_THROW("op ", op, " not implemented for dtype ", dtype, " on device ", device);
}
}  // namespace detail

}  // namespace mantissa

#include "engine/amp_kernel_tables.h"

namespace mantissa {
KernelTable<AmpUnscaleKernel> amp_unscale_kernel{"amp_unscale"};
KernelTable<AmpUpdateScaleKernel> amp_update_scale_kernel{"amp_update_scale"};
KernelTable<AmpStreamGateKernel> amp_stream_gate_kernel{"amp_stream_gate"};
}  // namespace mantissa
