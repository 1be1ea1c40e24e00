// How a multi-process tensor-parallel launch tells each process who it is, and how the ranks share
// the NCCL unique id without a transport of their own: rank 0 writes it to a file every rank can
// read (a shared filesystem across hosts), the others wait for the file.
//
//   LATTE_TP_RANK / LATTE_TP_WORLD / LATTE_TP_ID_FILE [/ LATTE_TP_LOCAL_RANK]   explicit launch
//   OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK                                 Open MPI's mpirun
//   PMI_RANK / PMI_SIZE [/ MPI_LOCALRANKID]                                    MPICH / Intel MPI (Hydra)
// With an MPI launcher LATTE_TP_ID_FILE still names the id file.
//
//   auto env = latte::detail::read_launch_environment();   // nullopt: not a multi-process launch
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace latte::detail {

/// One process's place in a multi-process launch.
struct LaunchEnvironment {
  int rank = 0;           ///< global rank, 0 <= rank < world_size
  int world_size = 1;     ///< processes in the group
  int local_rank = 0;     ///< rank among the processes of this host: the GPU it uses
  std::string id_file{};  ///< where rank 0 publishes the NCCL unique id
  std::string source{};   ///< which variables were used ("LATTE_TP", "Open MPI", "PMI")
};

/// Reads the variables above through `getenv` (std::getenv by default). Returns nullopt when no
/// rank variable is set. Throws Error(invalid_argument) naming the variable for a malformed or
/// inconsistent value (rank outside [0, world), world < 1, a missing LATTE_TP_ID_FILE).
std::optional<LaunchEnvironment> read_launch_environment(
    const std::function<const char*(const char*)>& getenv = nullptr);

/// Writes `id` to `path` atomically (a temporary file in the same directory, then a rename), so
/// a reader never sees a partial id. Throws Error(io) naming the path.
void publish_unique_id(const std::string& path, std::span<const std::byte> id);

/// Waits until `path` holds exactly `size` bytes and returns them. Throws Error(device) naming the
/// path after `timeout` (rank 0 never published), Error(invalid_file) for a file of another size.
std::vector<std::byte> wait_for_unique_id(const std::string& path, size_t size, std::chrono::milliseconds timeout);

}  // namespace latte::detail
