// operator<< for tensors, following PyTorch's repr: values, then device, dtype and autograd state.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>
#include <string>

#include "engine/tensor.h"

namespace mantissa {
namespace detail {
std::string grad_fn_name(const Tensor& t);  // autograd/tensor_autograd.cpp
}

namespace {

constexpr int64_t kSummarizeThreshold = 1000;
constexpr int64_t kEdgeItems = 3;

struct Formatter {
  bool floating = false;
  bool is_bool = false;
  bool integer_valued = true;  // every finite float is a whole number: print "1."
  bool sci = false;
  int width = 1;

  std::string format(double v) const {
    char buf[64];
    if (is_bool) return v != 0.0 ? "True" : "False";
    if (!floating) {
      std::snprintf(buf, sizeof(buf), "%lld", static_cast<long long>(v));
    } else if (std::isnan(v)) {
      return "nan";
    } else if (std::isinf(v)) {
      return v > 0 ? "inf" : "-inf";
    } else if (sci) {
      std::snprintf(buf, sizeof(buf), "%.4e", v);
    } else if (integer_valued) {
      std::snprintf(buf, sizeof(buf), "%.0f.", v);
    } else {
      std::snprintf(buf, sizeof(buf), "%.4f", v);
    }
    return buf;
  }
};

Formatter make_formatter(const std::vector<double>& values, DType dtype) {
  Formatter f;
  f.floating = is_floating(dtype);
  f.is_bool = dtype == DType::Bool;
  if (f.floating) {
    double max_abs = 0.0, min_abs = INFINITY;
    for (double v : values) {
      if (!std::isfinite(v)) continue;
      if (v != std::nearbyint(v)) f.integer_valued = false;
      const double a = std::fabs(v);
      max_abs = std::max(max_abs, a);
      if (a != 0.0) min_abs = std::min(min_abs, a);
    }
    if (std::isfinite(min_abs)) {
      f.sci = max_abs / min_abs > 1000.0 || max_abs > 1e8 || (!f.integer_valued && min_abs < 1e-4);
    }
  }
  for (double v : values) f.width = std::max<int>(f.width, static_cast<int>(f.format(v).size()));
  return f;
}

void print_dim(std::ostream& os, const std::vector<double>& values, const Shape& shape,
               int64_t d, int64_t base, const Formatter& f, bool summarize, int indent) {
  const int64_t n = shape[d];
  int64_t block = 1;
  for (int64_t i = d + 1; i < shape.size(); ++i) block *= shape[i];
  os << '[';
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) {
      os << (d + 1 == shape.size() ? "..., " : "...,\n" + std::string(indent + 1, ' '));
      i = n - kEdgeItems;
    }
    if (d + 1 == shape.size()) {
      std::string s = f.format(values[base + i]);
      os << std::string(f.width - s.size(), ' ') << s;
      if (i + 1 < n) os << ", ";
    } else {
      print_dim(os, values, shape, d + 1, base + i * block, f, summarize, indent + 1);
      if (i + 1 < n) os << ',' << std::string(shape.size() - d - 1, '\n') << std::string(indent + 1, ' ');
    }
  }
  os << ']';
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "[ undefined Tensor ]";
  std::ostringstream os;
  const std::vector<double> values = to_vector<double>();
  const Formatter f = make_formatter(values, dtype());
  const std::string prefix = "tensor(";
  os << prefix;
  if (dim() == 0) {
    os << f.format(values[0]);
  } else if (numel() == 0) {
    os << "[]";
  } else {
    print_dim(os, values, shape(), 0, 0, f, numel() > kSummarizeThreshold,
              static_cast<int>(prefix.size()));
  }
  if (numel() == 0 && dim() != 1) os << ", size=" << shape();
  if (!device().is_cpu()) os << ", device='" << device() << "'";
  if (dtype() != kFloat32 && dtype() != kInt64 && dtype() != kBool)
    os << ", dtype=torch." << dtype();
  const std::string fn = detail::grad_fn_name(*this);
  if (!fn.empty()) {
    os << ", grad_fn=<" << fn << '>';
  } else if (requires_grad()) {
    os << ", requires_grad=True";
  }
  os << ')';
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace mantissa
