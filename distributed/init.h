// Starting a data-parallel job: who am I (the launcher's environment), where do the ranks meet
// (a store), and the default process group. See docs/distributed.md.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "distributed/process_group.h"

namespace mantissa::distributed {

enum class Backend { Gloo, Nccl };
// Where the ranks meet. File: a directory every rank sees (one host, or a shared filesystem).
// Mpi: MPI collectives between the processes mpirun started (any hosts; needs a build with MPI).
// Auto: Mpi when mpirun started this process (OMPI_COMM_WORLD_RANK is set) and this build has
// MPI, else File.
enum class Rendezvous { Auto, File, Mpi };
const char* rendezvous_name(Rendezvous rendezvous);
// Whether this build of mantissa can meet through MPI (MPI and Gloo found at configure time).
bool has_mpi_rendezvous();
const char* backend_name(Backend backend);
// Whether this build of mantissa has the backend (Gloo: found at configure time; NCCL: a CUDA
// build that found NCCL).
bool is_available(Backend backend);

// This process's place in the job, as its launcher described it. Read from, in this order of
// precedence: torchrun's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE; mpirun's
// OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE; srun's SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID, SLURM_NTASKS_PER_NODE. MASTER_ADDR and MASTER_PORT are read as torchrun sets
// them. A value that is missing stays empty; one that is not a number throws.
struct LaunchEnv {
  std::optional<int> rank;
  std::optional<int> world_size;
  std::optional<int> local_rank;
  std::optional<int> local_world_size;
  std::string master_addr;
  std::optional<int> master_port;
  std::string launcher;  // "torchrun", "mpirun", "srun" or "" (the source of rank/world_size)
};
LaunchEnv read_launch_env();

struct InitOptions {
  Backend backend = Backend::Gloo;
  // Explicit values override the launcher's environment.
  std::optional<int> rank;
  std::optional<int> world_size;
  std::optional<int> local_rank;
  std::optional<int> local_world_size;
  Rendezvous rendezvous = Rendezvous::Auto;
  // The store the ranks meet in (unused under MPI rendezvous): the directory of a file store,
  // which every rank must see (a shared filesystem when the job spans hosts), or a Redis server
  // every host reaches, redis://HOST:PORT (distributed/rendezvous_store.h: keys under
  // "mantissa/<job>/", the job from MANTISSA_RUN_ID, TORCHELASTIC_RUN_ID or MASTER_ADDR:PORT).
  // Empty: MANTISSA_STORE_PATH, else a directory under the system temporary directory named
  // after MASTER_ADDR and MASTER_PORT.
  std::string store_path;
  // The address other ranks reach this one at (Gloo's TCP transport). Empty: 127.0.0.1 when
  // every rank runs on this host, else this host's name.
  std::string hostname;
  // A network interface to use instead of `hostname` (GLOO_SOCKET_IFNAME when empty).
  std::string iface;
  // The most a collective, or the rendezvous, may take.
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
};

// Meets the other ranks (options.rendezvous), connects them and makes the result the default
// group. Throws when this build lacks the backend, when rank or world size are unknown or out
// of range, or when the other ranks do not arrive at a file store within the timeout. Under MPI
// rendezvous, rank and world size are MPI_COMM_WORLD's (explicit ones must agree), and MPI is
// initialised here unless the program did it (mantissa then finalises it at exit).
std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& options = {});
bool is_initialized();

// The store init_process_group would meet in for these options: options.store_path, else
// MANTISSA_STORE_PATH, else the directory named after MASTER_ADDR and MASTER_PORT; "" under MPI
// rendezvous (or rendezvous auto under mpirun). Throws as init_process_group does when there is
// none.
std::string rendezvous_store(const InitOptions& options = {});

// Notes rank 0 leaves in that store before the ranks connect, for ranks that need something from
// it to build their part of the job (`mantissa resume` on a host without the run directory takes
// the run's config this way). read_rendezvous_note waits up to options.timeout for the key;
// remove_rendezvous_note deletes it and never throws. Under MPI rendezvous there is no store:
// throws mantissa::Error, as for an unreachable store.
void post_rendezvous_note(const InitOptions& options, const std::string& key,
                          const std::string& value);
std::string read_rendezvous_note(const InitOptions& options, const std::string& key);
void remove_rendezvous_note(const InitOptions& options, const std::string& key) noexcept;
// The group init_process_group() made; throws when there is none.
std::shared_ptr<ProcessGroup> default_group();
// Forgets the default group (its connections close when the last reference goes).
void destroy_process_group();

}  // namespace mantissa::distributed
