// File datasets: numeric CSV, tensors from a safetensors file, and MNIST's IDX format. Each
// reads the whole file up front and refuses a malformed one with an error naming the file and,
// for CSV, the line and column.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <sstream>

#include "engine/error.h"
#include "engine/factory.h"
#include "runner/data/data.h"
#include "runner/files/atomic_file.h"

namespace mantissa::runner {

namespace {

// read_file_bytes's message ("cannot open '<path>': <OS error>"), prefixed with what was read.
std::string read_file(const std::string& path, const char* what) {
  try {
    return read_file_bytes(path);
  } catch (const Error& e) {
    MT_THROW(what, ": ", e.what());
  }
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
  return s;
}

bool parse_number(std::string_view s, double& out) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (s.empty()) return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size();
}

std::vector<std::string_view> split(std::string_view line, char delimiter) {
  std::vector<std::string_view> fields;
  size_t start = 0;
  while (true) {
    const size_t pos = line.find(delimiter, start);
    fields.push_back(trim(line.substr(start, pos == std::string_view::npos ? pos : pos - start)));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return fields;
}

bool is_index(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

uint32_t big_endian_u32(const std::string& bytes, size_t at) {
  return (uint32_t(uint8_t(bytes[at])) << 24) | (uint32_t(uint8_t(bytes[at + 1])) << 16) |
         (uint32_t(uint8_t(bytes[at + 2])) << 8) | uint32_t(uint8_t(bytes[at + 3]));
}

// Checks an IDX header: size, magic (0x00000800 | type << 8 | ndim), and the declared length.
std::vector<int64_t> idx_dims(const std::string& bytes, const std::string& path, uint32_t magic,
                              const char* kind) {
  const size_t ndim = magic & 0xff;
  MT_CHECK(!(bytes.size() >= 2 && uint8_t(bytes[0]) == 0x1f && uint8_t(bytes[1]) == 0x8b),
           "MNIST: '", path, "' is gzip-compressed; decompress it first (gunzip)");
  MT_CHECK(bytes.size() >= 4 + 4 * ndim, "MNIST: '", path, "' is ", bytes.size(),
           " bytes, too short for an IDX ", kind, " header");
  const uint32_t got = big_endian_u32(bytes, 0);
  MT_CHECK(got == magic, "MNIST: '", path, "' has magic number ", got, ", expected ", magic,
           " for an IDX ", kind, " file (", magic == 2051 ? "idx3-ubyte" : "idx1-ubyte", ")");
  std::vector<int64_t> dims(ndim);
  int64_t expected = 4 + 4 * static_cast<int64_t>(ndim);
  int64_t count = 1;
  bool overflow = false;
  for (size_t i = 0; i < ndim; ++i) {
    dims[i] = big_endian_u32(bytes, 4 + 4 * i);
    overflow |= __builtin_mul_overflow(count, dims[i], &count);
  }
  // Dimensions up to 2^32 each: their product can wrap (to 0, even), so it is checked.
  MT_CHECK(!overflow && !__builtin_add_overflow(expected, count, &expected), "MNIST: '", path,
           "' declares dimensions whose product overflows int64 (a corrupted header?)");
  MT_CHECK(static_cast<int64_t>(bytes.size()) == expected, "MNIST: '", path, "' is ", bytes.size(),
           " bytes but its header declares ", expected, " (",
           bytes.size() < static_cast<size_t>(expected) ? "truncated" : "trailing data", ")");
  return dims;
}

}  // namespace

std::shared_ptr<TensorDataset> load_csv_dataset(const CsvOptions& o,
                                                std::optional<int64_t> ignored_label) {
  const std::string text = read_file(o.path, "CSV dataset");
  // Rows with their 1-based line numbers; blank lines are skipped.
  std::vector<std::pair<int64_t, std::vector<std::string_view>>> rows;
  {
    std::string_view rest = text;
    int64_t line_no = 0;
    while (!rest.empty()) {
      const size_t nl = rest.find('\n');
      std::string_view line = rest.substr(0, nl);
      rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
      ++line_no;
      if (trim(line).empty()) continue;
      rows.emplace_back(line_no, split(line, o.delimiter));
    }
  }
  MT_CHECK(!rows.empty(), "CSV dataset: '", o.path, "' has no rows");
  bool header = false;
  if (o.header) {
    header = *o.header;
  } else {
    double v;
    for (auto f : rows.front().second) header |= !parse_number(f, v);
  }
  const size_t ncols = rows.front().second.size();
  std::vector<std::string> names;
  for (size_t c = 0; c < ncols; ++c)
    names.push_back(header ? std::string(rows.front().second[c]) : std::to_string(c));
  if (header) rows.erase(rows.begin());
  MT_CHECK(!rows.empty(), "CSV dataset: '", o.path, "' has a header but no data rows");

  auto column = [&](const std::string& spec) -> size_t {
    for (size_t c = 0; c < ncols; ++c)
      if (header && names[c] == spec) return c;
    if (is_index(spec)) {
      size_t c = 0;
      const auto [end, ec] = std::from_chars(spec.data(), spec.data() + spec.size(), c);
      MT_CHECK(ec == std::errc() && end == spec.data() + spec.size() && c < ncols,
               "CSV dataset: column index ", spec, " is out of range: '", o.path, "' has ", ncols,
               " columns");
      return c;
    }
    std::string known;
    for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
    MT_THROW("CSV dataset: no column '", spec, "' in '", o.path, "' (columns: ", known, ")");
  };
  std::vector<size_t> targets, inputs;
  for (const auto& spec : o.target_columns) targets.push_back(column(spec));
  if (targets.empty()) targets.push_back(ncols - 1);
  if (!o.input_columns.empty()) {
    for (const auto& spec : o.input_columns) inputs.push_back(column(spec));
  } else {
    for (size_t c = 0; c < ncols; ++c)
      if (std::find(targets.begin(), targets.end(), c) == targets.end()) inputs.push_back(c);
  }
  MT_CHECK(!inputs.empty(), "CSV dataset: '", o.path, "' leaves no input columns");
  const bool labels = o.target_dtype == DType::Int64;
  MT_CHECK(labels || o.target_dtype == DType::Float32,
           "CSV dataset: target_dtype must be float32 or int64, got ", o.target_dtype);
  MT_CHECK(!labels || targets.size() == 1,
           "CSV dataset: int64 class-label targets need exactly one target column, got ",
           targets.size());

  const auto n = static_cast<int64_t>(rows.size());
  std::vector<float> x;
  std::vector<float> y;
  std::vector<int64_t> y_labels;
  x.reserve(n * inputs.size());
  for (const auto& [line_no, fields] : rows) {
    MT_CHECK(fields.size() == ncols, "CSV dataset: ", o.path, ":", line_no, ": expected ", ncols,
             " fields, got ", fields.size());
    auto value = [&, &line_no = line_no, &fields = fields](size_t c) {
      double v;
      MT_CHECK(parse_number(fields[c], v), "CSV dataset: ", o.path, ":", line_no, ": column ",
               c + 1, " ('", names[c], "'): cannot parse '", fields[c], "' as a number");
      MT_CHECK(std::isfinite(v) && std::fabs(v) <= std::numeric_limits<float>::max(),
               "CSV dataset: ", o.path, ":", line_no, ": column ", c + 1, " ('", names[c], "'): '",
               fields[c], "' is not a finite float32 number");
      return v;
    };
    for (size_t c : inputs) x.push_back(static_cast<float>(value(c)));
    if (labels) {
      const double v = value(targets[0]);
      const bool ignored = ignored_label && v == static_cast<double>(*ignored_label);
      MT_CHECK(ignored || (v == std::floor(v) && v >= 0 && v < 2147483648.0),
               "CSV dataset: ", o.path, ":", line_no, ": column ", targets[0] + 1, " ('",
               names[targets[0]], "'): class label '", fields[targets[0]],
               "' is not an integer in [0, 2^31)",
               ignored_label ? ", nor loss.ignore_index (" + std::to_string(*ignored_label) +
                                   ", a label the loss skips)"
                             : std::string());
      y_labels.push_back(ignored ? *ignored_label : static_cast<int64_t>(v));
    } else {
      for (size_t c : targets) y.push_back(static_cast<float>(value(c)));
    }
  }
  const auto nin = static_cast<int64_t>(inputs.size());
  Tensor tx = from_vector(x, Shape{n, nin});
  Tensor ty = labels ? from_vector(y_labels, Shape{n})
                     : from_vector(y, Shape{n, static_cast<int64_t>(targets.size())});
  return std::make_shared<TensorDataset>(tx, ty, "CSV " + o.path);
}

std::shared_ptr<TensorDataset> load_mnist_idx(const MnistOptions& o) {
  const std::string images = read_file(o.images, "MNIST images");
  const std::string labels = read_file(o.labels, "MNIST labels");
  const auto idims = idx_dims(images, o.images, 2051, "images");
  const auto ldims = idx_dims(labels, o.labels, 2049, "labels");
  MT_CHECK(idims[0] == ldims[0], "MNIST: '", o.images, "' has ", idims[0], " images but '",
           o.labels, "' has ", ldims[0], " labels");
  MT_CHECK(o.limit >= 0, "MNIST: limit must be >= 0, got ", o.limit);
  const int64_t n = o.limit > 0 ? std::min(o.limit, idims[0]) : idims[0];
  MT_CHECK(n > 0, "MNIST: '", o.images, "' holds no images");
  const int64_t rows = idims[1], cols = idims[2], pixels = rows * cols;
  std::vector<float> x(n * pixels);
  for (int64_t i = 0; i < n * pixels; ++i)
    x[i] = static_cast<float>(static_cast<uint8_t>(images[16 + i])) / 255.0f;
  std::vector<int64_t> y(n);
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<uint8_t>(labels[8 + i]);
  const Shape shape = o.flatten ? Shape{n, pixels} : Shape{n, 1, rows, cols};
  return std::make_shared<TensorDataset>(from_vector(x, shape), from_vector(y, Shape{n}),
                                         "MNIST " + o.images);
}

}  // namespace mantissa::runner
