// The one reader of the golden files that scripts/golden/make_*.py write with PyTorch. A file is
// a list of cases, one record per line:
//   case NAME [header tokens...]          opens a case (another opening kind for some files)
//   tensor NAME [DTYPE] d0,d1,... v0 ...  a tensor (dims "-" for 0-d); values as %.17g or %.9g
//   KIND v0 v1 ...                        a line of plain numbers, for the kinds a file names
//   raises                                PyTorch refused the program
//   end                                   closes the case
// and "#" comment lines. Anything else is a test failure naming the file and line, so a format
// change in a script cannot be read silently as something else.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "test_util.h"

namespace mantissa::testing {

struct GoldenFormat {
  std::string case_kind = "case";
  // Tensor records carry the dtype PyTorch's result had, between the name and the dims.
  bool dtype_column = false;
  std::vector<std::string> tensor_kinds = {"tensor"};
  std::vector<std::string> value_kinds;
  // Every kind not named above is a line of plain numbers (files whose keys the tests define).
  bool other_kinds_are_values = false;
};

struct GoldenTensor {
  std::string kind, name;
  std::string dtype;  // empty where the file has no dtype column
  Shape shape;
  std::vector<double> values;
  // The values as a float64 tensor of the record's shape.
  Tensor f64() const;
};

struct GoldenValues {
  std::string kind;
  std::vector<double> values;
};

struct GoldenCase {
  std::string name;
  std::vector<std::string> header;  // the tokens after the name on the opening line
  bool raises = false;
  std::vector<GoldenTensor> tensors;  // in file order
  std::vector<GoldenValues> lines;    // in file order

  // The tensors of `kind` by name, as float64.
  std::map<std::string, Tensor> tensors_by_name(const std::string& kind = "tensor") const;
  // The values of the first line of `kind` (empty if none), and of every such line.
  std::vector<double> first(const std::string& kind) const;
  std::vector<std::vector<double>> all(const std::string& kind) const;
};

// Reads tests/golden/<file> under $MANTISSA_SOURCE_DIR, cases by name. A missing file, a record
// outside a case or of an unknown kind, a malformed number or shape, or a case named twice adds
// a test failure.
std::map<std::string, GoldenCase> read_golden_file(const std::string& file,
                                                   const GoldenFormat& format = {});

// A test's version of a golden script's program: its outputs by name, in the script's order.
using GoldenOutputs = std::vector<std::pair<std::string, Tensor>>;
using GoldenProgram = std::function<GoldenOutputs()>;

// `got` against `want` (a record with a dtype column): the same dtype and shape; NaN where PyTorch
// has NaN, infinities, signed zeros and integers exactly; finite floating values within a few
// units in the last place (transcendental functions may round differently from PyTorch's
// vectorised ones).
void expect_golden_tensor(const std::string& what, const Tensor& got, const GoldenTensor& want);

// Runs the program of each case (one that PyTorch refused must throw mantissa::Error) and compares
// its outputs; every case needs a program and every program a case.
void expect_programs_match(const std::map<std::string, GoldenCase>& cases,
                           const std::map<std::string, GoldenProgram>& programs);

}  // namespace mantissa::testing
