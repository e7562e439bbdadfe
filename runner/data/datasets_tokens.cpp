// Token datasets: a memory-mapped token file and random or consecutive blocks of it. The file is
// checked whole when mapped (type, size, format); a token id the model cannot take is found when
// its block is gathered, as nothing reads a mapped corpus ahead.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <sstream>

#include "engine/error.h"
#include "engine/factory.h"
#include "runner/data/token_data.h"
#include "runner/files/atomic_file.h"
#include "runner/files/hash.h"

namespace mantissa::runner {

namespace {

const char* format_name(TokenFormat f) { return f == TokenFormat::Bytes ? "bytes" : "uint16"; }

}  // namespace

TokenFile::TokenFile(std::string path, TokenFormat format)
    : path_(std::move(path)), format_(format) {
  const std::string problem = regular_file_problem(path_);
  MT_CHECK(problem.empty(), "token file '", path_, "': ", problem);
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  MT_CHECK(fd >= 0, "token file '", path_, "': cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    MT_THROW("token file '", path_, "': not a regular file");
  }
  size_ = static_cast<int64_t>(st.st_size);
  if (size_ == 0) {
    ::close(fd);
    MT_THROW("token file '", path_, "' is empty");
  }
  if (format_ == TokenFormat::Uint16 && size_ % 2 != 0) {
    ::close(fd);
    MT_THROW("token file '", path_, "' is ", size_,
             " bytes, not a whole number of uint16 tokens (truncated, or not a uint16 .bin file)");
  }
  void* p = ::mmap(nullptr, static_cast<size_t>(size_), PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  MT_CHECK(p != MAP_FAILED, "token file '", path_, "': mmap of ", size_,
           " bytes failed: ", std::strerror(err));
  bytes_ = static_cast<const unsigned char*>(p);
  tokens_ = format_ == TokenFormat::Bytes ? size_ : size_ / 2;
}

TokenFile::~TokenFile() {
  if (bytes_ != nullptr) ::munmap(const_cast<unsigned char*>(bytes_), static_cast<size_t>(size_));
}

const std::string& TokenFile::fingerprint() const {
  if (fingerprint_.empty()) {
    Fnv1a64 h;
    const int64_t header[] = {size_, static_cast<int64_t>(format_)};
    h.add(header, sizeof header);
    constexpr int64_t kWhole = int64_t{256} << 20, kWindow = int64_t{1} << 20, kWindows = 64;
    if (size_ <= kWhole) {
      h.add(bytes_, static_cast<size_t>(size_));
    } else {
      for (int64_t w = 0; w < kWindows; ++w) {
        const int64_t at = (size_ - kWindow) / (kWindows - 1) * w;
        h.add(bytes_ + at, static_cast<size_t>(kWindow));
      }
    }
    fingerprint_ = h.hex();
  }
  return fingerprint_;
}

std::shared_ptr<const TokenFile> map_token_file(const std::string& path, TokenFormat format) {
  return std::make_shared<const TokenFile>(path, format);
}

TokenBlockDataset::TokenBlockDataset(std::shared_ptr<const TokenFile> file, int64_t begin,
                                     int64_t end, TokenBlockOptions options)
    : file_(std::move(file)), begin_(begin), end_(end), options_(options) {
  MT_CHECK(file_ != nullptr, "TokenBlockDataset: no file");
  MT_CHECK(options_.block_size > 0, "TokenBlockDataset: block_size must be positive, got ",
           options_.block_size);
  MT_CHECK(options_.max_blocks >= 0 && options_.vocab_size >= 0,
           "TokenBlockDataset: max_blocks and vocab_size must be >= 0, got ", options_.max_blocks,
           " and ", options_.vocab_size);
  MT_CHECK(0 <= begin_ && begin_ <= end_ && end_ <= file_->tokens(), "TokenBlockDataset: range [",
           begin_, ", ", end_, ") is outside the ", file_->tokens(), " tokens of '", file_->path(),
           "'");
  MT_CHECK(end_ - begin_ > options_.block_size, "TokenBlockDataset: '", file_->path(), "' has ",
           end_ - begin_, " tokens in [", begin_, ", ", end_,
           "), too few for one block of block_size + 1 = ", options_.block_size + 1);
  blocks_ = (end_ - begin_ - 1) / options_.block_size;
  if (options_.max_blocks > 0) blocks_ = std::min(blocks_, options_.max_blocks);
}

int64_t TokenBlockDataset::offset(int64_t index, int64_t epoch) const {
  if (!options_.random_offsets) return begin_ + index * options_.block_size;
  // Uniform over the end - begin - T offsets whose block of T + 1 fits (nanoGPT's
  // randint(len(data) - block_size)), by a multiply-shift of a 64-bit hash: exact enough (a bias
  // of at most range / 2^64) and the same on every machine.
  const uint64_t h =
      splitmix64(options_.seed ^ splitmix64(static_cast<uint64_t>(epoch) ^
                                            splitmix64(static_cast<uint64_t>(index))));
  const auto range = static_cast<unsigned __int128>(end_ - begin_ - options_.block_size);
  return begin_ + static_cast<int64_t>((static_cast<unsigned __int128>(h) * range) >> 64);
}

Batch TokenBlockDataset::get_epoch_batch(const std::vector<int64_t>& indices, int64_t epoch) const {
  const int64_t t = options_.block_size;
  const auto n = static_cast<int64_t>(indices.size());
  Tensor input = empty({n, t}, DType::Int64);
  Tensor target = empty({n, t}, DType::Int64);
  auto* x = static_cast<int64_t*>(input.data_ptr());
  auto* y = static_cast<int64_t*>(target.data_ptr());
  for (int64_t b = 0; b < n; ++b) {
    MT_CHECK(indices[b] >= 0 && indices[b] < blocks_, "TokenBlockDataset: index ", indices[b],
             " is out of range for a dataset of ", blocks_, " blocks");
    const int64_t o = offset(indices[b], epoch);
    for (int64_t i = 0; i <= t; ++i) {
      const int64_t id = file_->token(o + i);
      MT_CHECK(options_.vocab_size == 0 || id < options_.vocab_size, "token file '", file_->path(),
               "': token ", id, " at position ", o + i, " is outside the model's vocabulary of ",
               options_.vocab_size);
      if (i < t) x[b * t + i] = id;
      if (i > 0) y[b * t + i - 1] = id;
    }
  }
  return {input, target};
}

std::string TokenBlockDataset::describe() const {
  std::ostringstream os;
  os << format_name(file_->format()) << " tokens " << file_->path() << " [" << begin_ << ", "
     << end_ << "): " << blocks_ << (options_.random_offsets ? " random" : " consecutive")
     << " blocks of " << options_.block_size << " int64 -> next token";
  return os.str();
}

std::string TokenBlockDataset::fingerprint() const {
  const int64_t params[] = {begin_,
                            end_,
                            options_.block_size,
                            static_cast<int64_t>(options_.seed),
                            options_.random_offsets ? 1 : 0,
                            blocks_};
  return Fnv1a64().add(file_->fingerprint()).add(params, sizeof params).hex();
}

TokenSplit split_token_blocks(std::shared_ptr<const TokenFile> file, TokenBlockOptions options,
                              double val_fraction, int64_t val_blocks) {
  MT_CHECK(file != nullptr, "split_token_blocks: no file");
  MT_CHECK(val_fraction >= 0.0 && val_fraction < 1.0,
           "split_token_blocks: val_fraction must be in [0, 1), got ", val_fraction);
  MT_CHECK(val_blocks >= 0, "split_token_blocks: val_blocks must be >= 0, got ", val_blocks);
  const int64_t n = file->tokens();
  const auto n_val = static_cast<int64_t>(std::llround(val_fraction * static_cast<double>(n)));
  TokenSplit split;
  const int64_t need = options.block_size + 1;
  MT_CHECK(n - n_val >= need, "'", file->path(), "' has ", n, " tokens; with val_split ",
           val_fraction, " the training part's ", n - n_val,
           " are too few for one block of block_size + 1 = ", need);
  split.train = std::make_shared<TokenBlockDataset>(file, 0, n - n_val, options);
  if (val_fraction > 0.0) {
    MT_CHECK(n_val >= need, "'", file->path(), "' has ", n, " tokens; val_split ", val_fraction,
             " leaves ", n_val,
             " for validation, too few for one block of block_size + 1 = ", need);
    TokenBlockOptions vo = options;
    vo.random_offsets = false;
    vo.max_blocks = val_blocks;
    split.val = std::make_shared<TokenBlockDataset>(file, n - n_val, n, vo);
  }
  return split;
}

}  // namespace mantissa::runner
