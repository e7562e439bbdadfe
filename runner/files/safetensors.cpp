#include "runner/files/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <set>
#include <sstream>

#include "autograd/node.h"
#include "engine/factory.h"
#include "nn/module.h"
#include "runner/files/atomic_file.h"
#include "runner/files/json.h"

namespace mantissa::runner {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; big-endian hosts would need byte swaps");

namespace {

// The reference implementation's limit: a larger header is a corrupt (or hostile) file.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct CodeEntry {
  const char* code;
  DType dtype;
};
constexpr CodeEntry kCodes[] = {
    {"F64", kFloat64},        {"F32", kFloat32}, {"F16", kFloat16},
    {"BF16", kBFloat16},      {"I64", kInt64},   {"I32", kInt32},
    {"U8", kUInt8},           {"BOOL", kBool},   {"F8_E4M3", kFloat8E4M3FN},
    {"F8_E5M2", kFloat8E5M2},
};
// Valid safetensors codes with no mantissa dtype: named in the refusal so users know why.
constexpr const char* kUnsupportedCodes[] = {"I8",      "I16", "U16",     "U32",     "U64",
                                             "F8_E8M0", "F4",  "F6_E2M3", "F6_E3M2", "C64"};

std::string shape_text(const std::vector<int64_t>& dims) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < dims.size(); ++i) os << (i ? ", " : "") << dims[i];
  os << "]";
  return os.str();
}

struct Entry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end;
};

// A non-negative integer field of the header, as uint64.
uint64_t header_uint(JsonView v, std::string_view what, const std::string& field,
                     const std::string& name) {
  MT_CHECK(v.is_int(), what, ": tensor '", name, "': ", field,
           " must be a non-negative integer, got ", v.dump());
  const int64_t x = v.as_int();
  MT_CHECK(x >= 0, what, ": tensor '", name, "': ", field, " must be non-negative, got ", x);
  return static_cast<uint64_t>(x);
}

Entry parse_entry(const std::string& name, JsonView info, std::string_view what) {
  MT_CHECK(!name.empty(), what, ": a tensor has an empty name");
  MT_CHECK(info.is_object(), what, ": tensor '", name,
           "': expected an object with dtype, shape and data_offsets, got ", info.dump());
  for (const auto& [key, _] : info.members())
    MT_CHECK(key == "dtype" || key == "shape" || key == "data_offsets", what, ": tensor '", name,
             "': unknown field '", key, "' (expected dtype, shape, data_offsets)");
  const std::optional<JsonView> dtype = info.find("dtype");
  const std::optional<JsonView> shape = info.find("shape");
  const std::optional<JsonView> offsets = info.find("data_offsets");
  MT_CHECK(dtype && shape && offsets, what, ": tensor '", name, "': missing ",
           !dtype   ? "dtype"
           : !shape ? "shape"
                    : "data_offsets");
  MT_CHECK(dtype->is_string(), what, ": tensor '", name, "': dtype must be a string, got ",
           dtype->dump());
  Entry e;
  e.name = name;
  e.dtype = dtype_from_safetensors_code(dtype->as_string(),
                                        std::string(what) + ": tensor '" + name + "'");
  MT_CHECK(shape->is_array(), what, ": tensor '", name, "': shape must be an array, got ",
           shape->dump());
  MT_CHECK(static_cast<int64_t>(shape->size()) <= kMaxDims, what, ": tensor '", name, "' has ",
           shape->size(), " dimensions; mantissa tensors have at most ", kMaxDims);
  // numel * itemsize computed with an overflow check: a hostile shape must not wrap around to a
  // small byte count that happens to match the offsets.
  uint64_t bytes = static_cast<uint64_t>(itemsize(e.dtype));
  bool overflow = false;
  for (size_t i = 0; i < shape->size(); ++i) {
    const uint64_t d = header_uint((*shape)[i], what, "shape", name);
    e.shape.push_back(static_cast<int64_t>(d));
    if (d != 0 && bytes > std::numeric_limits<uint64_t>::max() / d)
      overflow = true;
    else
      bytes *= d;
  }
  MT_CHECK(offsets->is_array() && offsets->size() == 2, what, ": tensor '", name,
           "': data_offsets must be [begin, end], got ", offsets->dump());
  e.begin = header_uint((*offsets)[0], what, "data_offsets", name);
  e.end = header_uint((*offsets)[1], what, "data_offsets", name);
  MT_CHECK(e.begin <= e.end, what, ": tensor '", name, "': data_offsets [", e.begin, ", ", e.end,
           "] end before they begin");
  MT_CHECK(!overflow && bytes == e.end - e.begin, what, ": tensor '", name, "': shape ",
           shape_text(e.shape), " of ", dtype->as_string(), " needs ",
           overflow ? std::string("more than 2^64") : std::to_string(bytes),
           " bytes but data_offsets [", e.begin, ", ", e.end, "] hold ", e.end - e.begin);
  return e;
}

Tensor contiguous_cpu(const Tensor& t) {
  MT_CHECK(t.defined(), "safetensors: cannot save an undefined tensor");
  Tensor c = t.detach();
  if (!c.device().is_cpu()) c = c.to(Device::cpu());
  return detail::dense(c);
}

}  // namespace

const Tensor* SafetensorsFile::find(std::string_view name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

const Tensor& SafetensorsFile::at(std::string_view name) const {
  if (const Tensor* t = find(name)) return *t;
  std::ostringstream os;
  for (size_t i = 0; i < tensors.size() && i < 20; ++i) os << (i ? ", " : "") << tensors[i].first;
  if (tensors.size() > 20) os << ", ... (" << tensors.size() << " in all)";
  MT_THROW("safetensors: no tensor named '", name, "'; the file has: ", os.str());
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& [n, _] : tensors) out.push_back(n);
  return out;
}

std::string_view safetensors_dtype_code(DType dtype) {
  for (const auto& c : kCodes)
    if (c.dtype == dtype) return c.code;
  MT_THROW("safetensors: dtype ", dtype, " has no safetensors code");
}

DType dtype_from_safetensors_code(std::string_view code, std::string_view what) {
  for (const auto& c : kCodes)
    if (code == c.code) return c.dtype;
  std::string supported;  // "F64, F32, ...": the codes of kCodes, for the refusals
  for (const auto& c : kCodes) supported += (supported.empty() ? "" : ", ") + std::string(c.code);
  for (const char* u : kUnsupportedCodes)
    MT_CHECK(code != u, what, ": dtype ", code,
             " is valid safetensors but mantissa has no such dtype (supported: ", supported, ")");
  MT_THROW(what, ": unknown dtype '", code, "' (supported: ", supported, ")");
}

std::string serialize_safetensors(const NamedTensors& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  std::vector<Tensor> dense;
  dense.reserve(tensors.size());
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    MT_CHECK(!name.empty(), "safetensors: a tensor has an empty name");
    MT_CHECK(name != "__metadata__", "safetensors: '__metadata__' cannot name a tensor");
    MT_CHECK(seen.insert(name).second, "safetensors: duplicate tensor name '", name, "'");
    dense.push_back(contiguous_cpu(t));
  }
  // Built by hand (not json::dump) to get the reference writer's compact form: no spaces.
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      if (!first) header += ",";
      first = false;
      header += json::dump(Json(k));
      header += ':';
      header += json::dump(Json(v));
    }
    header += "}";
  }
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = dense[i];
    if (header.size() > 1) header += ",";
    header += json::dump(Json(tensors[i].first));
    header += ":{\"dtype\":\"";
    header += safetensors_dtype_code(t.dtype());
    header += "\",\"shape\":[";
    // Appended piecewise: GCC 12 at -O3 warns falsely (-Wrestrict) on chains of operator+.
    for (int64_t d = 0; d < t.dim(); ++d) {
      if (d) header += ',';
      header += std::to_string(t.size(d));
    }
    const uint64_t end = offset + static_cast<uint64_t>(t.nbytes());
    header += "],\"data_offsets\":[";
    header += std::to_string(offset);
    header += ',';
    header += std::to_string(end);
    header += "]}";
    offset = end;
  }
  header += "}";
  // The data buffer starts 8-byte aligned, as the reference writer arranges.
  while ((8 + header.size()) % 8 != 0) header += ' ';

  std::string out;
  out.reserve(8 + header.size() + offset);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out += static_cast<char>((n >> (8 * i)) & 0xff);
  out += header;
  for (const Tensor& t : dense)
    if (t.nbytes() > 0) out.append(static_cast<const char*>(t.data_ptr()), t.nbytes());
  return out;
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  write_file_atomically(path, serialize_safetensors(tensors, metadata));
}

SafetensorsFile parse_safetensors(std::string_view bytes, std::string_view what) {
  MT_CHECK(bytes.size() >= 8, what, ": not a safetensors file: ", bytes.size(),
           " bytes, shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  MT_CHECK(n <= kMaxHeaderBytes, what, ": bad header length ", n, " (more than the ",
           kMaxHeaderBytes, "-byte limit; not a safetensors file, or corrupted)");
  MT_CHECK(n <= bytes.size() - 8, what, ": bad header length ", n, ": the file has only ",
           bytes.size() - 8, " bytes after the length (truncated or not a safetensors file)");
  MT_CHECK(n >= 2 && bytes[8] == '{', what,
           ": header does not start with '{' (not a safetensors file, or corrupted)");
  const std::string_view header_text = bytes.substr(8, n);
  const Json parsed = json::parse(header_text, std::string(what) + ": safetensors header");
  const JsonView header(parsed);
  MT_CHECK(header.is_object(), what, ": header is not a JSON object");

  SafetensorsFile out;
  std::vector<Entry> entries;
  std::set<std::string> names;
  bool seen_metadata = false;
  for (const auto& [name, info] : header.members()) {
    if (name == "__metadata__") {
      MT_CHECK(!seen_metadata, what, ": duplicate __metadata__");
      seen_metadata = true;
      MT_CHECK(info.is_object(), what, ": __metadata__ must be an object of strings");
      for (const auto& [k, v] : info.members()) {
        MT_CHECK(v.is_string(), what, ": __metadata__ value for '", k, "' must be a string, got ",
                 v.dump());
        MT_CHECK(out.metadata.emplace(k, v.as_string()).second, what,
                 ": duplicate __metadata__ key '", k, "'");
      }
      continue;
    }
    MT_CHECK(names.insert(name).second, what, ": duplicate tensor name '", name, "'");
    entries.push_back(parse_entry(name, info, what));
  }

  // The tensors must tile the data buffer exactly: no gaps, no overlap, nothing past the end.
  const uint64_t buffer = bytes.size() - 8 - n;
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expect = 0;
  for (const Entry& e : entries) {
    MT_CHECK(e.begin >= expect, what, ": tensor '", e.name, "' data_offsets [", e.begin, ", ",
             e.end, "] overlap the previous tensor, which ends at ", expect);
    MT_CHECK(e.begin == expect, what, ": gap in the data buffer: bytes [", expect, ", ", e.begin,
             ") belong to no tensor (before '", e.name, "')");
    MT_CHECK(e.end <= buffer, what, ": truncated: tensor '", e.name, "' data_offsets [", e.begin,
             ", ", e.end, "] go past the end of the data buffer (", buffer, " bytes; the file is ",
             bytes.size(), " bytes)");
    expect = e.end;
  }
  MT_CHECK(expect == buffer, what, ": the data buffer has ", buffer - expect,
           " bytes after the last tensor (ends at ", expect, " of ", buffer,
           "): not written by a safetensors writer, or corrupted");

  const char* data = bytes.data() + 8 + n;
  for (const Entry& e : entries) {
    Tensor t = empty(Shape(e.shape), TensorOptions(e.dtype));
    const size_t len = static_cast<size_t>(e.end - e.begin);
    if (e.dtype == kBool) {
      // Any other byte would be an invalid C++ bool.
      for (size_t i = 0; i < len; ++i) {
        const auto b = static_cast<uint8_t>(data[e.begin + i]);
        MT_CHECK(b <= 1, what, ": tensor '", e.name, "' (BOOL) has byte value ",
                 static_cast<int>(b), " at element ", i, "; booleans must be 0 or 1");
      }
    }
    if (len > 0) std::memcpy(t.data_ptr(), data + e.begin, len);
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

SafetensorsFile load_safetensors(const std::string& path) {
  const std::string bytes = read_file_bytes(path);
  return parse_safetensors(bytes, path);
}

NamedTensors module_tensors(const nn::Module& module) {
  NamedTensors out;
  for (const auto& [name, t] : module.state_dict()) out.emplace_back(name, t);
  return out;
}

void save_weights(const nn::Module& module, const std::string& path,
                  const std::map<std::string, std::string>& metadata) {
  save_safetensors(path, module_tensors(module), metadata);
}

LoadWeightsReport load_weights(nn::Module& module, const SafetensorsFile& file, bool strict) {
  LoadWeightsReport report;
  const NamedTensors own = module_tensors(module);
  std::set<std::string> own_names;
  for (const auto& [name, t] : own) {
    own_names.insert(name);
    if (!file.find(name)) report.missing_keys.push_back(name);
  }
  for (const auto& [name, _] : file.tensors)
    if (!own_names.count(name)) report.unexpected_keys.push_back(name);
  if (strict && (!report.missing_keys.empty() || !report.unexpected_keys.empty())) {
    std::ostringstream os;
    os << "load_weights: the weights do not match " << module.type_name() << ":";
    if (!report.missing_keys.empty()) {
      os << " missing key(s):";
      for (const auto& k : report.missing_keys) os << " \"" << k << "\"";
      os << ".";
    }
    if (!report.unexpected_keys.empty()) {
      os << " unexpected key(s):";
      for (const auto& k : report.unexpected_keys) os << " \"" << k << "\"";
      os << ".";
    }
    MT_THROW(os.str());
  }
  // Every shape is checked before anything is copied, so a failed load leaves the module as it
  // was.
  for (const auto& [name, t] : own) {
    const Tensor* src = file.find(name);
    if (!src) continue;
    MT_CHECK(src->shape() == t.shape(), "load_weights: size mismatch for ", name,
             ": the file has shape ", src->shape(), ", the model has ", t.shape());
    if (src->dtype() != t.dtype()) report.converted_keys.push_back(name);
  }
  autograd::NoGradGuard no_grad;
  for (const auto& [name, t] : own) {
    const Tensor* src = file.find(name);
    if (!src) continue;
    Tensor dst = t.detach();
    dst.copy_(*src);  // converts dtype and device, as torch's load_state_dict
  }
  return report;
}

}  // namespace mantissa::runner
