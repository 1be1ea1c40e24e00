// Kernel launches that overlap with the kernel before them (programmatic dependent launch, sm_90+).
//
// A step is a chain of many short kernels, each depending on the one before it. Launched the plain way,
// every kernel waits for its predecessor to finish and flush before its first block is even scheduled,
// and the GPU idles through each drain and each ramp. Launched with launch_kernel(), a kernel may be
// scheduled while its predecessor's last blocks still run; it must then call wait_for_producers() before
// it touches any memory the kernels before it write or read (activations, scratch, caches) — in practice
// at its very top, or after loading only constant data such as weights. allow_dependents() then lets the
// next kernel be scheduled early in turn. Every kernel launched by launch_kernel() calls both, in every
// block, before any early return: the wait is what makes the chain transitive (a kernel finishes only
// after its wait, so after everything before it).
//
// Kernels launched with <<<>>> or by libraries (cuBLAS, NCCL) and memory copies keep the full ordering;
// the two calls are no-ops in a kernel launched without the attribute. LATTE_PDL=0 turns the overlap off
// (every launch fully ordered), to compare.
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

#include "cuda/check.hpp"

namespace latte::cuda {

/// Blocks until the kernels this one was launched after have finished and their writes are visible.
__device__ __forceinline__ void wait_for_producers() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/// Lets the next kernel of the stream be scheduled (it still waits for this one in wait_for_producers).
__device__ __forceinline__ void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/// Whether launch_kernel() lets kernels overlap their predecessor (default; LATTE_PDL=0: never).
inline bool overlapped_launches() {
  static const bool on = [] {
    const char* v = std::getenv("LATTE_PDL");
    return v == nullptr || std::string_view(v) != "0";
  }();
  return on;
}

/// kernel<<<grid, block, smem, stream>>>(args...), allowed to overlap the previous kernel of the stream
/// (see above: the kernel must call wait_for_producers() before touching dependent memory). Throws
/// latte::Error naming the kernel and the launch shape if the launch fails.
template <class... Params, class... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  // {gridDim, blockDim, dynamicSmemBytes, stream, attrs, numAttrs}, by position: the CPU emulation of the
  // kernels (tests/emulation) defines gridDim and blockDim as macros
  cudaLaunchConfig_t config{grid, block, smem, stream, &attribute, overlapped_launches() ? 1u : 0u};
  const cudaError_t status = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  if (status != cudaSuccess) {
    // name the kernel (its mangled name) and the launch shape, not just this line
    const char* name = nullptr;
    if (cudaFuncGetName(&name, reinterpret_cast<const void*>(kernel)) != cudaSuccess || name == nullptr) {
      name = "?";
    }
    const std::string what = std::string("launch of ") + name + " (grid " + std::to_string(grid.x) + "x" +
                             std::to_string(grid.y) + "x" + std::to_string(grid.z) + ", block " +
                             std::to_string(block.x) + ", " + std::to_string(smem) + " bytes of dynamic shared memory)";
    throw_cuda_error(status, what.c_str(), __FILE__, __LINE__);
  }
}

}  // namespace latte::cuda
