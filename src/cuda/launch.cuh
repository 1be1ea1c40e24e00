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

#include "core/environment.hpp"
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
  static const bool on = latte::detail::env_flag("LATTE_PDL", true);
  return on;
}

namespace launch_detail {

/// Launches with the overlap attribute (when on) and `extra` attributes; throws latte::Error naming the
/// kernel (its mangled name) and the launch shape, not just this line, if the launch fails.
template <class... Params, class... Args>
void launch_with(cudaLaunchAttribute* extra, unsigned n_extra, void (*kernel)(Params...), dim3 grid, dim3 block,
                 size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attributes[3]{};
  unsigned n = 0;
  if (overlapped_launches()) {
    attributes[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  for (unsigned i = 0; i < n_extra && n < 3; ++i) attributes[n++] = extra[i];
  // {gridDim, blockDim, dynamicSmemBytes, stream, attrs, numAttrs}, by position: the CPU emulation of the
  // kernels (tests/emulation) defines gridDim and blockDim as macros
  cudaLaunchConfig_t config{grid, block, smem, stream, attributes, n};
  const cudaError_t status = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  if (status != cudaSuccess) {
    const char* name = nullptr;
    if (cudaFuncGetName(&name, reinterpret_cast<const void*>(kernel)) != cudaSuccess || name == nullptr) {
      name = "?";
    }
    const std::string what = std::string("launch of ") + name + " (grid " + std::to_string(grid.x) + "x" +
                             std::to_string(grid.y) + "x" + std::to_string(grid.z) + ", block " +
                             std::to_string(block.x) + ", " + std::to_string(smem) + " bytes of dynamic shared memory" +
                             (n_extra > 0 ? ", in clusters" : "") + ")";
    throw_cuda_error(status, what.c_str(), __FILE__, __LINE__);
  }
}

}  // namespace launch_detail

/// kernel<<<grid, block, smem, stream>>>(args...), allowed to overlap the previous kernel of the stream
/// (see above: the kernel must call wait_for_producers() before touching dependent memory). Throws
/// latte::Error naming the kernel and the launch shape if the launch fails.
template <class... Params, class... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  launch_detail::launch_with(nullptr, 0, kernel, grid, block, smem, stream, std::forward<Args>(args)...);
}

/// launch_kernel() in thread-block clusters of `cluster` CTAs along each axis (sm_90 and later; each grid
/// dimension a multiple of the cluster's). The cluster's CTAs run at the same time and may meet at
/// cluster barriers and read each other's shared memory (cluster.cuh).
template <class... Params, class... Args>
void launch_kernel_cluster(void (*kernel)(Params...), dim3 grid, dim3 cluster, dim3 block, size_t smem,
                           cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = cluster.x;
  attribute.val.clusterDim.y = cluster.y;
  attribute.val.clusterDim.z = cluster.z;
  launch_detail::launch_with(&attribute, 1, kernel, grid, block, smem, stream, std::forward<Args>(args)...);
}

}  // namespace latte::cuda
