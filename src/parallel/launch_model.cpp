// One rank of a model per process (see launch_model.hpp).
#include "parallel/launch_model.hpp"

#include <latte/error.hpp>

#include <string>

namespace latte::detail {

ModelLaunch resolve_model_launch(const ModelParams& params, const std::function<const char*(const char*)>& getenv) {
  if (!params.device.is_cuda()) {
    throw Error(ErrorCode::invalid_argument,
                "tensor_parallel_from_launch: device " + params.device.to_string() +
                    " is not a CUDA device; a multi-process model runs one rank per GPU (pass Device::cuda(0): "
                    "each process uses the GPU of its local rank)");
  }
  std::optional<LaunchEnvironment> env = read_launch_environment(getenv);
  if (!env) {
    throw Error(ErrorCode::invalid_argument,
                "tensor_parallel_from_launch: no launch environment: set LATTE_TP_RANK, LATTE_TP_WORLD and "
                "LATTE_TP_ID_FILE (and LATTE_TP_LOCAL_RANK on several hosts), or start the processes with mpirun "
                "(OMPI_COMM_WORLD_* or PMI_* variables) and LATTE_TP_ID_FILE");
  }
  if (params.tensor_parallel != 1 && params.tensor_parallel != env->world_size) {
    throw Error(ErrorCode::invalid_argument,
                "tensor_parallel_from_launch: tensor_parallel = " + std::to_string(params.tensor_parallel) +
                    " but the launch (" + env->source + ") has " + std::to_string(env->world_size) +
                    " processes; leave tensor_parallel at 1 to take the degree from the launch");
  }
  if (env->local_rank < 0) {
    throw Error(ErrorCode::invalid_argument, "tensor_parallel_from_launch: local rank " +
                                                 std::to_string(env->local_rank) + " (" + env->source +
                                                 ") is negative; it names the GPU of this process");
  }
  ModelLaunch out{.env = *env, .tensor_parallel = env->world_size, .device = Device::cuda(env->local_rank)};
  return out;
}

}  // namespace latte::detail
