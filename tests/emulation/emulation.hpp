// CPU emulation of the subset of CUDA the attention kernels use, so that the kernels' own source runs
// (slowly) on a machine without a GPU. Force-included (-include) into every translation unit of the
// emulation build. Each CTA runs as cooperative fibers, one per CUDA thread; __syncthreads and warp
// collectives (shuffles, ldmatrix, mma) are rendezvous points between them. Global memory is host
// memory (cudaMalloc -> malloc), so AddressSanitizer sees out-of-bounds accesses.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <utility>

#undef __shared__
#define __shared__ static  // function-local statics: CTAs run one after another
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif
#ifndef __noinline__
#define __noinline__  // an optimisation hint on the GPU; empty keeps `__attribute__((__noinline__))` valid
#endif

namespace emu {

uint3 thread_idx();
uint3 block_idx();
dim3 block_dim();
dim3 grid_dim();
void syncthreads();
void* dynamic_smem();

/// Warp rendezvous: every live lane of the current warp deposits `in`, then `compute(lane, get)` runs
/// on each lane with get(l) returning lane l's deposit. Requires all lanes of the warp to call it.
void warp_barrier();
int lane_id();
void* warp_slot(int lane);  // 64 bytes per lane

template <class In, class Compute>
auto warp_collective(const In& in, Compute compute) {
  static_assert(sizeof(In) <= 64);
  std::memcpy(warp_slot(lane_id()), &in, sizeof(In));
  warp_barrier();
  auto get = [](int lane) {
    In v;
    std::memcpy(&v, warp_slot(lane), sizeof(In));
    return v;
  };
  auto out = compute(lane_id(), get);
  warp_barrier();
  return out;
}

template <class T>
T shfl_xor(T value, int offset) {
  return warp_collective(value, [offset](int lane, auto get) { return get(lane ^ offset); });
}

template <class T>
T shfl(T value, int src) {
  return warp_collective(value, [src](int, auto get) { return get(src & 31); });
}

template <class T>
T shfl_down(T value, int delta) {
  return warp_collective(value,
                         [delta](int lane, auto get) { return lane + delta < 32 ? get(lane + delta) : get(lane); });
}

inline int any(int predicate) {
  return warp_collective(predicate != 0, [](int, auto get) {
    for (int l = 0; l < 32; ++l) {
      if (get(l)) return 1;
    }
    return 0;
  });
}

inline unsigned ballot(int predicate) {
  return warp_collective(predicate != 0, [](int, auto get) {
    unsigned mask = 0;
    for (int l = 0; l < 32; ++l) mask |= get(l) ? 1u << l : 0u;
    return mask;
  });
}

struct LaunchConfig {
  dim3 grid;
  dim3 block;
  size_t smem = 0;
  cudaStream_t stream = nullptr;
};

void run_grid(const LaunchConfig& config, const std::function<void()>& body);
/// Runs every CTA of the grid at once (their threads interleaved): a cooperative launch, whose CTAs may
/// wait for each other (grid barriers).
void run_grid_concurrent(const LaunchConfig& config, const std::function<void()>& body);
/// Runs the grid one thread-block cluster (`cluster` CTAs along each axis) at a time, the CTAs of a cluster
/// at once (their threads interleaved), so that they can meet at cluster barriers and read each other's
/// shared memory.
void run_grid_clusters(const LaunchConfig& config, dim3 cluster, const std::function<void()>& body);
/// The current CTA's rank in its cluster, the barrier over every thread of the cluster, and the address
/// of `local` (in the current CTA's dynamic shared memory) in the dynamic shared memory of CTA `rank`.
unsigned cluster_rank();
void cluster_sync();
void* cluster_map(const void* local, unsigned rank);

/// Lets the other threads run (a thread spinning on memory another thread will write).
void yield_now();
/// Barrier `id` over `count` threads of the current CTA.
void named_barrier(int id, int count);
/// Counts an event for the deadlock detector (an arrival somewhere another thread may wait for).
void progress();

template <class... KernelArgs, class... Args>
void launch(const LaunchConfig& config, void (*kernel)(KernelArgs...), Args&&... args) {
  run_grid(config, [&] { kernel(args...); });
}

/// cudaLaunchKernelEx stand-in (src/cuda/launch.cuh launches every kernel with it): the launch
/// attributes, programmatic dependent launch among them, change nothing here, where grids run one after
/// another and griddepcontrol compiles to nothing.
template <class... KernelArgs, class... Args>
cudaError_t launch_ex(const cudaLaunchConfig_t* config, void (*kernel)(KernelArgs...), Args&&... args) {
  const LaunchConfig c{config->gridDim, config->blockDim, config->dynamicSmemBytes, config->stream};
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    if (config->attrs[i].id == cudaLaunchAttributeCooperative && config->attrs[i].val.cooperative) {
      run_grid_concurrent(c, [&] { kernel(args...); });
      return cudaSuccess;
    }
    if (config->attrs[i].id == cudaLaunchAttributeClusterDimension) {
      const auto& d = config->attrs[i].val.clusterDim;
      if (c.grid.x % d.x != 0 || c.grid.y % d.y != 0 || c.grid.z % d.z != 0) return cudaErrorInvalidValue;
      run_grid_clusters(c, dim3(d.x, d.y, d.z), [&] { kernel(args...); });
      return cudaSuccess;
    }
  }
  launch(c, kernel, std::forward<Args>(args)...);
  return cudaSuccess;
}

// Asynchronous copies: eager (copy at issue) or lazy (copy when a wait needs it), chosen with
// LATTE_EMU_CP_ASYNC=eager|lazy, to expose both write-after-read and read-after-write hazards.
void cp_async(void* dst, const void* src, int bytes, int src_bytes);
void cp_async_commit();
void cp_async_wait(int pending);

// Runtime API stand-ins.
cudaError_t malloc_device(void** ptr, size_t bytes);
cudaError_t free_device(void* ptr);
cudaError_t mem_get_info(size_t* free_bytes, size_t* total_bytes);
cudaError_t get_device_attribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t get_device_properties(cudaDeviceProp* prop, int device);  // an H200-like device
/// cudaOccupancyMaxActiveClusters stand-in: one CTA per SM, every SM usable (the SM count / cluster size).
cudaError_t max_active_clusters(int* clusters, const cudaLaunchConfig_t* config);

}  // namespace emu

#define threadIdx (::emu::thread_idx())
#define blockIdx (::emu::block_idx())
#define blockDim (::emu::block_dim())
#define gridDim (::emu::grid_dim())
#define __syncthreads() ::emu::syncthreads()
#define __shfl_xor_sync(mask, value, offset) ::emu::shfl_xor((value), (offset))
#define __shfl_down_sync(mask, value, delta) ::emu::shfl_down((value), (delta))
#define __shfl_sync(mask, value, src) ::emu::shfl((value), (src))
#define __any_sync(mask, predicate) ::emu::any((predicate))
#define __ballot_sync(mask, predicate) ::emu::ballot((predicate))
#define __threadfence() ((void)0)
#define __syncwarp(...) ::emu::warp_barrier()
#define __ldg(ptr) (*(ptr))

inline int max(int a, int b) { return a > b ? a : b; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int min(int a, int b) { return a < b ? a : b; }
// CUDA's other overloads (a call with both arguments 64-bit must not truncate to int here)
inline int64_t max(int64_t a, int64_t b) { return a > b ? a : b; }
inline int64_t min(int64_t a, int64_t b) { return a < b ? a : b; }
inline uint64_t max(uint64_t a, uint64_t b) { return a > b ? a : b; }
inline uint64_t min(uint64_t a, uint64_t b) { return a < b ? a : b; }
inline uint32_t max(uint32_t a, uint32_t b) { return a > b ? a : b; }
inline uint32_t min(uint32_t a, uint32_t b) { return a < b ? a : b; }
inline uint32_t __float_as_uint(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
inline float __uint_as_float(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
inline float __expf(float x) { return std::exp(x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline long long clock64() {
  static long long ticks = 0;
  return ticks += 100;
}
inline float __int_as_float(int i) {
  float x;
  std::memcpy(&x, &i, 4);
  return x;
}
inline int atomicAdd(int* address, int value) {
  const int old = *address;
  *address += value;
  return old;
}
inline unsigned atomicOr(unsigned* address, unsigned value) {
  const unsigned old = *address;
  *address |= value;
  return old;
}

#define cudaMalloc(ptr, bytes) ::emu::malloc_device(reinterpret_cast<void**>(ptr), (bytes))
#define cudaFree(ptr) ::emu::free_device(ptr)
#define cudaMallocHost(ptr, bytes) ::emu::malloc_device(reinterpret_cast<void**>(ptr), (bytes))
#define cudaFreeHost(ptr) ::emu::free_device(ptr)
#define cudaMemGetInfo(f, t) ::emu::mem_get_info((f), (t))
#define cudaMemcpy(dst, src, bytes, kind) (std::memcpy((dst), (src), (bytes)), cudaSuccess)
#define cudaMemcpyAsync(dst, src, bytes, kind, stream) (std::memcpy((dst), (src), (bytes)), cudaSuccess)
#define cudaMemset(dst, value, bytes) (std::memset((dst), (value), (bytes)), cudaSuccess)
#define cudaMemsetAsync(dst, value, bytes, stream) (std::memset((dst), (value), (bytes)), cudaSuccess)
#define cudaDeviceSynchronize() cudaSuccess
#define cudaStreamSynchronize(stream) cudaSuccess
#define cudaStreamCreateWithFlags(stream, flags) (*(stream) = nullptr, cudaSuccess)  // launches run in order
#define cudaStreamDestroy(stream) cudaSuccess
#define cudaGetLastError() cudaSuccess
#define cudaGetDevice(device) (*(device) = 0, cudaSuccess)
#define cudaGetDeviceCount(count) (*(count) = 1, cudaSuccess)
#define cudaDeviceGetAttribute(value, attr, device) ::emu::get_device_attribute((value), (attr), (device))
#define cudaGetDeviceProperties(prop, device) ::emu::get_device_properties((prop), (device))
#define cudaFuncSetAttribute(...) cudaSuccess
#define cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, kernel, threads, smem) (*(blocks) = 4, cudaSuccess)
#define cudaOccupancyMaxActiveClusters(clusters, kernel, config) ::emu::max_active_clusters((clusters), (config))
#define cudaLaunchKernelEx(config, kernel, ...) ::emu::launch_ex((config), (kernel), __VA_ARGS__)
#define cudaFuncGetName(name, func) cudaErrorInvalidValue
