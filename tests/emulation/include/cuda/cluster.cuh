// Emulated twin of src/cuda/cluster.cuh: a cluster's CTAs run together (emu::run_grid_clusters), the
// cluster barrier is a rendezvous of all their threads, and another CTA's shared memory is its buffer.
#pragma once

#include <cstdint>

namespace latte::cuda::cluster {

inline unsigned rank() { return emu::cluster_rank(); }
inline void sync() { emu::cluster_sync(); }
inline float load(const float* local, unsigned target) {
  return *static_cast<const float*>(emu::cluster_map(local, target));
}
inline float4 load(const float4* local, unsigned target) {
  return *static_cast<const float4*>(emu::cluster_map(local, target));
}

}  // namespace latte::cuda::cluster
