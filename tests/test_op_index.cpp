// The op index (autograd/op_index.h, from the op list engine/ops.def) against the code: every
// op names kernel tables that exist and have a CPU kernel (and a CUDA one in a CUDA build), has an
// op case (tests/op_cases.cpp) that runs for every dtype it claims, passes gradcheck in float64
// when it is differentiable (and records nothing when it is not), and behaves under autocast as its
// policy says. The checks are functions returning problems, so that the tests at the end can
// show they catch an op missing a kernel, a case, a gradcheck or a policy.
#include <algorithm>
#include <optional>
#include <set>
#include <sstream>

#include "amp/autocast.h"
#include "autograd/op_index.h"
#include "engine/amp_kernel_tables.h"
#include "engine/kernel_tables.h"
#include "op_cases.h"
#include "test_util.h"

namespace mt = mantissa;
using mt::CastPolicy;
using mt::Derivatives;
using mt::DType;
using mt::OpInfo;
using mt::Shape;
using mt::Tensor;
using mt::testing::Inputs;
using mt::testing::label;
using mt::testing::op_cases;
using mt::testing::op_of;
using mt::testing::OpCase;
using mt::testing::supports;
using Problems = std::vector<std::string>;

namespace {

std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

const mt::KernelTableEntry* find_table(const std::string& name) {
  for (const auto& t : mt::kernel_table_list())
    if (name == t.name) return &t;
  return nullptr;
}

std::vector<const OpCase*> cases_of(const OpInfo& op, const std::vector<OpCase>& cases) {
  std::vector<const OpCase*> out;
  for (const OpCase& c : cases)
    if (op_of(c) == op.name) out.push_back(&c);
  return out;
}

Inputs inputs_for(const OpCase& c, DType dt, bool requires_grad) {
  Inputs x;
  for (const Shape& s : c.shapes) {
    Tensor t = mt::testing::random_tensor(s, dt, true, c.low, c.high);
    // Away from 0, where abs/relu/maximum-style kinks would fool finite differences.
    if (mt::is_floating(dt) && c.low < 0) t = t + mt::sign(t) * 0.05;
    x.push_back(requires_grad ? t.detach().requires_grad_() : t);
  }
  return x;
}

Problems kernel_problems(const OpInfo& op) {
  Problems p;
  for (const std::string& name : words(op.kernel_tables)) {
    const mt::KernelTableEntry* t = find_table(name);
    if (t == nullptr) {
      p.push_back(std::string(op.name) + ": no kernel table '" + name + "'");
      continue;
    }
    if (!t->has_kernel(mt::DeviceType::CPU))
      p.push_back(std::string(op.name) + ": table " + name + " has no CPU kernel");
    if (mt::cuda::is_compiled() && !t->has_kernel(mt::DeviceType::CUDA))
      p.push_back(std::string(op.name) + ": table " + name + " has no CUDA kernel");
  }
  return p;
}

// A case per op; for a differentiable op one that gradchecks in float64, and for the others a
// result without history.
Problems case_problems(const OpInfo& op, const std::vector<OpCase>& cases) {
  const auto mine = cases_of(op, cases);
  if (mine.empty()) return {std::string(op.name) + ": no op case"};
  Problems p;
  bool gradchecked = false;
  for (const OpCase* c : mine) {
    if (!supports(*c, mt::kFloat64)) continue;
    const Inputs x = inputs_for(*c, mt::kFloat64, true);
    if (!op.differentiable()) {
      if (c->fn(x).requires_grad()) p.push_back(c->name + ": records a backward node");
      continue;
    }
    if (!c->no_gradcheck.empty()) {
      gradchecked = true;  // checked against its reference by the test it names
      continue;
    }
    if (!c->differentiable) continue;
    if (!mt::autograd::gradcheck(c->fn, x, 1e-6, 1e-5, 1e-3))
      p.push_back(c->name + ": gradcheck fails");
    gradchecked = true;
  }
  if (op.differentiable() && !gradchecked)
    p.push_back(std::string(op.name) + ": no gradcheck case");
  return p;
}

DType result_dtype(const OpCase& c, DType inputs, std::optional<mt::amp::Precision> scope) {
  const Inputs x = inputs_for(c, inputs, false);
  if (!scope) return c.fn(x).dtype();
  mt::amp::autocast guard(mt::kCPU, *scope);
  return c.fn(x).dtype();
}

// What the op's policy promises, on its first case that takes floating inputs.
Problems policy_problems(const OpInfo& op, const std::vector<OpCase>& cases) {
  const OpCase* c = nullptr;
  for (const OpCase* k : cases_of(op, cases))
    if (supports(*k, mt::kFloat32) && supports(*k, mt::kBFloat16)) c = c ? c : k;
  if (c == nullptr) return {std::string(op.name) + ": no case with float32 and bfloat16 inputs"};
  using P = mt::amp::Precision;
  const std::string name = op.name;
  auto expect = [&](DType got, DType want, const std::string& what) -> Problems {
    if (got == want) return {};
    return {name + " " + what + ": " + std::string(mt::dtype_name(got)) + ", policy expects " +
            std::string(mt::dtype_name(want))};
  };
  switch (op.policy) {
    case CastPolicy::LowerPrecision:
      return expect(result_dtype(*c, mt::kFloat32, P::BFloat16), mt::kBFloat16,
                    "float32 inputs in a bfloat16 scope");
    case CastPolicy::LowerPrecisionLoss:
      // The products' dtype is checked against the unfused ops by the op's own tests
      // (tests/test_linear_cross_entropy.cpp); what the index promises is the float32 loss.
      return expect(result_dtype(*c, mt::kFloat32, P::BFloat16), mt::kFloat32,
                    "float32 inputs in a bfloat16 scope");
    case CastPolicy::LowerPrecisionInput:
      // The input is cast; the result has its dtype (the weights keep theirs: the op's tests).
      return expect(result_dtype(*c, mt::kFloat32, P::BFloat16), mt::kBFloat16,
                    "float32 inputs in a bfloat16 scope");
    case CastPolicy::Float32:
      return expect(result_dtype(*c, mt::kBFloat16, P::BFloat16), mt::kFloat32,
                    "bfloat16 inputs in a bfloat16 scope");
    case CastPolicy::Promote:
      // PyTorch's rule starts from the scope's dtype: float16 with bfloat16 is float32.
      return expect(result_dtype(*c, mt::kBFloat16, P::Float16), mt::kFloat32,
                    "bfloat16 inputs in a float16 scope");
    case CastPolicy::Banned: {
      try {
        result_dtype(*c, mt::kFloat32, P::BFloat16);
      } catch (const mt::Error&) {
        return {};
      }
      return {name +
              " runs with float32 inputs in a bfloat16 scope; policy Banned expects a refusal"};
    }
    case CastPolicy::None: {
      Problems p = expect(result_dtype(*c, mt::kFloat32, P::BFloat16),
                          result_dtype(*c, mt::kFloat32, std::nullopt),
                          "float32 inputs in a bfloat16 scope");
      for (auto& q : expect(result_dtype(*c, mt::kBFloat16, P::Float16),
                            result_dtype(*c, mt::kBFloat16, std::nullopt),
                            "bfloat16 inputs in a float16 scope"))
        p.push_back(q);
      return p;
    }
  }
  return {};
}

std::string joined(const Problems& p) {
  std::string out;
  for (const auto& s : p) out += "\n  " + s;
  return out;
}

}  // namespace

// The gradcheck waiver is for the float8 products' straight-through backward only.
TEST(OpIndex, OnlyFloat8ProductsWaiveTheGradcheck) {
  for (const OpCase& c : mt::testing::op_cases())
    if (!c.no_gradcheck.empty()) {
      EXPECT_EQ(op_of(c), "float8_linear") << c.name;
    }
}

TEST(OpIndex, NamesEachOpOnce) {
  std::set<std::string> seen;
  for (const OpInfo& op : mt::kOpIndex) EXPECT_TRUE(seen.insert(op.name).second) << op.name;
  EXPECT_EQ(seen.size(), static_cast<size_t>(mt::kNumOps));
}

// Every table, including those no op lists (conv's im2col, GradScaler's), has its kernels: a CPU
// one, and a CUDA one in a CUDA build.
TEST(OpIndex, EveryKernelTableHasItsKernels) {
  EXPECT_GT(mt::kernel_table_list().size(), 50u);
  for (const mt::KernelTableEntry& t : mt::kernel_table_list()) {
    EXPECT_TRUE(t.has_kernel(mt::DeviceType::CPU)) << t.name;
    if (mt::cuda::is_compiled()) {
      EXPECT_TRUE(t.has_kernel(mt::DeviceType::CUDA)) << t.name;
    }
  }
}

TEST(OpIndex, KernelTablesExistWithKernels) {
  Problems all;
  for (const OpInfo& op : mt::kOpIndex)
    for (auto& p : kernel_problems(op)) all.push_back(p);
  EXPECT_TRUE(all.empty()) << joined(all);
}

// Each MT_KERNEL line names a table its op runs on, once, and the build made the table from it
// (the lists of engine/kernel_lists.h declare the tables and register their kernels).
TEST(OpIndex, ListedKernelsBelongToTheirOps) {
  EXPECT_GE(std::size(mt::kListedKernels), 40u);
  std::set<std::string> seen;
  for (const mt::ListedKernel& k : mt::kListedKernels) {
    const OpInfo& op = mt::op_info(k.op);
    const std::vector<std::string> tables = words(op.kernel_tables);
    EXPECT_NE(std::find(tables.begin(), tables.end(), k.table), tables.end())
        << op.name << " lists kernel " << k.table << " but not among its tables '"
        << op.kernel_tables << "'";
    EXPECT_TRUE(seen.insert(k.table).second) << k.table << " is listed twice";
    const mt::KernelTableEntry* t = find_table(k.table);
    ASSERT_NE(t, nullptr) << k.table;
    EXPECT_TRUE(t->has_kernel(mt::DeviceType::CPU)) << k.table;
  }
}

TEST(OpIndex, EveryOpHasACaseAndDifferentiableOnesPassGradcheck) {
  Problems all;
  for (const OpInfo& op : mt::kOpIndex)
    for (auto& p : case_problems(op, op_cases())) all.push_back(p);
  EXPECT_TRUE(all.empty()) << joined(all);
}

TEST(OpIndex, EveryCaseIsAnIndexedOp) {
  std::set<std::string> names;
  for (const OpInfo& op : mt::kOpIndex) names.insert(op.name);
  for (const OpCase& c : op_cases()) EXPECT_TRUE(names.count(op_of(c))) << c.name;
}

TEST(OpIndex, EveryOpFollowsItsAutocastPolicy) {
  Problems all;
  for (const OpInfo& op : mt::kOpIndex)
    for (auto& p : policy_problems(op, op_cases())) all.push_back(p);
  EXPECT_TRUE(all.empty()) << joined(all);
}

// Every case runs on the CPU for every dtype it claims (so a GPU run tests kernels, not cases).
TEST(OpIndex, EveryCaseRunsOnTheCpuForItsDtypes) {
  for (const OpCase& c : op_cases()) {
    for (DType dt : mt::testing::all_dtypes()) {
      if (!supports(c, dt)) continue;
      Inputs x;
      for (const Shape& s : c.shapes) {
        x.push_back(mt::testing::random_tensor(s, dt == mt::kBool ? mt::kFloat32 : dt, true, c.low,
                                               c.high));
        if (dt == mt::kBool) x.back() = x.back() > 0;
      }
      try {
        EXPECT_TRUE(c.fn(x).defined()) << label(c, dt);
      } catch (const mt::Error& e) {
        ADD_FAILURE() << label(c, dt) << ": " << e.what();
      }
    }
  }
}

// The checks catch what they are for: an op whose table is missing, one without a case or
// without a gradcheck case, and one whose policy is not what it does.
TEST(OpIndex, ChecksCatchAnOpMissingItsParts) {
  const OpInfo no_table{"relu", CastPolicy::None, Derivatives::Twice, "relu no_such_kernel"};
  EXPECT_EQ(kernel_problems(no_table).size(), 1u);
  const OpInfo no_case{"frobnicate", CastPolicy::None, Derivatives::Once, ""};
  EXPECT_EQ(case_problems(no_case, op_cases()).size(), 1u);
  std::vector<OpCase> no_gradcheck;
  for (const OpCase& c : op_cases()) {
    if (op_of(c) != "relu") continue;
    no_gradcheck.push_back(c);
    no_gradcheck.back().differentiable = false;
  }
  const OpInfo relu{"relu", CastPolicy::None, Derivatives::Twice, "relu"};
  EXPECT_EQ(case_problems(relu, no_gradcheck).size(), 1u);
  EXPECT_TRUE(case_problems(relu, op_cases()).empty());
  const OpInfo mm_claims_float32{"mm", CastPolicy::Float32, Derivatives::Twice, "bmm"};
  EXPECT_EQ(policy_problems(mm_claims_float32, op_cases()).size(), 1u);
  const OpInfo relu_claims_lower{"relu", CastPolicy::LowerPrecision, Derivatives::Twice, "relu"};
  EXPECT_EQ(policy_problems(relu_claims_lower, op_cases()).size(), 1u);
  const OpInfo cat_claims_none{"cat", CastPolicy::None, Derivatives::Twice, "copy"};
  EXPECT_FALSE(policy_problems(cat_claims_none, op_cases()).empty());
}
