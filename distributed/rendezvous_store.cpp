#include "distributed/rendezvous_store.h"

#if MANTISSA_HAS_REDIS
#include <hiredis/hiredis.h>
#endif

#include <chrono>
#include <cstdarg>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include <gloo/rendezvous/file_store.h>

#include "engine/error.h"

namespace mantissa::distributed::detail {
namespace {

constexpr std::string_view kRedisScheme = "redis://";

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

// The job's part of the key names (rendezvous_store.h).
std::string job_id() {
  std::string job = env_or("MANTISSA_RUN_ID", "");
  if (job.empty()) {
    job = env_or("TORCHELASTIC_RUN_ID", "");
    if (job == "none") job.clear();  // torchrun's default without --rdzv-id
  }
  if (job.empty()) job = env_or("MASTER_ADDR", "localhost") + ":" + env_or("MASTER_PORT", "0");
  return job;
}

// Gloo's FileStore, telling where a key's file is (its name is a hash of the key).
class KeyedFileStore final : public gloo::rendezvous::FileStore {
 public:
  using FileStore::FileStore;
  std::string path_of(const std::string& key) { return objectPath(key); }
};

class FileRendezvousStore final : public RendezvousStore {
 public:
  explicit FileRendezvousStore(const std::string& dir) : dir_(dir) {
    std::filesystem::create_directories(dir);
    store_ = std::make_unique<KeyedFileStore>(dir);
  }
  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(key, data);
  }
  std::vector<char> get(const std::string& key) override { return store_->get(key); }
  void wait(const std::vector<std::string>& keys) override { store_->wait(keys); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    store_->wait(keys, timeout);
  }
  void remove_own_keys() noexcept override {
    // Every rank has read every key once the group has met, so they can all go: a later job
    // meeting in the same directory must not find them.
    try {
      std::error_code ignored;
      for (const std::string& file : store_->getAllKeyFilePaths())
        std::filesystem::remove(file, ignored);
    } catch (...) {
    }
  }
  void remove_key(const std::string& key) noexcept override {
    try {
      std::error_code ignored;
      std::filesystem::remove(store_->path_of(key), ignored);
    } catch (...) {
    }
  }
  std::string describe() const override { return "the file store at '" + dir_ + "'"; }

 private:
  std::string dir_;
  std::unique_ptr<KeyedFileStore> store_;
};

#if MANTISSA_HAS_REDIS
// Gloo's Store over hiredis: SET, GET and a polled EXISTS, under the job's prefix.
class RedisRendezvousStore final : public RendezvousStore {
 public:
  RedisRendezvousStore(const std::string& address, std::string host, int port,
                       std::chrono::milliseconds timeout)
      : address_(address), prefix_("mantissa/" + job_id() + "/"), timeout_(timeout) {
    const timeval connect_timeout{10, 0};
    redis_ = redisConnectWithTimeout(host.c_str(), port, connect_timeout);
    if (redis_ == nullptr || redis_->err) {
      const std::string why = redis_ ? redis_->errstr : "out of memory";
      if (redis_) redisFree(redis_);
      redis_ = nullptr;
      MT_THROW("cannot reach the Redis store ", address_, ": ", why);
    }
  }
  ~RedisRendezvousStore() override {
    if (redis_) redisFree(redis_);
  }

  void set(const std::string& key, const std::vector<char>& data) override {
    const std::string k = prefix_ + key;
    Reply r(command("SET %b %b", k.data(), k.size(), data.data(), data.size()), *this, "SET");
    written_.push_back(k);
  }
  // As Gloo's stores: waits for the key (another rank may not have written it yet).
  std::vector<char> get(const std::string& key) override {
    wait({key}, timeout_);
    const std::string k = prefix_ + key;
    Reply r(command("GET %b", k.data(), k.size()), *this, "GET");
    MT_CHECK(r->type == REDIS_REPLY_STRING, "the Redis store ", address_, " has no key ", k);
    return std::vector<char>(r->str, r->str + r->len);
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      std::string missing;
      for (const std::string& key : keys) {
        const std::string k = prefix_ + key;
        Reply r(command("EXISTS %b", k.data(), k.size()), *this, "EXISTS");
        if (r->type != REDIS_REPLY_INTEGER || r->integer != 1) missing += " " + k;
      }
      if (missing.empty()) return;
      MT_CHECK(std::chrono::steady_clock::now() < deadline, "timed out after ", timeout.count(),
               " ms waiting for keys of the Redis store ", address_,
               " (a rank that never came):", missing);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  void remove_own_keys() noexcept override {
    for (const std::string& k : written_) {
      void* r = redisCommand(redis_, "DEL %b", k.data(), k.size());
      if (r) freeReplyObject(r);
    }
    written_.clear();
  }
  void remove_key(const std::string& key) noexcept override {
    const std::string k = prefix_ + key;
    void* r = redisCommand(redis_, "DEL %b", k.data(), k.size());
    if (r) freeReplyObject(r);
  }
  std::string describe() const override {
    return "the Redis store " + address_ + " (keys " + prefix_ + "*)";
  }

 private:
  redisReply* command(const char* format, ...) {
    va_list args;
    va_start(args, format);
    void* r = redisvCommand(redis_, format, args);
    va_end(args);
    return static_cast<redisReply*>(r);
  }
  // Owns a reply; a failed command or an error reply throws, naming the store.
  class Reply {
   public:
    Reply(redisReply* r, const RedisRendezvousStore& s, const char* what) : r_(r) {
      MT_CHECK(r_ != nullptr, "the Redis store ", s.address_, ": ", what,
               " failed: ", s.redis_->errstr);
      if (r_->type == REDIS_REPLY_ERROR) {
        const std::string message(r_->str, r_->len);
        freeReplyObject(r_);
        r_ = nullptr;
        MT_THROW("the Redis store ", s.address_, ": ", what, " failed: ", message);
      }
    }
    ~Reply() {
      if (r_) freeReplyObject(r_);
    }
    Reply(const Reply&) = delete;
    Reply& operator=(const Reply&) = delete;
    const redisReply* operator->() const { return r_; }

   private:
    redisReply* r_;
  };

  std::string address_, prefix_;
  std::chrono::milliseconds timeout_;
  redisContext* redis_ = nullptr;
  std::vector<std::string> written_;
};
#endif

}  // namespace

bool is_redis_store(const std::string& store) { return store.rfind(kRedisScheme, 0) == 0; }

std::unique_ptr<RendezvousStore> open_rendezvous_store(const std::string& store,
                                                       std::chrono::milliseconds timeout) {
  if (!is_redis_store(store)) return std::make_unique<FileRendezvousStore>(store);
  const std::string rest = store.substr(kRedisScheme.size());
  const size_t colon = rest.rfind(':');
  const std::string host = colon == std::string::npos ? rest : rest.substr(0, colon);
  int port = 6379;
  if (colon != std::string::npos) {
    const std::string p = rest.substr(colon + 1);
    char* end = nullptr;
    const long v = p.empty() ? -1 : std::strtol(p.c_str(), &end, 10);
    MT_CHECK(!p.empty() && end != nullptr && *end == '\0' && v > 0 && v < 65536,
             "init_process_group: a Redis store is redis://HOST:PORT, got '", store, "'");
    port = static_cast<int>(v);
  }
  MT_CHECK(!host.empty() && host.find('/') == std::string::npos,
           "init_process_group: a Redis store is redis://HOST:PORT, got '", store, "'");
#if MANTISSA_HAS_REDIS
  return std::make_unique<RedisRendezvousStore>(store, host, port, timeout);
#else
  MT_THROW("init_process_group: this build of mantissa has no Redis store (", store,
           "): hiredis was not found when it was built (install libhiredis-dev)");
#endif
}

}  // namespace mantissa::distributed::detail
