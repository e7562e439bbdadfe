// What a rank of a data-parallel CLI run needs beyond a single-process run: its place in the job
// (from the launcher's environment), the process group options and DDP options of the config's
// `distributed:` section, agreement with rank 0 on strings (the run directory, the checkpoint to
// resume), and the check that every rank ends with the same parameters. See docs/distributed.md.
#pragma once

#include <memory>
#include <string>

#include "amp/grad_scaler.h"
#include "distributed/ddp.h"
#include "distributed/init.h"
#include "distributed/process_group.h"
#include "engine/device.h"
#include "nn/module.h"
#include "runner/config/config.h"

namespace mantissa::runner {

struct RankPlacement {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string launcher;  // "torchrun", "mpirun", "srun" or "" (not started by one)
  bool distributed() const { return world_size > 1; }
};

// This process's place, from distributed::read_launch_env(); rank 0 of 1 without a launcher's
// environment.
RankPlacement rank_placement();

// The backend `auto` means on `device`: NCCL for CUDA devices, else Gloo.
distributed::Backend resolve_backend(const DistributedConfig& config, Device device);
distributed::InitOptions init_options(const DistributedConfig& config, Device device,
                                      const RankPlacement& placement);
nn::DistributedDataParallelOptions ddp_options(const DistributedConfig& config);

// Rank 0's `value`, on every rank (a collective: every rank calls it, in the same order).
std::string broadcast_string(distributed::ProcessGroup& group, const std::string& value);

// Runs on hosts without a shared filesystem. The key of the rendezvous-store note
// (distributed/init.h) in which rank 0 of `mantissa resume` leaves the run's resolved.yaml before
// the ranks connect, for a rank whose host has no run directory; a refusal is "\x01" and why. The
// key names the launch where the launcher numbers them (torchrun's TORCHELASTIC_RESTART_COUNT,
// Slurm's SLURM_JOB_ID and SLURM_RESTART_COUNT), so a restarted job never reads the note of the
// launch before it.
std::string run_config_note_key();

// A collective: makes rank 0's file at its `path` the file at `path` of every rank that has no
// file there (each rank passes its own path; the same one on a shared filesystem). The bytes go
// through the process group in chunks of 48 MiB, to a temporary file renamed into place when
// complete. Returns the number of ranks that received it (0: every rank had it, nothing moved).
int share_file_from_rank0(distributed::ProcessGroup& group, const std::string& path);

// A hash of every parameter's and buffer's values, the delayed float8 scaling state and the
// loss scaler's state when one is given (16 hex digits), compared across ranks: throws
// mantissa::Error naming the ranks when they differ; returns the hash.
std::string check_ranks_agree_on_state(distributed::ProcessGroup& group, nn::Module& model,
                                       const amp::GradScaler* scaler = nullptr);

}  // namespace mantissa::runner
