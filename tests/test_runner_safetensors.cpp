// safetensors: round trips for every dtype, a file written by PyTorch (tests/data, made by
// scripts/fixtures/make_safetensors_fixture.py), one refusal per kind of malformed file, a
// truncation / byte-flip loop that must only ever produce mantissa::Error, and load_weights.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <thread>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "json_doc.h"
#include "runner/files/atomic_file.h"
#include "runner/files/output_target.h"
#include "runner/files/safetensors.h"
#include "test_models.h"
#include "test_util.h"

namespace mt = mantissa;
namespace nn = mantissa::nn;
using mt::Tensor;
using mt::runner::JsonView;
using mt::runner::NamedTensors;
using mt::testing::expect_close;
using mt::testing::expect_error;

namespace {

namespace fs = std::filesystem;

struct ToyModel : mt::testing::ToyModel {
  explicit ToyModel(int64_t hidden = 10) : mt::testing::ToyModel({.hidden = hidden}) {}
};

std::string raw_bytes(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.nbytes()));
}

void expect_bitwise(const Tensor& a, const Tensor& b, const std::string& what) {
  EXPECT_EQ(a.dtype(), b.dtype()) << what;
  EXPECT_EQ(a.shape(), b.shape()) << what;
  EXPECT_TRUE(raw_bytes(a) == raw_bytes(b)) << what << ": bytes differ";
}

std::string source_path(const std::string& rel) {
  const char* root = std::getenv("MANTISSA_SOURCE_DIR");
  return std::string(root ? root : ".") + "/" + rel;
}

// A fresh directory under the system temp dir, removed at scope exit.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("mantissa_st_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
  static int& counter() {
    static int c = 0;
    return c;
  }
};

// One tensor of each dtype (some non-contiguous), a 0-d and an empty one.
NamedTensors every_dtype() {
  NamedTensors out;
  mt::manual_seed(3);
  const Tensor base = mt::randn({3, 4}, mt::kFloat64) * 100.0;
  out.emplace_back("f64", base);
  out.emplace_back("f32", base.to(mt::kFloat32).t());  // non-contiguous
  out.emplace_back("f16", base.to(mt::kFloat16));
  out.emplace_back("bf16", base.to(mt::kBFloat16).slice(0, 0, std::nullopt, 2));
  out.emplace_back("i64", base.to(mt::kInt64) * 1000000007LL);
  out.emplace_back("i32", base.to(mt::kInt32));
  out.emplace_back("u8", base.abs().to(mt::kUInt8));
  out.emplace_back("bool", base.to(mt::kFloat32).relu().to(mt::kBool));
  out.emplace_back("scalar", mt::scalar_tensor(1.5, mt::kFloat32));
  out.emplace_back("empty", mt::zeros({0, 7}, mt::kFloat16));
  out.emplace_back("x.y/z:weird name \"quoted\"", mt::ones({2, 1, 2}, mt::kFloat32));
  return out;
}

// A heap copy with no slack after the last byte, so ASan flags any read past the end (a
// std::string or a prefix view of a longer buffer would hide it).
class ExactBuffer {
 public:
  explicit ExactBuffer(std::string_view bytes)
      : data_(new char[bytes.size()]), size_(bytes.size()) {
    if (size_) std::memcpy(data_.get(), bytes.data(), size_);
  }
  std::string_view view() const { return {data_.get(), size_}; }

 private:
  std::unique_ptr<char[]> data_;
  size_t size_;
};

// A header + buffer written by hand, for the malformed cases.
std::string file_with(const std::string& header, const std::string& data, int64_t length = -1) {
  const uint64_t n = length < 0 ? header.size() : static_cast<uint64_t>(length);
  std::string out;
  for (int i = 0; i < 8; ++i) out += static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

}  // namespace

TEST(RunnerSafetensors, RoundTripEveryDtypeBitwise) {
  const NamedTensors tensors = every_dtype();
  const std::map<std::string, std::string> meta{{"format", "pt"}, {"note", "caf\xc3\xa9 \"q\"\n"}};
  const std::string bytes = mt::runner::serialize_safetensors(tensors, meta);
  EXPECT_EQ(bytes, mt::runner::serialize_safetensors(tensors, meta)) << "output not deterministic";
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u) << "header not padded to 8 bytes";

  TempDir dir;
  const std::string path = dir.file("all.safetensors");
  mt::runner::save_safetensors(path, tensors, meta);
  EXPECT_EQ(mt::runner::read_file_bytes(path), bytes);
  const auto file = mt::runner::load_safetensors(path);
  EXPECT_EQ(file.metadata, meta);
  ASSERT_EQ(file.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(file.tensors[i].first, tensors[i].first);  // written in the order given
    expect_bitwise(file.tensors[i].second, tensors[i].second, tensors[i].first);
    EXPECT_TRUE(file.tensors[i].second.is_contiguous());
  }
  EXPECT_EQ(file.names().size(), tensors.size());
  EXPECT_NE(file.find("i64"), nullptr);
  EXPECT_EQ(file.find("nope"), nullptr);
  expect_error([&] { (void)file.at("nope"); }, {"no tensor named 'nope'", "f64"});
  // No temporaries are left next to the file.
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path)) ++entries;
  EXPECT_EQ(entries, 1);
}

TEST(RunnerSafetensors, WriterRefusesBadNames) {
  expect_error(
      [] {
        (void)mt::runner::serialize_safetensors({{"a", mt::ones({1})}, {"a", mt::ones({1})}});
      },
      {"duplicate tensor name 'a'"});
  expect_error(
      [] {
        (void)mt::runner::serialize_safetensors({{"", mt::ones({1})}});
      },
      {"empty name"});
  expect_error(
      [] {
        (void)mt::runner::serialize_safetensors({{"__metadata__", mt::ones({1})}});
      },
      {"__metadata__"});
}

TEST(RunnerSafetensors, LoadsPyTorchWrittenFileWithExpectedValues) {
  const auto file = mt::runner::load_safetensors(source_path("tests/data/torch_toy.safetensors"));
  const std::string json_text =
      mt::runner::read_file_bytes(source_path("tests/data/torch_toy_expected.json"));
  const JsonDoc expected(json_text, "torch_toy_expected.json");
  EXPECT_EQ(file.metadata.at("framework"), "pytorch");
  const auto tensors = expected.at("tensors").members();
  EXPECT_EQ(file.tensors.size(), tensors.size());
  for (const auto& [name, e] : tensors) {
    SCOPED_TRACE(name);
    const Tensor* t = file.find(name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(std::string(mt::dtype_name(t->dtype())), e.at("dtype").as_string());
    std::vector<int64_t> dims;
    for (const JsonView d : e.at("shape").elements()) dims.push_back(d.as_int());
    EXPECT_EQ(t->shape(), mt::Shape(dims));
    const JsonView values = e.at("values");
    ASSERT_EQ(static_cast<int64_t>(values.size()), t->numel());
    if (t->is_floating_point()) {
      const auto got = t->to_vector<double>();
      for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(got[i], values[i].as_double()) << i;
    } else {
      const auto got = t->to_vector<int64_t>();
      for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(got[i], values[i].as_int()) << i;
    }
  }

  // The weights load into our ToyModel by PyTorch's names and compute what PyTorch computed.
  ToyModel model;
  const auto report = mt::runner::load_weights(model, file, /*strict=*/false);
  EXPECT_TRUE(report.missing_keys.empty());
  EXPECT_EQ(report.unexpected_keys.size(), 10u);  // the dtypes.*, scalar and empty tensors
  std::vector<float> x;
  for (const JsonView v : expected.at("toy_input").elements())
    x.push_back(static_cast<float>(v.as_double()));
  std::vector<float> y;
  for (const JsonView v : expected.at("toy_output").elements())
    y.push_back(static_cast<float>(v.as_double()));
  mt::autograd::NoGradGuard no_grad;
  const Tensor out = model.forward(mt::from_vector(x, mt::Shape{2, 10}));
  expect_close(out, mt::from_vector(y, mt::Shape{2, 5}), 1e-5, 1e-6, "ToyModel output vs PyTorch");
}

TEST(RunnerSafetensors, RefusesEachKindOfMalformedFile) {
  const std::string ok_entry = R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::string data8(8, '\0');
  struct Case {
    std::string name, bytes;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {"short", std::string(5, 'x'), {"shorter than the 8-byte header length"}},
      {"length past end", file_with("{" + ok_entry + "}", data8, 4096), {"bad header length 4096"}},
      {"length huge", file_with("{}", "", 1LL << 40), {"bad header length", "limit"}},
      {"not json", file_with("{\"t\":", data8), {"safetensors header"}},
      {"not an object", file_with("[1,2]   ", ""), {"does not start with '{'"}},
      {"unknown dtype",
       file_with(R"({"t":{"dtype":"F7","shape":[2],"data_offsets":[0,8]}})", data8),
       {"unknown dtype 'F7'"}},
      {"unsupported dtype",
       file_with(R"({"t":{"dtype":"I8","shape":[8],"data_offsets":[0,8]}})", data8),
       {"I8", "mantissa has no such dtype"}},
      {"shape/offset mismatch",
       file_with(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data8),
       {"tensor 't'", "needs 12 bytes", "hold 8"}},
      {"offsets past the data",
       file_with(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", data8),
       {"truncated", "tensor 't'"}},
      {"overlap",
       file_with(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                 R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                 data8),
       {"overlap"}},
      {"gap",
       file_with(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", data8),
       {"gap in the data buffer"}},
      {"trailing bytes",
       file_with("{" + ok_entry + "}", data8 + "xyz"),
       {"3 bytes after the last tensor"}},
      {"duplicate names",
       file_with("{" + ok_entry + "," + ok_entry + "}", data8),
       {"duplicate key 't'"}},
      {"begin after end",
       file_with(R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", data8),
       {"end before they begin"}},
      {"negative offset",
       file_with(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", data8),
       {"non-negative"}},
      {"float offset",
       file_with(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0.5,8]}})", data8),
       {"non-negative integer"}},
      {"too many dims",
       file_with(R"({"t":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}})", "x"),
       {"9 dimensions"}},
      {"shape overflow",
       file_with(R"({"t":{"dtype":"F64","shape":[4294967296,4294967296,2],"data_offsets":[0,0]}})",
                 ""),
       {"more than 2^64"}},
      {"missing field",
       file_with(R"({"t":{"dtype":"F32","shape":[2]}})", data8),
       {"missing data_offsets"}},
      {"unknown field",
       file_with(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", data8),
       {"unknown field 'x'"}},
      {"bad bool",
       file_with(R"({"t":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", "\x01\x07"),
       {"booleans must be 0 or 1"}},
      {"metadata not strings",
       file_with(R"({"__metadata__":{"a":1}})", ""),
       {"__metadata__ value for 'a'"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto parts = c.parts;
    parts.push_back("bad.safetensors");  // every message names the file
    expect_error(
        [&] {
          (void)mt::runner::parse_safetensors(ExactBuffer(c.bytes).view(), "bad.safetensors");
        },
        parts);
  }
  // From disk: the path is named; a missing file is a clear error too.
  TempDir dir;
  const std::string path = dir.file("trunc.safetensors");
  {
    std::ofstream f(path, std::ios::binary);
    const std::string good = mt::runner::serialize_safetensors({{"w", mt::ones({64})}});
    f << good.substr(0, good.size() - 3);
  }
  expect_error([&] { (void)mt::runner::load_safetensors(path); }, {path, "truncated"});
  expect_error([&] { (void)mt::runner::load_safetensors(dir.file("missing.safetensors")); },
               {"cannot open", "missing.safetensors"});
  // Empty tensors and an empty file body are fine.
  const auto empty = mt::runner::parse_safetensors(file_with("{}", ""), "e");
  EXPECT_TRUE(empty.tensors.empty());
}

// Truncations at every length and thousands of random byte changes: every outcome is either a
// parsed file or a mantissa::Error (run under ASan/UBSan to also catch out-of-bounds reads).
TEST(RunnerSafetensors, FuzzedFilesOnlyEverThrowMantissaError) {
  const std::string good = mt::runner::serialize_safetensors(every_dtype(), {{"k", "v"}});
  for (size_t len = 0; len < good.size(); ++len) {
    const ExactBuffer cut(std::string_view(good).substr(0, len));
    EXPECT_THROW((void)mt::runner::parse_safetensors(cut.view(), "f"), mt::Error)
        << "truncated to " << len << " bytes was accepted";
  }
  std::mt19937 rng(1234);
  int accepted = 0, refused = 0;
  uint64_t n = 0;
  std::memcpy(&n, good.data(), 8);
  for (int iter = 0; iter < 4000; ++iter) {
    std::string bad = good;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int f = 0; f < flips; ++f) {
      // Mostly in the length and header, where the parser makes its decisions.
      const size_t limit = (iter % 4 == 0) ? bad.size() : static_cast<size_t>(8 + n);
      const size_t pos = rng() % limit;
      bad[pos] = (iter % 2) ? static_cast<char>(rng() & 0xff)
                            : static_cast<char>(bad[pos] ^ (1 << (rng() % 8)));
    }
    try {
      const auto file = mt::runner::parse_safetensors(ExactBuffer(bad).view(), "fuzz");
      for (const auto& [name, t] : file.tensors) (void)raw_bytes(t);
      ++accepted;
    } catch (const mt::Error&) {
      ++refused;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "iteration " << iter << " threw a non-mantissa exception: " << e.what();
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(accepted, 0);  // flips inside tensor data are valid files with other values
}

TEST(RunnerSafetensors, LoadWeightsStrictAndNonStrict) {
  mt::manual_seed(7);
  ToyModel source;
  TempDir dir;
  const std::string path = dir.file("toy.safetensors");
  mt::runner::save_weights(source, path, {{"step", "12"}});
  const auto file = mt::runner::load_safetensors(path);
  EXPECT_EQ(file.names(),
            (std::vector<std::string>{"net1.weight", "net1.bias", "net2.weight", "net2.bias"}));
  EXPECT_EQ(file.metadata.at("step"), "12");

  ToyModel target;
  const auto report = mt::runner::load_weights(target, file);
  EXPECT_TRUE(report.missing_keys.empty() && report.unexpected_keys.empty() &&
              report.converted_keys.empty());
  const auto a = source.named_parameters(), b = target.named_parameters();
  for (size_t i = 0; i < a.size(); ++i) expect_bitwise(b[i].second, a[i].second, a[i].first);

  // Missing and unexpected keys: strict refuses and changes nothing; non-strict reports them.
  mt::runner::SafetensorsFile partial;
  partial.tensors = {{"net1.weight", mt::zeros({10, 10})}, {"extra.w", mt::zeros({1})}};
  ToyModel fresh;
  const Tensor before = fresh.net1->weight.clone();
  expect_error(
      [&] { mt::runner::load_weights(fresh, partial); },
      {"missing key(s)", "\"net1.bias\"", "\"net2.weight\"", "unexpected key(s)", "\"extra.w\""});
  expect_bitwise(fresh.net1->weight, before, "untouched after a refused strict load");
  const auto loose = mt::runner::load_weights(fresh, partial, /*strict=*/false);
  EXPECT_EQ(loose.missing_keys,
            (std::vector<std::string>{"net1.bias", "net2.weight", "net2.bias"}));
  EXPECT_EQ(loose.unexpected_keys, (std::vector<std::string>{"extra.w"}));
  EXPECT_EQ(fresh.net1->weight.abs().sum().item<float>(), 0.0f);

  // Shape mismatch: always an error, naming the key and both shapes.
  ToyModel wide(20);
  expect_error([&] { mt::runner::load_weights(wide, file, /*strict=*/false); },
               {"size mismatch for net1.weight", "[10, 10]", "[20, 10]"});

  // Other dtypes are converted, as torch's load_state_dict does.
  mt::runner::SafetensorsFile doubles;
  for (const auto& [name, t] : file.tensors) doubles.tensors.emplace_back(name, t.to(mt::kFloat64));
  ToyModel converted;
  const auto conv = mt::runner::load_weights(converted, doubles);
  EXPECT_EQ(conv.converted_keys.size(), 4u);
  EXPECT_EQ(converted.net2->weight.dtype(), mt::kFloat32);
  expect_bitwise(converted.net2->weight, source.net2->weight, "converted from float64");
}

TEST(RunnerSafetensors, AtomicWriteReplacesWholeFileAndFailsCleanly) {
  TempDir dir;
  const std::string path = dir.file("a.bin");
  mt::runner::write_file_atomically(path, std::string(100000, 'a'));
  mt::runner::write_file_atomically(path, "short");
  EXPECT_EQ(mt::runner::read_file_bytes(path), "short");
  expect_error([&] { mt::runner::write_file_atomically(dir.file("no/such/dir/x"), "x"); },
               {"cannot create temporary file", "no/such/dir"});
  EXPECT_TRUE(mt::runner::is_atomic_temp_name(".a.bin.tmp-123"));
  EXPECT_FALSE(mt::runner::is_atomic_temp_name("a.bin"));
}

namespace {

// Runs `fn` (which reads `fifo`); should the read block in open() or read() for more than a few
// seconds, a writer opens and closes the FIFO so the read ends (with an empty file) and the test
// fails instead of hanging.
template <typename Fn>
void with_fifo_unblocker(const std::string& fifo, Fn&& fn) {
  std::atomic<bool> done{false};
  std::thread unblock([&] {
    for (int i = 0; i < 500 && !done; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (done) return;
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  });
  fn();
  done = true;
  unblock.join();
}

}  // namespace

TEST(RunnerSafetensors, ReadsOnlyRegularFilesAndChecksTheSizeFirst) {
  TempDir dir;
  const std::string fifo = dir.file("data.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  with_fifo_unblocker(fifo, [&] {
    expect_error([&] { (void)mt::runner::read_file_bytes(fifo); },
                 {"cannot read '" + fifo + "'", "is a FIFO (named pipe), not a regular file"});
  });
  with_fifo_unblocker(fifo, [&] {
    expect_error([&] { (void)mt::runner::load_safetensors(fifo); }, {fifo, "FIFO"});
  });
  // A device: /dev/null (reading it is harmless, and without the check it reads as empty).
  expect_error([&] { (void)mt::runner::read_file_bytes("/dev/null"); },
               {"'/dev/null'", "is a character device, not a regular file"});
  expect_error([&] { (void)mt::runner::read_file_bytes(dir.path.string()); },
               {"is a directory, not a regular file"});
  expect_error([&] { (void)mt::runner::read_file_bytes(dir.file("missing")); },
               {"cannot open", "missing"});

  // The size, from stat, against the caller's limit (default: physical memory).
  const std::string file = dir.file("hundred.bin");
  mt::runner::write_file_atomically(file, std::string(100, 'x'));
  expect_error([&] { (void)mt::runner::read_file_bytes(file, 50); },
               {"hundred.bin", "it is 100 bytes", "the limit of 50 bytes"});
  EXPECT_EQ(mt::runner::read_file_bytes(file, 100).size(), 100u);
  EXPECT_EQ(mt::runner::read_file_bytes(file).size(), 100u);
  // A symbolic link to a regular file is read through.
  fs::create_symlink(file, dir.path / "link.bin");
  EXPECT_EQ(mt::runner::read_file_bytes(dir.file("link.bin")).size(), 100u);

  EXPECT_EQ(mt::runner::regular_file_problem(file), "");
  EXPECT_EQ(mt::runner::regular_file_problem(dir.file("link.bin")), "");
  EXPECT_EQ(mt::runner::regular_file_problem(dir.file("missing")), "no such file");
  EXPECT_EQ(mt::runner::regular_file_problem(fifo), "is a FIFO (named pipe), not a regular file");
  EXPECT_EQ(mt::runner::regular_file_problem("/dev/null"),
            "is a character device, not a regular file");
}

TEST(RunnerSafetensors, AtomicWriteNeverReplacesADeviceOrFifo) {
  TempDir dir;
  const std::string fifo = dir.file("out.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  expect_error([&] { mt::runner::write_file_atomically(fifo, "x"); },
               {fifo, "is a FIFO (named pipe), not a regular file; refusing to replace it"});
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()), 1)
      << "a temporary was left behind";
  // A device node of our own (the same device as /dev/null), where mknod is allowed (root).
  const std::string node = dir.file("null");
  if (::mknod(node.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0) {
    expect_error([&] { mt::runner::write_file_atomically(node, "x"); },
                 {"is a character device, not a regular file"});
    EXPECT_TRUE(fs::is_character_file(node));
  }
  // A symbolic link is replaced itself; the file it pointed to keeps its bytes.
  const std::string target = dir.file("target.txt");
  mt::runner::write_file_atomically(target, "keep");
  fs::create_symlink(target, dir.path / "link");
  mt::runner::write_file_atomically(dir.file("link"), "new");
  EXPECT_FALSE(fs::is_symlink(dir.path / "link"));
  EXPECT_EQ(mt::runner::read_file_bytes(dir.file("link")), "new");
  EXPECT_EQ(mt::runner::read_file_bytes(target), "keep");
}

TEST(RunnerSafetensors, OutputTargetRefusesNodesLinksAndTheRunsFiles) {
  namespace rn = mt::runner;
  TempDir dir;
  auto refused = [](const std::string& path, const std::vector<std::string>& inputs, bool force,
                    const std::string& why) {
    try {
      rn::check_output_target(path, inputs, force);
      ADD_FAILURE() << path << " (force " << force << ") was not refused";
    } catch (const rn::OutputRefused& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("refusing to write '" + path + "'"), std::string::npos) << msg;
      EXPECT_NE(msg.find(why), std::string::npos) << msg << " lacks " << why;
    }
  };
  // A run directory: it holds resolved.yaml.
  const fs::path run = dir.path / "run";
  fs::create_directories(run / "checkpoints");
  for (const char* f : {"resolved.yaml", "metrics.jsonl", "train.log", "summary.json", ".lock"}) {
    rn::write_file_atomically((run / f).string(), "x");
  }
  const std::string ckpt = (run / "checkpoints" / "step-000000001.ckpt").string();
  rn::write_file_atomically(ckpt, "x");
  for (const char* f : {"resolved.yaml", "metrics.jsonl", "train.log", "summary.json", ".lock"}) {
    refused((run / f).string(), {}, false, std::string("it is the ") + f + " of the run in");
    EXPECT_NO_THROW(rn::check_output_target((run / f).string(), {}, true));
  }
  refused(ckpt, {}, false, "in the checkpoints directory of the run");
  refused((run / "checkpoints" / "new.safetensors").string(), {}, false, "checkpoints directory");
  EXPECT_NO_THROW(rn::check_output_target(ckpt, {}, true));
  EXPECT_NO_THROW(rn::check_output_target((run / "weights.safetensors").string(), {}, false));
  EXPECT_NO_THROW(rn::check_output_target((run / "plot.svg").string(), {}, false));
  EXPECT_NO_THROW(rn::check_output_target(dir.file("elsewhere.safetensors"), {}, false));
  // Through a symbolic link to the run directory, and with ".." in the path.
  fs::create_directory_symlink(run, dir.path / "run-link");
  refused(dir.file("run-link/resolved.yaml"), {}, false, "resolved.yaml of the run");
  refused((run / "checkpoints" / ".." / "summary.json").string(), {}, false, "summary.json");

  // The files the command reads, by identity: another name for the same file counts.
  const std::string source = dir.file("source.ckpt");
  rn::write_file_atomically(source, "x");
  fs::create_hard_link(source, dir.path / "hard.ckpt");
  refused(source, {source}, false, "the file this command reads");
  refused(dir.file("hard.ckpt"), {source}, false, "'" + source + "', the file this command reads");
  EXPECT_NO_THROW(rn::check_output_target(source, {source}, true));
  // A directory the command reads counts as a run directory even without resolved.yaml.
  const fs::path plain = dir.path / "plain";
  fs::create_directories(plain);
  EXPECT_NO_THROW(rn::check_output_target((plain / "metrics.jsonl").string(), {}, false));
  refused((plain / "metrics.jsonl").string(), {plain.string()}, false, "metrics.jsonl");

  // Symbolic links: refused, or with force replaced themselves (never written through).
  fs::create_symlink(source, dir.path / "link");
  refused(dir.file("link"), {}, false, "it is a symbolic link (to '" + source + "')");
  EXPECT_NO_THROW(rn::check_output_target(dir.file("link"), {}, true));
  // Nodes that are not files: refused even with force.
  const std::string fifo = dir.file("out.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  for (bool force : {false, true}) {
    refused(fifo, {}, force, "it is a FIFO (named pipe), not a regular file");
    refused(plain.string(), {}, force, "it is a directory, not a regular file");
    refused("/dev/null", {}, force, "it is a character device, not a regular file");
  }
  EXPECT_TRUE(fs::is_fifo(fifo));
}
