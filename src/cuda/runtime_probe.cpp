#include "cuda/runtime_probe.hpp"

#include <cuda_runtime.h>

namespace latte::cuda {

int probe_device_count() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" / "no device" error
    return 0;
  }
  return count;
}

}  // namespace latte::cuda
