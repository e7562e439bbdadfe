// In-place ops through views, view ops' bounds and tensor hooks that replace a gradient, against
// PyTorch: every program here is also in
// scripts/golden/make_view_inplace.py, whose results (forward values, gradients, or a refusal)
// are committed in tests/golden/view_inplace.txt.
#include <functional>
#include <map>

#include "golden_file.h"
#include "test_util.h"

namespace mt = mantissa;
namespace ag = mantissa::autograd;
using mt::Shape;
using mt::Tensor;

namespace {

using mt::testing::GoldenCase;

std::map<std::string, GoldenCase> load_cases() {
  return mt::testing::read_golden_file("view_inplace.txt");
}

Tensor f64(std::vector<double> values, Shape shape) { return mt::from_vector(values, shape); }
Tensor leaf(std::vector<double> values, Shape shape) {
  return f64(std::move(values), std::move(shape)).requires_grad_();
}
Tensor x3() { return leaf({1.0, 2.0, 3.0}, {3}); }
Tensor x23() { return leaf({1.0, -2.0, 3.0, 0.5, 4.0, -1.5}, {2, 3}); }
Tensor m34() { return mt::arange(12, mt::TensorOptions().dtype(mt::kFloat64)).reshape({3, 4}); }

using Outputs = std::map<std::string, Tensor>;
using Program = std::function<Outputs()>;

// The programs of make_view_inplace.py, by case name.
const std::map<std::string, Program>& programs() {
  static const std::map<std::string, Program> all = {
      {"narrow_mul_scalar",
       [] {
         Tensor x = x3(), y = x * 1;
         y.narrow(0, 1, 1).mul_(3);
         y.sum().backward();
         return Outputs{{"y", y}, {"x.grad", x.grad()}};
       }},
      {"select_fill",
       [] {
         Tensor x = x3(), y = x * 2;
         y.select(0, 0).fill_(5);
         (y * y).sum().backward();
         return Outputs{{"y", y}, {"x.grad", x.grad()}};
       }},
      {"narrow_copy_from_graph",
       [] {
         Tensor x = x3(), s = leaf({10, 20}, {2}), y = x * 3;
         y.narrow(0, 0, 2).copy_(s * s);
         y.sum().backward();
         return Outputs{{"y", y}, {"x.grad", x.grad()}, {"s.grad", s.grad()}};
       }},
      {"transpose_add_tensor",
       [] {
         Tensor x = x23(), b = leaf({0.5, 1.0, -1.0, 2.0, 3.0, -0.25}, {3, 2}), y = x * 1;
         y.t().add_(b);
         (y * y).sum().backward();
         return Outputs{{"y", y}, {"x.grad", x.grad()}, {"b.grad", b.grad()}};
       }},
      {"view_taken_before_base_mul",
       [] {
         Tensor x = x3(), y = x * 1;
         Tensor v = y.narrow(0, 1, 2);
         y.mul_(2);
         (v * v).sum().backward();
         return Outputs{{"v", v}, {"x.grad", x.grad()}};
       }},
      {"sibling_view_after_inplace",
       [] {
         Tensor x = x3(), y = x * 1;
         Tensor a = y.narrow(0, 0, 2), b = y.narrow(0, 1, 2);
         a.mul_(2);
         (b * b).sum().backward();
         return Outputs{{"b", b}, {"x.grad", x.grad()}};
       }},
      {"view_of_view_mul_tensor",
       [] {
         Tensor x = x23(), w = leaf({2, -3}, {2}), y = x * 1;
         y.select(0, 1).narrow(0, 1, 2).mul_(w);
         (y * y).sum().backward();
         return Outputs{{"y", y}, {"x.grad", x.grad()}, {"w.grad", w.grad()}};
       }},
      {"buffer_without_grad_gets_history",
       [] {
         Tensor s = leaf({1.5, -2.0}, {2});
         Tensor buf = mt::zeros({4}, mt::TensorOptions().dtype(mt::kFloat64));
         buf.narrow(0, 1, 2).copy_(s * 2);
         EXPECT_TRUE(buf.requires_grad());
         EXPECT_EQ(buf.grad_fn()->name(), "CopySlices");
         (buf * buf).sum().backward();
         return Outputs{{"buf", buf}, {"s.grad", s.grad()}};
       }},
      {"two_inplace_ops_on_one_view",
       [] {
         Tensor x = x3(), s = leaf({0.5, -1.0}, {2}), y = x * 1;
         Tensor v = y.narrow(0, 0, 2);
         v.mul_(2);
         v.add_(s * s);
         (y * y).sum().backward();
         return Outputs{{"y", y}, {"x.grad", x.grad()}, {"s.grad", s.grad()}};
       }},
      {"view_used_after_its_inplace",
       [] {
         Tensor x = x3(), y = x * 1;
         Tensor v = y.narrow(0, 1, 2);
         v.mul_(3);
         ((v * v).sum() + y.sum()).backward();
         return Outputs{{"y", y}, {"x.grad", x.grad()}};
       }},
      {"expanded_view_after_base_mul",
       [] {
         Tensor x = x3(), y = x.reshape({3, 1}) * 1;
         Tensor e = y.expand({3, 4});
         y.mul_(2);
         (e * mt::arange(12, mt::TensorOptions().dtype(mt::kFloat64)).reshape({3, 4}))
             .sum()
             .backward();
         return Outputs{{"e", e}, {"x.grad", x.grad()}};
       }},
      {"permute_strided_slice_div",
       [] {
         std::vector<double> v(24);
         for (int i = 0; i < 24; ++i) v[i] = i - 7.5;
         Tensor x = leaf(v, {2, 3, 4}), d = leaf({2.0, 4.0, -0.5}, {1, 3}), y = x * 1;
         y.permute({2, 0, 1}).slice(0, 0, 4, 2).div_(d);
         (y * y).sum().backward();
         return Outputs{{"y", y}, {"x.grad", x.grad()}, {"d.grad", d.grad()}};
       }},
      {"unsqueeze_squeeze_sub",
       [] {
         Tensor x = x3(), s = leaf({4.0}, {1}), y = x * 1;
         y.unsqueeze(0).squeeze(0).view({3, 1}).select(1, 0).narrow(0, 2, 1).sub_(s, 2);
         (y * y).sum().backward();
         return Outputs{{"y", y}, {"x.grad", x.grad()}, {"s.grad", s.grad()}};
       }},
      {"copy_into_view_then_base_inplace",
       [] {
         Tensor x = x3(), s = leaf({7.0}, {1}), y = x * 1;
         y.narrow(0, 2, 1).copy_(s);
         y.mul_(y.detach() + 1);
         (y * y).sum().backward();
         return Outputs{{"y", y}, {"x.grad", x.grad()}, {"s.grad", s.grad()}};
       }},
      {"view_inplace_under_no_grad_then_use",
       [] {
         Tensor x = x3(), y = x * 1;
         Tensor v = y.narrow(0, 0, 2);
         {
           ag::NoGradGuard no_grad;
           v.mul_(10);
         }
         (y * y).sum().backward();
         return Outputs{{"y", y}, {"x.grad", x.grad()}};
       }},
      {"leaf_view_inplace_refused",
       [] {
         x3().narrow(0, 0, 1).mul_(2);
         return Outputs{};
       }},
      {"expanded_inplace_refused",
       [] {
         mt::zeros({3, 1}, mt::TensorOptions().dtype(mt::kFloat64)).expand({3, 4}).add_(1);
         return Outputs{};
       }},
      {"no_grad_view_modified_with_grad_refused",
       [] {
         Tensor x = x3(), y = x * 1, v;
         {
           ag::NoGradGuard no_grad;
           v = y.narrow(0, 0, 2);
         }
         v.mul_(2);
         return Outputs{};
       }},
      {"saved_tensor_modified_through_view_refused",
       [] {
         Tensor x = x3(), y = x * 1, z = y * y;
         y.narrow(0, 0, 1).mul_(2);
         z.sum().backward();
         return Outputs{};
       }},
      {"hook_replaces_a_non_leaf_gradient",
       [] {
         Tensor x = x3(), y = x * 2;
         y.register_hook([](const Tensor& g) { return g * 3; });
         y.retain_grad();
         (y * y).sum().backward();
         return Outputs{{"x.grad", x.grad()}, {"y.grad", y.grad()}};
       }},
      {"hooks_chain_in_registration_order",
       [] {
         Tensor x = x3(), y = x * 2, seen;
         y.register_hook([](const Tensor& g) { return g * 2; });
         y.register_hook([&seen](const Tensor& g) { seen = g.clone(); });
         y.register_hook([](const Tensor& g) { return g + 1; });
         (y * y).sum().backward();
         return Outputs{{"x.grad", x.grad()}, {"seen", seen}};
       }},
      {"leaf_hook_replaces_what_is_accumulated",
       [] {
         Tensor x = x3();
         x.register_hook([](const Tensor& g) { return g + 1; });
         (x * x).sum().backward();
         (x * 2).sum().backward();
         return Outputs{{"x.grad", x.grad()}};
       }},
      {"narrow_negative_start",
       [] {
         return Outputs{{"out", m34().narrow(1, -2, 2)}};
       }},
      {"narrow_empty_at_end",
       [] {
         return Outputs{{"out", m34().narrow(1, 4, 0)}};
       }},
      {"narrow_past_end_refused",
       [] {
         return Outputs{{"out", m34().narrow(1, 2, 5)}};
       }},
      {"narrow_negative_length_refused",
       [] {
         return Outputs{{"out", m34().narrow(1, 1, -1)}};
       }},
      {"narrow_start_out_of_range_refused",
       [] {
         return Outputs{{"out", m34().narrow(1, 5, 0)}};
       }},
      {"narrow_start_below_range_refused",
       [] {
         return Outputs{{"out", m34().narrow(1, -5, 1)}};
       }},
      {"slice_clamps_like_python",
       [] {
         return Outputs{{"out", m34().slice(1, -7, 9, 2)}};
       }},
      {"select_negative_index",
       [] {
         return Outputs{{"out", m34().select(1, -1)}};
       }},
      {"select_out_of_range_refused",
       [] {
         return Outputs{{"out", m34().select(0, 3)}};
       }},
      {"squeeze_non_singleton_is_noop",
       [] {
         return Outputs{{"out", m34().squeeze(1)}};
       }},
      {"transpose_dim_out_of_range_refused",
       [] {
         return Outputs{{"out", m34().transpose(0, 2)}};
       }},
      {"unsqueeze_dim_out_of_range_refused",
       [] {
         return Outputs{{"out", m34().unsqueeze(3)}};
       }},
      {"expand_wrong_size_refused",
       [] {
         return Outputs{{"out", m34().expand({3, 5})}};
       }},
      {"permute_repeated_dim_refused",
       [] {
         return Outputs{{"out", m34().permute({0, 0})}};
       }},
      {"view_incompatible_refused",
       [] {
         return Outputs{{"out", m34().t().view({12})}};
       }},
  };
  return all;
}

class ViewInplaceGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(ViewInplaceGolden, MatchesPyTorch) {
  static const std::map<std::string, GoldenCase> cases = load_cases();
  const auto found = cases.find(GetParam());
  ASSERT_NE(found, cases.end()) << "no golden record for " << GetParam()
                                << "; rerun scripts/golden/make_view_inplace.py";
  const GoldenCase& golden = found->second;
  if (golden.raises) {
    EXPECT_THROW(programs().at(GetParam())(), mt::Error);
    return;
  }
  const Outputs out = programs().at(GetParam())();
  ASSERT_EQ(out.size(), golden.tensors.size());
  for (const auto& expected : golden.tensors) {
    const std::string& name = expected.name;
    ASSERT_TRUE(out.count(name)) << name;
    ASSERT_TRUE(out.at(name).defined()) << name << " is undefined";
    mt::testing::expect_close(out.at(name), expected.f64(), 1e-12, 1e-12, GetParam() + ": " + name);
  }
}

std::vector<std::string> program_names() {
  std::vector<std::string> names;
  for (const auto& [name, program] : programs()) names.push_back(name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(PyTorch, ViewInplaceGolden, ::testing::ValuesIn(program_names()),
                         [](const auto& info) { return info.param; });

TEST(ViewInplace, EveryGoldenCaseHasAProgram) {
  for (const auto& [name, golden] : load_cases()) EXPECT_TRUE(programs().count(name)) << name;
}

TEST(ViewInplace, RefusalsSayWhy) {
  mt::testing::expect_error([] { x3().narrow(0, 0, 1).mul_(2); },
                            {"mul_", "a view of a leaf tensor that requires grad"});
  mt::testing::expect_error(
      [] {
        mt::zeros({3, 1}).expand({3, 4}).add_(1);
      },
      {"add_", "more than one element", "[3, 4]"});
  mt::testing::expect_error([] { m34().narrow(1, 2, 5); },
                            {"narrow", "start (2) + length (5) exceeds dimension size (4)"});
  mt::testing::expect_error([] { m34().narrow(1, 1, -1); }, {"narrow", "non-negative"});
  mt::testing::expect_error([] { m34().narrow(1, 5, 0); }, {"narrow", "start out of range"});
  mt::testing::expect_error(
      [] {
        Tensor x = x3(), y = x * 1, v;
        {
          ag::NoGradGuard no_grad;
          v = y.narrow(0, 0, 2);
        }
        v.mul_(2);
      },
      {"mul_", "grad mode off"});
}

// What the refusals and rewrites must not catch: in-place ops under NoGradGuard (optimizer
// steps), and on views of tensors that need no gradient.
TEST(ViewInplace, NoGradAndPlainTensorsAreUnaffected) {
  Tensor w = x3();
  {
    ag::NoGradGuard no_grad;
    w.narrow(0, 0, 2).mul_(2);
  }
  EXPECT_EQ(w.to_vector<double>(), (std::vector<double>{2, 4, 3}));
  EXPECT_TRUE(w.is_leaf());
  Tensor buf = mt::zeros({2, 3});
  buf.select(0, 1).fill_(1);
  buf.t().narrow(0, 0, 1).add_(2);
  EXPECT_FALSE(buf.requires_grad());
  EXPECT_EQ(buf.to_vector<float>(), (std::vector<float>{2, 0, 0, 3, 1, 1}));
}

TEST(TensorHooks, AReplacementMustMatchTheGradient) {
  Tensor x = x3(), y = x * 2;
  y.register_hook([](const Tensor& g) { return g.sum(); });
  mt::testing::expect_error([&] { y.sum().backward(); },
                            {"register_hook", "shape []", "gradient of shape [3]"});
}

// The history names PyTorch shows for the rewritten tensors.
TEST(ViewInplace, RewrittenHistoriesAreNamedAsInPyTorch) {
  Tensor x = x3(), y = x * 1;
  Tensor v = y.narrow(0, 1, 2);
  v.mul_(2);
  EXPECT_EQ(y.grad_fn()->name(), "CopySlices");
  EXPECT_EQ(v.grad_fn()->name(), "AsStridedBackward0");
  Tensor w = y.narrow(0, 0, 1);
  EXPECT_EQ(w.grad_fn()->name(), "SliceBackward0");
  y.add_(1);
  EXPECT_EQ(w.grad_fn()->name(), "AsStridedBackward0");  // brought up to date on first look
}

// A view saved by a node keeps its base (and so the base's history) alive; a node saving a
// view of its own output must not keep itself alive through it.
TEST(ViewInplace, SavedViewOfOwnOutputDoesNotLeak) {
  std::weak_ptr<ag::Node> node;
  {
    Tensor x = x3(), y = x * 2;
    Tensor v = y.narrow(0, 0, 2);
    v.mul_(3);  // CopySlices on y; the in-place node saves nothing of y
    node = y.grad_fn();
    ASSERT_FALSE(node.expired());
  }
  EXPECT_TRUE(node.expired());
}

}  // namespace
