// operator<< for tensors, following PyTorch's repr (torch/_tensor_str.py) character for character:
// one formatter for the (summarised) values, rows wrapped at 80 columns, then the suffixes
// (device, size, dtype, autograd state), themselves wrapped when a line would pass 80 columns.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>
#include <string>

#include "engine/graph_capture.h"
#include "engine/tensor.h"

namespace mantissa {
namespace detail {
std::string grad_fn_name(const Tensor& t);  // autograd/node.cpp
}

namespace {

constexpr int64_t kSummarizeThreshold = 1000;
constexpr int64_t kEdgeItems = 3;
constexpr int64_t kLineWidth = 80;

// The values of a tensor in row-major order; integers kept exact.
struct Values {
  std::vector<double> f;
  std::vector<int64_t> i;
  bool floating = false;
};

struct Formatter {
  bool floating = false;
  bool is_bool = false;
  bool int_mode = true;  // every nonzero finite float is a whole number: print "1."
  bool sci = false;
  int64_t width = 1;

  std::string raw(const Values& v, int64_t k) const {
    char buf[64];
    if (!floating) {
      if (is_bool) return v.i[k] != 0 ? "True" : "False";
      std::snprintf(buf, sizeof(buf), "%lld", static_cast<long long>(v.i[k]));
      return buf;
    }
    const double x = v.f[k];
    if (std::isnan(x)) return "nan";  // Python prints "nan" whatever the sign bit
    if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
    if (sci) {
      std::snprintf(buf, sizeof(buf), "%.4e", x);
    } else if (int_mode) {
      std::snprintf(buf, sizeof(buf), "%.0f.", x);
    } else {
      std::snprintf(buf, sizeof(buf), "%.4f", x);
    }
    return buf;
  }
  std::string format(const Values& v, int64_t k) const {
    std::string s = raw(v, k);
    return std::string(std::max<int64_t>(0, width - static_cast<int64_t>(s.size())), ' ') + s;
  }
};

// Row-major indices of the elements a summarised print shows (PyTorch's get_summarized_data).
void visible_indices(const Shape& shape, int64_t d, int64_t base, bool summarize,
                     std::vector<int64_t>& out) {
  if (shape.size() == 0) {
    out.push_back(0);
    return;
  }
  const int64_t n = shape[d];
  int64_t block = 1;
  for (int64_t i = d + 1; i < shape.size(); ++i) block *= shape[i];
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) i = n - kEdgeItems;
    if (d + 1 == shape.size()) {
      out.push_back(base + i);
    } else {
      visible_indices(shape, d + 1, base + i * block, summarize, out);
    }
  }
}

// PyTorch's _Formatter: the mode and width come from the nonzero finite values only.
Formatter make_formatter(const Values& v, DType dtype, const std::vector<int64_t>& shown) {
  Formatter f;
  f.floating = v.floating;
  f.is_bool = dtype == DType::Bool;
  if (!f.floating) {
    for (int64_t k : shown) f.width = std::max<int64_t>(f.width, f.raw(v, k).size());
    return f;
  }
  std::vector<int64_t> nonzero;
  double max_abs = 0.0, min_abs = INFINITY;
  for (int64_t k : shown) {
    const double x = v.f[k];
    if (!std::isfinite(x) || x == 0.0) continue;
    nonzero.push_back(k);
    if (x != std::ceil(x)) f.int_mode = false;
    max_abs = std::max(max_abs, std::fabs(x));
    min_abs = std::min(min_abs, std::fabs(x));
  }
  if (nonzero.empty()) return f;
  f.sci = max_abs / min_abs > 1000.0 || max_abs > 1e8 || (!f.int_mode && min_abs < 1e-4);
  for (int64_t k : nonzero) f.width = std::max<int64_t>(f.width, f.raw(v, k).size());
  return f;
}

std::string tensor_str(const Values& v, const Shape& shape, int64_t d, int64_t base,
                       const Formatter& f, bool summarize, int64_t indent) {
  const int64_t n = shape[d];
  const bool cut = summarize && n > 2 * kEdgeItems;
  int64_t block = 1;
  for (int64_t i = d + 1; i < shape.size(); ++i) block *= shape[i];
  std::vector<std::string> items;
  for (int64_t i = 0; i < n; ++i) {
    if (cut && i == kEdgeItems) {
      items.push_back(d + 1 == shape.size() ? " ..." : "...");
      i = n - kEdgeItems;
    }
    items.push_back(d + 1 == shape.size()
                        ? f.format(v, base + i)
                        : tensor_str(v, shape, d + 1, base + i * block, f, summarize, indent + 1));
  }
  std::string out = "[";
  if (d + 1 == shape.size()) {
    // A row: as many elements per line as fit in the line width.
    const int64_t per_line = std::max<int64_t>(1, (kLineWidth - indent) / (f.width + 2));
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0 && i % per_line == 0) {
        out.append(",\n").append(indent + 1, ' ');
      } else if (i > 0) {
        out += ", ";
      }
      out += items[i];
    }
  } else {
    std::string sep(1, ',');  // built by appends: GCC 12 warns (-Wrestrict) on "," + string
    sep.append(shape.size() - d - 1, '\n').append(indent + 1, ' ');
    for (size_t i = 0; i < items.size(); ++i) out += (i > 0 ? sep : "") + items[i];
  }
  return out + "]";
}

std::string shape_tuple(const Shape& s) {
  std::string out = "(";
  for (int64_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "[ undefined Tensor ]";
  detail::not_capturable(device(), detail::Uncapturable::HostRead, "printing a tensor");
  const std::string prefix = "tensor(";
  const int64_t indent = static_cast<int64_t>(prefix.size());
  std::vector<std::string> suffixes;
  if (!device().is_cpu()) suffixes.push_back("device='" + device().str() + "'");
  std::string body;
  if (numel() == 0) {
    body = "[]";
    if (dim() != 1) suffixes.push_back("size=" + shape_tuple(shape()));
    if (dtype() != kFloat32) suffixes.push_back("dtype=torch." + std::string(dtype_name(dtype())));
  } else {
    Values v;
    v.floating = is_floating(dtype());
    if (v.floating) {
      v.f = to_vector<double>();
    } else {
      v.i = to_vector<int64_t>();
    }
    const bool summarize = numel() > kSummarizeThreshold;
    std::vector<int64_t> shown;
    visible_indices(shape(), 0, 0, summarize, shown);
    const Formatter f = make_formatter(v, dtype(), shown);
    body = dim() == 0 ? f.raw(v, 0) : tensor_str(v, shape(), 0, 0, f, summarize, indent);
    if (dtype() != kFloat32 && dtype() != kInt64 && dtype() != kBool)
      suffixes.push_back("dtype=torch." + std::string(dtype_name(dtype())));
  }
  const std::string fn = detail::grad_fn_name(*this);
  if (!fn.empty()) {
    suffixes.push_back("grad_fn=<" + fn + ">");
  } else if (requires_grad()) {
    suffixes.push_back("requires_grad=True");
  }
  // Suffixes move to a new line when they would pass the line width (PyTorch's _add_suffixes,
  // including its count of the last line's length).
  std::string out = prefix + body;
  const size_t nl = out.rfind('\n');
  int64_t last_line = static_cast<int64_t>(out.size()) -
                      (nl == std::string::npos ? -1 : static_cast<int64_t>(nl)) + 1;
  for (const auto& s : suffixes) {
    const int64_t len = static_cast<int64_t>(s.size());
    if (last_line + len + 2 > kLineWidth) {
      out.append(",\n").append(indent, ' ').append(s);
      last_line = indent + len;
    } else {
      out += ", " + s;
      last_line += len + 2;
    }
  }
  return out + ")";
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace mantissa
