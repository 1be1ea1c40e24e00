// Thread-block clusters (sm_90 and later): a CTA's rank in its cluster, the barrier over all the cluster's
// threads, and loads from another CTA's shared memory (distributed shared memory). A kernel that uses them
// is launched with launch_kernel_cluster() (launch.cuh). The CPU emulation of the kernels has a twin of
// this header (tests/emulation/include/cuda/cluster.cuh) with the same functions.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace latte::cuda::cluster {

/// This CTA's rank in its cluster: x + y * dim.x + z * dim.x * dim.y of its position in the cluster.
__device__ __forceinline__ unsigned rank() {
  unsigned r = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
#endif
  return r;
}

/// Every thread of every CTA of the cluster waits here for all the others. Shared-memory writes made before
/// it, in any CTA of the cluster, are visible to loads made after it (release on arrival, acquire on wait).
/// Every thread must reach it (it is `.aligned`: all of a warp's threads at once).
__device__ __forceinline__ void sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}

/// The shared::cluster address of `local` (an address of this CTA's shared memory) in CTA `target`'s.
__device__ __forceinline__ uint32_t remote_address(const void* local, unsigned target) {
  uint32_t remote = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(local));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(address), "r"(target));
#endif
  return remote;
}

/// The float at `local`'s offset in CTA `target`'s shared memory.
__device__ __forceinline__ float load(const float* local, unsigned target) {
  float v = 0.0f;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote_address(local, target)) : "memory");
#endif
  return v;
}

/// The float4 at `local`'s offset (16-byte aligned) in CTA `target`'s shared memory.
__device__ __forceinline__ float4 load(const float4* local, unsigned target) {
  float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(remote_address(local, target))
               : "memory");
#endif
  return v;
}

}  // namespace latte::cuda::cluster
