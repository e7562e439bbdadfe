#include "distributed/mpi_store.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "distributed/backends.h"
#include "engine/error.h"

namespace mantissa::distributed::detail {
namespace {

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, static_cast<size_t>(length));
}

#define MT_MPI_CHECK(call)                                          \
  do {                                                              \
    const int mt_mpi_code = (call);                                 \
    MT_CHECK(mt_mpi_code == MPI_SUCCESS, "MPI rendezvous: ", #call, \
             " failed: ", mpi_error(mt_mpi_code));                  \
  } while (0)

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

// MPI is initialised once per process; a program that initialised it itself also finalises it.
void ensure_mpi_initialized() {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  int finalized = 0;
  MPI_Finalized(&finalized);
  MT_CHECK(!finalized, "MPI rendezvous: MPI was already finalised in this process");
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  MT_MPI_CHECK(MPI_Init(nullptr, nullptr));
  std::atexit(finalize_at_exit);
}

void append_u64(std::vector<char>& out, uint64_t value) {
  const char* p = reinterpret_cast<const char*>(&value);
  out.insert(out.end(), p, p + sizeof(value));
}

uint64_t read_u64(const std::vector<char>& in, size_t& at) {
  MT_CHECK(at + sizeof(uint64_t) <= in.size(), "MPI rendezvous: a truncated key record");
  uint64_t value = 0;
  std::memcpy(&value, in.data() + at, sizeof(value));
  at += sizeof(value);
  return value;
}

std::vector<char> read_bytes(const std::vector<char>& in, size_t& at) {
  const uint64_t n = read_u64(in, at);
  MT_CHECK(n <= in.size() - at, "MPI rendezvous: a truncated key record");
  std::vector<char> out(in.begin() + static_cast<std::ptrdiff_t>(at),
                        in.begin() + static_cast<std::ptrdiff_t>(at + n));
  at += n;
  return out;
}

// Every rank's bytes, concatenated in rank order, with each rank's length.
std::vector<char> allgather_bytes(MPI_Comm comm, const std::vector<char>& mine,
                                  std::vector<int>& lengths) {
  int size = 0;
  MT_MPI_CHECK(MPI_Comm_size(comm, &size));
  MT_CHECK(mine.size() <= static_cast<size_t>(INT32_MAX), "MPI rendezvous: a value of ",
           mine.size(), " bytes is too large");
  const int length = static_cast<int>(mine.size());
  lengths.assign(static_cast<size_t>(size), 0);
  MT_MPI_CHECK(MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm));
  std::vector<int> offsets(static_cast<size_t>(size), 0);
  int64_t total = 0;
  for (int r = 0; r < size; ++r) {
    offsets[r] = static_cast<int>(total);
    total += lengths[r];
  }
  MT_CHECK(total <= INT32_MAX, "MPI rendezvous: ", total, " bytes of keys are too many");
  std::vector<char> all(static_cast<size_t>(total));
  MT_MPI_CHECK(MPI_Allgatherv(mine.data(), length, MPI_BYTE, all.data(), lengths.data(),
                              offsets.data(), MPI_BYTE, comm));
  return all;
}

}  // namespace

MpiStore::MpiStore() {
  ensure_mpi_initialized();
  MT_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
}

MpiStore::~MpiStore() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiStore::set(const std::string& key, const std::vector<char>& data) {
  std::vector<char> record;
  append_u64(record, key.size());
  record.insert(record.end(), key.begin(), key.end());
  append_u64(record, data.size());
  record.insert(record.end(), data.begin(), data.end());
  std::vector<int> lengths;
  const std::vector<char> all = allgather_bytes(comm_, record, lengths);
  size_t at = 0;
  for (int length : lengths) {
    const size_t end = at + static_cast<size_t>(length);
    std::vector<char> one(all.begin() + static_cast<std::ptrdiff_t>(at),
                          all.begin() + static_cast<std::ptrdiff_t>(end));
    size_t pos = 0;
    const std::vector<char> k = read_bytes(one, pos);
    values_[std::string(k.begin(), k.end())] = read_bytes(one, pos);
    at = end;
  }
}

std::vector<char> MpiStore::get(const std::string& key) {
  wait({key});
  return values_.at(key);
}

void MpiStore::wait(const std::vector<std::string>& keys) {
  for (const std::string& key : keys)
    MT_CHECK(values_.count(key) != 0, "MPI rendezvous: no rank set key '", key,
             "' (every rank must call set() the same number of times, in the same order)");
}

void MpiStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) {
  wait(keys);
}

std::pair<int, int> mpi_world() {
  ensure_mpi_initialized();
  int rank = 0, size = 0;
  MT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  MT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  return {rank, size};
}

std::vector<char> mpi_broadcast_bytes(std::vector<char> bytes, int root) {
  ensure_mpi_initialized();
  uint64_t length = bytes.size();
  MT_MPI_CHECK(MPI_Bcast(&length, 1, MPI_UINT64_T, root, MPI_COMM_WORLD));
  MT_CHECK(length <= static_cast<uint64_t>(INT32_MAX), "MPI rendezvous: a broadcast of ", length,
           " bytes is too large");
  bytes.resize(static_cast<size_t>(length));
  MT_MPI_CHECK(MPI_Bcast(bytes.data(), static_cast<int>(length), MPI_BYTE, root, MPI_COMM_WORLD));
  return bytes;
}

}  // namespace mantissa::distributed::detail
