// Loading one rank of a tensor-parallel model per process (ModelParams::tensor_parallel_from_launch):
// which rank, how many, and which GPU, from the launch variables (launch_environment.hpp), checked
// against the load parameters before anything is read.
//
//   auto launch = latte::detail::resolve_model_launch(params);   // throws when the launch is unusable
//   // launch.env.rank of launch.env.world_size, on Device::cuda(launch.env.local_rank)
#pragma once

#include "parallel/launch_environment.hpp"

#include <latte/model.hpp>

#include <functional>

namespace latte::detail {

/// This process's part of a multi-process model load.
struct ModelLaunch {
  LaunchEnvironment env{};  ///< rank, world, local rank (its GPU) and the id file
  int tensor_parallel = 1;  ///< the degree: env.world_size
  Device device{};          ///< Device::cuda(env.local_rank)
};

/// Resolves params.tensor_parallel_from_launch against the launch variables read through `getenv`
/// (std::getenv by default). Throws Error(invalid_argument) when the device is not CUDA, when no
/// launch variables are set, when params.tensor_parallel is neither 1 nor the launch's world size,
/// and as read_launch_environment for malformed variables. Does not look at GPUs or NCCL.
ModelLaunch resolve_model_launch(const ModelParams& params,
                                 const std::function<const char*(const char*)>& getenv = nullptr);

}  // namespace latte::detail
