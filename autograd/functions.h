// The functional op API, mt::op(...) (most also as Tensor methods): one declaration per entry of
// the op list, engine/ops.def, which documents each op and states its defaults. The bodies,
// with their backward formulas, are in the autograd/ops/ file of the op's section.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "engine/factory.h"
#include "engine/float8_config.h"
#include "engine/linear_activation.h"
#include "engine/tensor.h"

namespace mantissa {

// ---- the types of the ops' arguments and results ---------------------------------------------
// A value and its int64 position (max/min along a dim, topk, sort, max_pool2d_with_indices).
struct ValuesIndices {
  Tensor values;
  Tensor indices;  // int64
};

// A (height, width) pair for conv/pool arguments; one value means both, as in PyTorch.
struct Size2 {
  Size2(int64_t v) : h(v), w(v) {}  // NOLINT: `2` means (2, 2)
  Size2(int64_t height, int64_t width) : h(height), w(width) {}
  int64_t h, w;
  friend bool operator==(const Size2& a, const Size2& b) { return a.h == b.h && a.w == b.w; }
};

// How a loss folds its per-element values: None keeps them, Mean and Sum give a 0-d tensor.
enum class Reduction { None, Mean, Sum };

// kl_div's reductions (torch.nn.functional.kl_div's reduction strings): BatchMean divides the
// sum by input.size(0), Mean by the number of elements.
enum class KlDivReduction { None, BatchMean, Sum, Mean };

// ---- the ops ---------------------------------------------------------------------------------
#define MT_DEFAULT(...) = __VA_ARGS__
#define MT_SIG(name, ret, params, args) ret name params;
#include "engine/ops.def"

// ---- helpers that are not ops (autograd/ops/elementwise.cpp, operators.cpp) -----------------
// logical_and/or/not of bool tensors.
Tensor operator&(const Tensor& a, const Tensor& b);
Tensor operator|(const Tensor& a, const Tensor& b);
Tensor operator!(const Tensor& a);
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);
bool equal(const Tensor& a, const Tensor& b);  // same shape and values

// PyTorch's result_type: tensors with dims outrank 0-d tensors, which outrank scalars, within
// the same category (bool < integer < floating).
DType result_type(const Tensor& a, const Tensor& b);
DType result_type(const Tensor& a, const Scalar& b);

}  // namespace mantissa
