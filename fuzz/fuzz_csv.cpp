// Fuzz target: the CSV dataset reader, runner::load_csv_dataset (data.type: csv).
//
// Input: one options byte, then (if its bit 5 is set) a line of target column specs and (if bit
// 6 is set) a line of input column specs, each spec separated by '|', then the file's bytes.
//   bits 0-1  header: 0 detect, 1 yes, 2 no, 3 detect      bit 2  int64 class-label targets
//   bits 3-4  delimiter: ',' ';' '\t' ' '
// A mantissa::Error is a clean refusal. An accepted file must give a dataset whose every example
// can be read.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "runner/data/data.h"

namespace mt = mantissa;

namespace {

// The next '\n'-terminated line of `rest` (all of it if there is no '\n'), split at '|'.
std::vector<std::string> take_specs(std::string_view& rest) {
  const size_t nl = rest.find('\n');
  const std::string_view line = rest.substr(0, nl);
  rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
  std::vector<std::string> specs;
  size_t start = 0;
  while (true) {
    const size_t bar = line.find('|', start);
    specs.emplace_back(line.substr(start, bar == std::string_view::npos ? bar : bar - start));
    if (bar == std::string_view::npos) break;
    start = bar + 1;
  }
  return specs;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  mt::fuzz::quiet();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  mt::runner::CsvOptions options;
  if ((flags & 3) == 1) options.header = true;
  if ((flags & 3) == 2) options.header = false;
  if (flags & 4) options.target_dtype = mt::DType::Int64;
  options.delimiter = ",;\t "[(flags >> 3) & 3];
  if (flags & 32) options.target_columns = take_specs(rest);
  if (flags & 64) options.input_columns = take_specs(rest);
  options.path = mt::fuzz::write_scratch("fuzz.csv", rest);
  try {
    const auto dataset = mt::runner::load_csv_dataset(options);
    mt::fuzz::gather_every_example(*dataset);
  } catch (const mt::Error& e) {
    mt::fuzz::refused(e);
  }
  return 0;
}
