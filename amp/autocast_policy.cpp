// The autocast cast policy of every op in engine/op_id.h, after PyTorch's autocast op lists
// (aten/src/ATen/autocast_mode.cpp): matmul-like ops in lower precision; exp, log, pow, sum,
// norm, softmax, layer_norm and every loss in float32 (CUDA's list, used on every device; see
// docs/mixed-precision.md); joins promote.
#include <array>

#include "amp/autocast.h"

namespace mantissa::amp {
namespace {

constexpr CastPolicy policy_of(OpId op) {
  switch (op) {
    case OpId::mm:
    case OpId::bmm:
    case OpId::matmul:
    case OpId::linear:
    case OpId::conv2d:
      return CastPolicy::LowerPrecision;
    case OpId::exp:
    case OpId::log:
    case OpId::pow:
    case OpId::sum:
    case OpId::norm:
    case OpId::softmax:
    case OpId::log_softmax:
    case OpId::layer_norm:
    case OpId::mse_loss:
    case OpId::l1_loss:
    case OpId::cross_entropy:
    case OpId::nll_loss:
    case OpId::binary_cross_entropy_with_logits:
      return CastPolicy::Float32;
    case OpId::cat:
    case OpId::stack:
      return CastPolicy::Promote;
    case OpId::mean:  // on neither of PyTorch's lists: the input's dtype
      return CastPolicy::None;
    case OpId::kCount:
      break;
  }
  return CastPolicy::None;
}

constexpr std::array<CastPolicy, kNumOpIds> make_table() {
  std::array<CastPolicy, kNumOpIds> t{};
  for (int i = 0; i < kNumOpIds; ++i) t[i] = policy_of(static_cast<OpId>(i));
  return t;
}
constexpr auto kPolicyTable = make_table();

}  // namespace

CastPolicy cast_policy(OpId op) { return kPolicyTable[static_cast<int>(op)]; }

}  // namespace mantissa::amp
