// The shared, immutable state behind latte::Model: the mapped file, its config, audit and views.
#pragma once

#include "model/weights.hpp"

#include <latte/error.hpp>
#include <latte/gguf.hpp>
#include <latte/model.hpp>
#include <latte/tokenizer.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace latte::cuda {
class DeviceWeights;
struct TensorParallelDevices;
}  // namespace latte::cuda

namespace latte::detail {

struct TensorParallelModel;

struct ModelState {
  ModelState(gguf::File f, Device d) : file(std::move(f)), device(d) {}

  gguf::File file;  ///< owns the mapping every TensorView points into
  ModelConfig config{};
  WeightAudit audit{};
  ModelWeights weights{};  ///< views into `file`
  Device device;
  std::shared_ptr<const cuda::DeviceWeights> device_weights{};  ///< CUDA models: the uploaded weights
  std::optional<Tokenizer> tokenizer{};                         ///< when the file has a usable tokenizer
  Error tokenizer_error{ErrorCode::not_found, ""};              ///< why `tokenizer` is empty
  /// The plan and per-rank shards when loaded with tensor_parallel > 1 (parallel/tensor_parallel_model.hpp).
  std::shared_ptr<const TensorParallelModel> tensor_parallel{};
  /// CUDA models with tensor_parallel > 1: each rank's shard on its GPU and the NCCL group
  /// (cuda/tensor_parallel_cuda.hpp); device_weights is then empty.
  std::shared_ptr<cuda::TensorParallelDevices> cuda_tensor_parallel{};
  uint64_t fingerprint = 0;  ///< model_fingerprint(file), see model/fingerprint.hpp
};

}  // namespace latte::detail
