#include "cuda/device_buffer.hpp"

namespace latte::cuda {

void* device_alloc(size_t bytes, const char* what) {
  if (bytes == 0) return nullptr;
  void* ptr = nullptr;
  const cudaError_t status = cudaMalloc(&ptr, bytes);
  if (status != cudaSuccess) {
    cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    constexpr double mib = 1024.0 * 1024.0;
    throw Error(status == cudaErrorMemoryAllocation ? ErrorCode::out_of_memory : ErrorCode::device,
                std::string("cannot allocate ") + std::to_string(static_cast<double>(bytes) / mib) + " MiB for " +
                    what + " on the GPU (" + std::to_string(static_cast<double>(free_bytes) / mib) + " MiB free of " +
                    std::to_string(static_cast<double>(total_bytes) / mib) + " MiB): " + cudaGetErrorString(status));
  }
  return ptr;
}

void device_free(void* ptr) noexcept {
  if (ptr) cudaFree(ptr);
}

}  // namespace latte::cuda
