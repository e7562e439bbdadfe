// The op cases: one or more calls of every op in the op list (engine/ops.def) on random
// inputs, with the dtypes each supports. tests/test_op_index.cpp checks every index op has a
// case, gradchecks the differentiable ones and checks their autocast policy; test_cuda_op_table
// compares CUDA with the CPU on them.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "engine/dispatch.h"
#include "test_util.h"

namespace mantissa::testing {

using Inputs = std::vector<Tensor>;

struct OpCase {
  std::string name;  // a label; the op index name unless `op` is set
  uint32_t dtypes;
  std::vector<Shape> shapes;  // one random input per shape
  std::function<Tensor(const Inputs&)> fn;
  double low = -2.0, high = 2.0;  // input range
  double tol_scale = 1.0;         // results that fold many elements get a wider tolerance
  bool differentiable = true;     // gradcheck in float64 on CUDA (floating ops only)
  bool tf32_sensitive = false;    // a float32 GEMM: TF32 when matmul precision allows it
  std::string op = {};            // the op index name, when it differs from `name`
  // A differentiable op whose backward is not the derivative of its forward (float8 products:
  // a straight-through estimator) has no float64 gradcheck; this names the test that checks its
  // gradients against its reference instead.
  std::string no_gradcheck = {};
};

// The op index name a case exercises.
inline std::string op_of(const OpCase& c) { return c.op.empty() ? c.name : c.op; }

const std::vector<OpCase>& op_cases();
std::string label(const OpCase& c, DType dt);
bool supports(const OpCase& c, DType dt);

}  // namespace mantissa::testing
