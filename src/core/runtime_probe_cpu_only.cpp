// Without the CUDA backend there are no CUDA devices. (With it, src/cuda/runtime_probe.cpp is built.)
#ifndef LATTE_WITH_CUDA
#include "cuda/runtime_probe.hpp"

namespace latte::cuda {

int probe_device_count() noexcept { return 0; }

}  // namespace latte::cuda
#endif
