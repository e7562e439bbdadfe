// Identifiers of the ops that mixed precision treats specially. amp/autocast_policy.cpp maps each
// to its cast policy; ops pass their id to autocast::cast_input (autograd/autocast_seam.h).
#pragma once

#include <cstdint>

namespace mantissa {

#define MT_FORALL_AUTOCAST_OPS(X)                                                             \
  X(mm)                                                                                       \
  X(bmm) X(matmul) X(linear) X(conv2d) X(exp) X(log) X(pow) X(sum) X(mean) X(norm) X(softmax) \
      X(log_softmax) X(layer_norm) X(mse_loss) X(l1_loss) X(cross_entropy) X(nll_loss)        \
          X(binary_cross_entropy_with_logits) X(cat) X(stack)

enum class OpId : uint16_t {
#define MT_OP_ID(name) name,
  MT_FORALL_AUTOCAST_OPS(MT_OP_ID)
#undef MT_OP_ID
      kCount
};
inline constexpr int kNumOpIds = static_cast<int>(OpId::kCount);

const char* op_name(OpId op);

}  // namespace mantissa
