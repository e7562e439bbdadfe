#include "distributed/init.h"

#include <cstdlib>
#include <filesystem>
#include <mutex>

#include <signal.h>
#include <unistd.h>

#include "distributed/backends.h"
#if MANTISSA_HAS_GLOO
#include "distributed/rendezvous_store.h"
#endif
#include "engine/error.h"

namespace mantissa::distributed {
namespace {

std::optional<int> env_int(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  char* end = nullptr;
  const long parsed = std::strtol(value, &end, 10);
  MT_CHECK(*end == '\0' && parsed >= 0 && parsed <= (1L << 30), "init_process_group: environment ",
           "variable ", name, "='", value, "' is not a non-negative integer");
  return static_cast<int>(parsed);
}

std::string env_string(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

// SLURM_NTASKS_PER_NODE may read "4(x2)"; only its leading number is the local world size.
std::optional<int> slurm_tasks_per_node() {
  const std::string value = env_string("SLURM_NTASKS_PER_NODE");
  if (value.empty() || value.find_first_of(",(") != std::string::npos) return std::nullopt;
  return env_int("SLURM_NTASKS_PER_NODE");
}

std::mutex g_default_mutex;
std::shared_ptr<ProcessGroup> g_default_group;

Rendezvous resolve_rendezvous(Rendezvous rendezvous) {
  if (rendezvous != Rendezvous::Auto) return rendezvous;
  return has_mpi_rendezvous() && env_int("OMPI_COMM_WORLD_RANK").has_value() ? Rendezvous::Mpi
                                                                             : Rendezvous::File;
}

// The store of a file (or Redis) rendezvous; "" under MPI.
std::string store_for(const InitOptions& options, const LaunchEnv& env, Rendezvous rendezvous) {
  std::string store_path = options.store_path;
  if (store_path.empty()) store_path = env_string("MANTISSA_STORE_PATH");
  if (store_path.empty() && rendezvous == Rendezvous::File) {
    MT_CHECK(env.master_port.has_value(), "init_process_group: no store to meet in: set ",
             "InitOptions::store_path or MANTISSA_STORE_PATH (a directory every rank sees), or ",
             "MASTER_PORT");
    const std::string addr = env.master_addr.empty() ? "localhost" : env.master_addr;
    store_path = (std::filesystem::temp_directory_path() /
                  ("mantissa-store-" + addr + "-" + std::to_string(*env.master_port)))
                     .string();
  }
  return store_path;
}

}  // namespace

const char* backend_name(Backend backend) { return backend == Backend::Gloo ? "gloo" : "nccl"; }

const char* rendezvous_name(Rendezvous rendezvous) {
  switch (rendezvous) {
    case Rendezvous::Auto:
      return "auto";
    case Rendezvous::File:
      return "file";
    case Rendezvous::Mpi:
      return "mpi";
  }
  return "?";
}

bool has_mpi_rendezvous() { return MANTISSA_HAS_MPI != 0; }

bool is_available(Backend backend) {
  if (backend == Backend::Gloo) return MANTISSA_HAS_GLOO != 0;
  return MANTISSA_HAS_NCCL != 0;
}

LaunchEnv read_launch_env() {
  LaunchEnv env;
  if (env_int("RANK") || env_int("WORLD_SIZE")) {
    env.launcher = "torchrun";
    env.rank = env_int("RANK");
    env.world_size = env_int("WORLD_SIZE");
    env.local_rank = env_int("LOCAL_RANK");
    env.local_world_size = env_int("LOCAL_WORLD_SIZE");
  } else if (env_int("OMPI_COMM_WORLD_RANK")) {
    env.launcher = "mpirun";
    env.rank = env_int("OMPI_COMM_WORLD_RANK");
    env.world_size = env_int("OMPI_COMM_WORLD_SIZE");
    env.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK");
    env.local_world_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE");
  } else if (env_int("SLURM_PROCID")) {
    env.launcher = "srun";
    env.rank = env_int("SLURM_PROCID");
    env.world_size = env_int("SLURM_NTASKS");
    env.local_rank = env_int("SLURM_LOCALID");
    env.local_world_size = slurm_tasks_per_node();
  }
  env.master_addr = env_string("MASTER_ADDR");
  env.master_port = env_int("MASTER_PORT");
  return env;
}

std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& options) {
  const char* backend = backend_name(options.backend);
  MT_CHECK(is_available(options.backend), "init_process_group: this build of mantissa has no ",
           backend, " backend (",
           options.backend == Backend::Gloo
               ? "Gloo was not found when it was configured; install libgloo-dev and reconfigure"
               : "NCCL needs a CUDA build that found nccl.h and libnccl",
           ")");
  const LaunchEnv env = read_launch_env();
  const Rendezvous rendezvous = resolve_rendezvous(options.rendezvous);
  MT_CHECK(rendezvous != Rendezvous::Mpi || has_mpi_rendezvous(),
           "init_process_group: this build of mantissa has no MPI rendezvous (MPI was not found ",
           "when it was configured, or MANTISSA_MPI=OFF; install libopenmpi-dev and reconfigure)");
  std::optional<int> rank = options.rank ? options.rank : env.rank;
  std::optional<int> world_size = options.world_size ? options.world_size : env.world_size;
  if (rendezvous == Rendezvous::Mpi) {
    // The ranks meet in MPI_COMM_WORLD, so its numbering is the job's.
    const auto [mpi_rank, mpi_size] = detail::mpi_world();
    MT_CHECK((!rank || *rank == mpi_rank) && (!world_size || *world_size == mpi_size),
             "init_process_group: rank ", rank.value_or(-1), " of ", world_size.value_or(-1),
             " disagrees with MPI's rank ", mpi_rank, " of ", mpi_size,
             " (MPI rendezvous numbers the ranks as MPI_COMM_WORLD does)");
    rank = mpi_rank;
    world_size = mpi_size;
  }
  MT_CHECK(rank && world_size, "init_process_group: rank and world size are unknown: set them in ",
           "the options or start the process with torchrun (RANK, WORLD_SIZE), mpirun or srun");
  MT_CHECK(*world_size >= 1 && *rank >= 0 && *rank < *world_size, "init_process_group: rank ",
           *rank, " is out of range for world size ", *world_size);
  const int local_rank = options.local_rank ? *options.local_rank : env.local_rank.value_or(0);
  const int local_world_size = options.local_world_size
                                   ? *options.local_world_size
                                   : env.local_world_size.value_or(*world_size);
  MT_CHECK(options.timeout.count() > 0, "init_process_group: expected a positive timeout, got ",
           options.timeout.count(), " ms");

  const std::string store_path = store_for(options, env, rendezvous);
  std::string iface = options.iface.empty() ? env_string("GLOO_SOCKET_IFNAME") : options.iface;
  std::string hostname = options.hostname;
  if (hostname.empty() && iface.empty()) {
    if (local_world_size == *world_size) {
      hostname = "127.0.0.1";
    } else {
      char name[256] = {};
      MT_CHECK(gethostname(name, sizeof(name) - 1) == 0,
               "init_process_group: gethostname failed; set InitOptions::hostname");
      hostname = name;
    }
  }

  // A write to the socket of a rank that died raises SIGPIPE, whose default action would kill
  // this rank silently instead of letting the collective fail with an error.
  struct sigaction current = {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL)
    signal(SIGPIPE, SIG_IGN);

  std::shared_ptr<ProcessGroup> group;
  if (options.backend == Backend::Gloo)
    group = detail::make_gloo_group(*rank, *world_size, rendezvous, store_path, hostname, iface,
                                    options.timeout);
  else
    group = detail::make_nccl_group(*rank, *world_size, local_rank, rendezvous, store_path,
                                    options.timeout);
  std::lock_guard<std::mutex> lock(g_default_mutex);
  g_default_group = group;
  return group;
}

std::string rendezvous_store(const InitOptions& options) {
  const Rendezvous rendezvous = resolve_rendezvous(options.rendezvous);
  if (rendezvous == Rendezvous::Mpi) return {};
  return store_for(options, read_launch_env(), rendezvous);
}

namespace {

#if MANTISSA_HAS_GLOO
// The store of `options`, opened; whatever fails is a mantissa::Error naming the note.
std::unique_ptr<detail::RendezvousStore> note_store(const InitOptions& options,
                                                    const std::string& key) {
  std::string store;
  try {
    store = rendezvous_store(options);
    MT_CHECK(!store.empty(),
             "MPI rendezvous has no store to leave it in (use a file or Redis store)");
    return detail::open_rendezvous_store(store, options.timeout);
  } catch (const std::exception& e) {
    MT_THROW("rendezvous note '", key, "'", store.empty() ? "" : " in '" + store + "'", ": ",
             e.what());
  }
}
#endif

}  // namespace

void post_rendezvous_note(const InitOptions& options, const std::string& key,
                          const std::string& value) {
#if MANTISSA_HAS_GLOO
  const auto store = note_store(options, key);
  try {
    // A file store refuses to overwrite a key: one left by an earlier job goes first.
    store->remove_key(key);
    store->set(key, std::vector<char>(value.begin(), value.end()));
  } catch (const std::exception& e) {
    MT_THROW("cannot leave the note '", key, "' in ", store->describe(), ": ", e.what());
  }
#else
  MT_THROW("rendezvous note '", key, "': this build of mantissa has no Gloo (no store)");
#endif
}

std::string read_rendezvous_note(const InitOptions& options, const std::string& key) {
#if MANTISSA_HAS_GLOO
  const auto store = note_store(options, key);
  try {
    store->wait({key}, options.timeout);
    const std::vector<char> v = store->get(key);
    return std::string(v.begin(), v.end());
  } catch (const std::exception& e) {
    MT_THROW("no note '", key, "' from rank 0 in ", store->describe(), " within ",
             options.timeout.count(), " ms: ", e.what());
  }
#else
  MT_THROW("rendezvous note '", key, "': this build of mantissa has no Gloo (no store)");
#endif
}

void remove_rendezvous_note(const InitOptions& options, const std::string& key) noexcept {
#if MANTISSA_HAS_GLOO
  try {
    note_store(options, key)->remove_key(key);
  } catch (...) {
  }
#else
  (void)options;
  (void)key;
#endif
}

bool is_initialized() {
  std::lock_guard<std::mutex> lock(g_default_mutex);
  return g_default_group != nullptr;
}

std::shared_ptr<ProcessGroup> default_group() {
  std::lock_guard<std::mutex> lock(g_default_mutex);
  MT_CHECK(g_default_group != nullptr,
           "distributed: no default process group; call init_process_group() first");
  return g_default_group;
}

void destroy_process_group() {
  std::lock_guard<std::mutex> lock(g_default_mutex);
  g_default_group.reset();
}

#if !MANTISSA_HAS_GLOO
namespace detail {
std::shared_ptr<ProcessGroup> make_gloo_group(int, int, Rendezvous, const std::string&,
                                              const std::string&, const std::string&,
                                              std::chrono::milliseconds) {
  MT_THROW("init_process_group: this build of mantissa has no gloo backend");
}
}  // namespace detail
#endif
#if !MANTISSA_HAS_NCCL
namespace detail {
std::shared_ptr<ProcessGroup> make_nccl_group(int, int, int, Rendezvous, const std::string&,
                                              std::chrono::milliseconds) {
  MT_THROW("init_process_group: this build of mantissa has no nccl backend");
}
}  // namespace detail
#endif
#if !MANTISSA_HAS_MPI
namespace detail {
std::pair<int, int> mpi_world() {
  MT_THROW("init_process_group: this build of mantissa has no MPI rendezvous");
}
std::vector<char> mpi_broadcast_bytes(std::vector<char>, int) {
  MT_THROW("init_process_group: this build of mantissa has no MPI rendezvous");
}
}  // namespace detail
#endif

}  // namespace mantissa::distributed
