#include "cuda/check.hpp"

#include <filesystem>

namespace latte::cuda {

void throw_cuda_error(cudaError_t status, const char* what, const char* file, int line) {
  cudaGetLastError();  // clear non-sticky errors so the caller can continue after catching
  const std::string where = std::filesystem::path(file).filename().string() + ":" + std::to_string(line);
  const std::string message = std::string("CUDA error ") + cudaGetErrorName(status) + " (" +
                              cudaGetErrorString(status) + ") in " + what + " at " + where;
  throw Error(status == cudaErrorMemoryAllocation ? ErrorCode::out_of_memory : ErrorCode::device, message);
}

}  // namespace latte::cuda
