// The store ranks meet in before a Gloo or NCCL group connects (Gloo's rendezvous::Store): a
// directory every rank sees (Gloo's FileStore; a shared filesystem across hosts), or a Redis
// server every host reaches, `redis://HOST:PORT` (no shared filesystem needed).
//
// In Redis, a job's keys live under "mantissa/<job>/", <job> being MANTISSA_RUN_ID, else
// torchrun's TORCHELASTIC_RUN_ID (its --rdzv-id), else MASTER_ADDR:MASTER_PORT, so that jobs
// sharing a server do not meet each other. Each rank deletes the keys it wrote once the group
// has met (and when meeting fails), so the next job with the same <job> starts clean.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

namespace mantissa::distributed::detail {

bool is_redis_store(const std::string& store);

// A store that can forget the keys this process wrote to it.
class RendezvousStore : public gloo::rendezvous::Store {
 public:
  // Removes what this process wrote (a file store: every key file, as each rank has read them
  // all once the group has met). Never throws.
  virtual void remove_own_keys() noexcept = 0;
  // Removes `key` (whoever wrote it). Never throws.
  virtual void remove_key(const std::string& key) noexcept = 0;
  // Where the ranks meet, for messages: the directory or the redis:// address and key prefix.
  virtual std::string describe() const = 0;
};

// Opens `store` (a directory, created if missing, or redis://HOST:PORT); a Redis store's get and
// wait give up after `timeout`. Throws mantissa::Error naming it when a Redis server cannot be
// reached or the address is malformed.
std::unique_ptr<RendezvousStore> open_rendezvous_store(const std::string& store,
                                                       std::chrono::milliseconds timeout);

}  // namespace mantissa::distributed::detail
