// The op index: every op of the op list (engine/ops.def) with its autocast policy, whether it
// is differentiable (and twice), and the kernel tables it runs on. autograd/autocast_wrapper.h
// reads the policy at each op's public entry; the tests walk the index (engine/ops.def says
// what they check). Adding an op: "How to add an op" in docs/architecture.md.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mantissa {

enum class CastPolicy : uint8_t {
  LowerPrecision,
  LowerPrecisionLoss,
  LowerPrecisionInput,
  Float32,
  Promote,
  None,
  Banned
};
enum class Derivatives : uint8_t { No, Once, Twice };

enum class OpId : uint16_t {
#define MT_OP(name, policy, derivatives, tables) name,
#include "engine/ops.def"
  kCount
};
inline constexpr int kNumOps = static_cast<int>(OpId::kCount);

struct OpInfo {
  const char* name;
  CastPolicy policy;
  Derivatives derivatives;
  const char* kernel_tables;  // space-separated table names; empty for view-only ops

  constexpr bool differentiable() const { return derivatives != Derivatives::No; }
  // Its backward supports create_graph (autograd/backward.h).
  constexpr bool double_backward() const { return derivatives == Derivatives::Twice; }
};

inline constexpr OpInfo kOpIndex[] = {
#define MT_OP(name, policy, derivatives, tables) \
  {#name, CastPolicy::policy, Derivatives::derivatives, tables},
#include "engine/ops.def"
};
static_assert(sizeof(kOpIndex) / sizeof(kOpIndex[0]) == static_cast<std::size_t>(kNumOps));

// The op list's MT_KERNEL lines: each table with a generic kernel from a list, the op it belongs
// to and its list (tests/test_op_index.cpp checks the op names the table among its kernel tables).
struct ListedKernel {
  OpId op;
  const char* table;
  const char* list;
};
inline constexpr ListedKernel kListedKernels[] = {
#define MT_KERNEL(op, table, list, functor) {OpId::op, #table, #list},
#include "engine/ops.def"
};

constexpr const OpInfo& op_info(OpId op) { return kOpIndex[static_cast<int>(op)]; }
constexpr CastPolicy cast_policy(OpId op) { return op_info(op).policy; }
constexpr bool supports_double_backward(OpId op) { return op_info(op).double_backward(); }

}  // namespace mantissa
