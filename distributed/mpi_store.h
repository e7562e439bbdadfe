// A Gloo rendezvous store whose keys travel by MPI collectives, for ranks started by mpirun:
// no shared filesystem and no listening port of its own. Internal: not installed.
#pragma once

#include <gloo/rendezvous/store.h>
#include <mpi.h>

#include <map>
#include <string>
#include <vector>

namespace mantissa::distributed::detail {

// set() is collective: every rank of MPI_COMM_WORLD calls it, in the same order, and every
// rank's (key, value) pair reaches every rank (one MPI_Allgatherv). get() and wait() then read
// the pairs already here and never communicate, so ranks may call them any number of times.
// That is exactly Gloo's connectFullMesh: each rank sets its host name, then its pair
// addresses, and reads the others' only after each set. A key that is not here after its set
// round throws instead of waiting for a round no other rank would join.
class MpiStore final : public gloo::rendezvous::Store {
 public:
  MpiStore();  // initialises MPI if needed; collective (duplicates MPI_COMM_WORLD)
  ~MpiStore() override;
  MpiStore(const MpiStore&) = delete;
  MpiStore& operator=(const MpiStore&) = delete;

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::map<std::string, std::vector<char>> values_;
};

}  // namespace mantissa::distributed::detail
