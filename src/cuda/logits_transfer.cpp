#include "cuda/logits_transfer.hpp"

#include <latte/error.hpp>

#include <cstdint>
#include <string>

namespace latte::cuda {

void copy_logits_to_host(const float* device_logits, int64_t n_rows, int64_t vocab, int64_t device_stride,
                         PinnedBuffer<float>& host, cudaStream_t stream) {
  if (device_logits == nullptr || n_rows < 0 || vocab <= 0 || device_stride < vocab) {
    throw Error(ErrorCode::invalid_argument, "copy_logits_to_host: invalid logits pointer or shape (rows " +
                                                 std::to_string(n_rows) + ", vocab " + std::to_string(vocab) +
                                                 ", stride " + std::to_string(device_stride) + ")");
  }
  const auto needed = static_cast<size_t>(n_rows) * static_cast<size_t>(vocab);
  if (host.size() < needed) {
    throw Error(ErrorCode::invalid_argument, "copy_logits_to_host: host buffer holds " + std::to_string(host.size()) +
                                                 " floats, " + std::to_string(needed) + " needed");
  }
  if (n_rows == 0) return;
  LATTE_CUDA_CHECK(cudaMemcpy2DAsync(host.data(), static_cast<size_t>(vocab) * sizeof(float), device_logits,
                                     static_cast<size_t>(device_stride) * sizeof(float),
                                     static_cast<size_t>(vocab) * sizeof(float), static_cast<size_t>(n_rows),
                                     cudaMemcpyDeviceToHost, stream));
}

}  // namespace latte::cuda
