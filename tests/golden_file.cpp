#include "golden_file.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace mantissa::testing {
namespace {

bool contains(const std::vector<std::string>& kinds, const std::string& kind) {
  return std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
}

// strtod for every token, so that nan and inf (which operator>> refuses) read as themselves;
// it rounds a decimal exactly as operator>> does.
bool parse_number(const std::string& token, double& out) {
  errno = 0;
  char* end = nullptr;
  out = std::strtod(token.c_str(), &end);
  const bool overflow = errno == ERANGE && std::isinf(out);
  return !token.empty() && end == token.c_str() + token.size() && !overflow;
}

bool parse_dims(const std::string& dims, Shape& shape) {
  std::vector<int64_t> sizes;
  if (dims != "-") {
    std::istringstream ds(dims);
    for (std::string d; std::getline(ds, d, ',');) {
      double v = 0;
      if (!parse_number(d, v) || v < 0 || v != static_cast<double>(static_cast<int64_t>(v)))
        return false;
      sizes.push_back(static_cast<int64_t>(v));
    }
  }
  shape = Shape(sizes);
  return true;
}

bool parse_values(std::istringstream& ls, std::vector<double>& values) {
  for (std::string token; ls >> token;) {
    double v = 0;
    if (!parse_number(token, v)) return false;
    values.push_back(v);
  }
  return true;
}

}  // namespace

Tensor GoldenTensor::f64() const { return from_vector(values, shape); }

std::map<std::string, Tensor> GoldenCase::tensors_by_name(const std::string& kind) const {
  std::map<std::string, Tensor> out;
  for (const GoldenTensor& t : tensors)
    if (t.kind == kind) out[t.name] = t.f64();
  return out;
}

std::vector<double> GoldenCase::first(const std::string& kind) const {
  for (const GoldenValues& line : lines)
    if (line.kind == kind) return line.values;
  return {};
}

std::vector<std::vector<double>> GoldenCase::all(const std::string& kind) const {
  std::vector<std::vector<double>> out;
  for (const GoldenValues& line : lines)
    if (line.kind == kind) out.push_back(line.values);
  return out;
}

std::map<std::string, GoldenCase> read_golden_file(const std::string& file,
                                                   const GoldenFormat& format) {
  const char* root = std::getenv("MANTISSA_SOURCE_DIR");
  const std::string path = std::string(root ? root : ".") + "/tests/golden/" + file;
  std::map<std::string, GoldenCase> cases;
  std::ifstream in(path);
  if (!in.good()) {
    ADD_FAILURE() << "cannot open " << path;
    return cases;
  }
  GoldenCase* current = nullptr;
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    std::istringstream ls(line);
    std::string kind;
    if (!(ls >> kind) || kind[0] == '#') continue;
    const std::string where = path + ":" + std::to_string(line_no);
    if (kind == format.case_kind) {
      std::string name;
      ls >> name;
      if (name.empty() || cases.count(name)) {
        ADD_FAILURE() << where << ": a case without a name or named twice: " << line;
        current = nullptr;
        continue;
      }
      current = &cases[name];
      current->name = name;
      for (std::string token; ls >> token;) current->header.push_back(token);
      continue;
    }
    if (current == nullptr) {
      ADD_FAILURE() << where << ": record outside a case: " << line;
      continue;
    }
    if (kind == "end") {
      current = nullptr;
    } else if (kind == "raises") {
      current->raises = true;
    } else if (contains(format.tensor_kinds, kind)) {
      GoldenTensor t;
      t.kind = kind;
      std::string dims;
      ls >> t.name;
      if (format.dtype_column) ls >> t.dtype;
      ls >> dims;
      if (dims.empty() || !parse_dims(dims, t.shape) || !parse_values(ls, t.values) ||
          static_cast<int64_t>(t.values.size()) != t.shape.numel()) {
        ADD_FAILURE() << where << ": malformed " << kind << " record: " << line;
        continue;
      }
      current->tensors.push_back(std::move(t));
    } else if (contains(format.value_kinds, kind) || format.other_kinds_are_values) {
      GoldenValues v;
      v.kind = kind;
      if (!parse_values(ls, v.values)) {
        ADD_FAILURE() << where << ": malformed " << kind << " record: " << line;
        continue;
      }
      current->lines.push_back(std::move(v));
    } else {
      ADD_FAILURE() << where << ": unknown record kind '" << kind << "'";
    }
  }
  return cases;
}

void expect_golden_tensor(const std::string& what, const Tensor& got, const GoldenTensor& want) {
  ASSERT_TRUE(got.defined()) << what;
  EXPECT_EQ(std::string(mantissa::dtype_name(got.dtype())), want.dtype) << what;
  ASSERT_EQ(got.shape(), want.shape) << what;
  const auto g = got.to_vector<double>();
  const std::vector<double>& w = want.values;
  const double rtol = got.dtype() == mantissa::kFloat64    ? 1e-14
                      : mantissa::is_floating(got.dtype()) ? 1e-6
                                                           : 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i]) || std::isinf(w[i]) || rtol == 0) {
      EXPECT_TRUE(std::isnan(w[i]) ? std::isnan(g[i]) : g[i] == w[i])
          << what << "[" << i << "]: got " << g[i] << ", PyTorch " << w[i];
    } else {
      EXPECT_NEAR(g[i], w[i], rtol * std::fabs(w[i]) + 1e-300)
          << what << "[" << i << "]: PyTorch " << w[i];
    }
  }
}

void expect_programs_match(const std::map<std::string, GoldenCase>& cases,
                           const std::map<std::string, GoldenProgram>& programs) {
  for (const auto& [name, golden] : cases) {
    auto it = programs.find(name);
    if (it == programs.end()) {
      ADD_FAILURE() << "golden case " << name << " has no program here";
      continue;
    }
    if (golden.raises) {
      EXPECT_THROW(it->second(), mantissa::Error) << name << ": PyTorch refuses it";
      continue;
    }
    GoldenOutputs outs;
    try {
      outs = it->second();
    } catch (const mantissa::Error& e) {
      ADD_FAILURE() << name << " threw: " << e.what();
      continue;
    }
    ASSERT_EQ(outs.size(), golden.tensors.size()) << name;
    for (size_t i = 0; i < outs.size(); ++i) {
      EXPECT_EQ(outs[i].first, golden.tensors[i].name) << name;
      expect_golden_tensor(name + " " + outs[i].first, outs[i].second, golden.tensors[i]);
    }
  }
  for (const auto& [name, fn] : programs)
    EXPECT_TRUE(cases.count(name)) << "program " << name << " has no golden case";
}

}  // namespace mantissa::testing
