// Flash-decoding combine (see split_kv_combine.hpp). A block per (row, 128 columns): its threads reduce the
// row's split LSEs (max, then the sum of exponentials) and put each split's weight in shared memory; then
// thread (lane l, column group c) sums the 4 values of column group c over splits l, l + lanes, ... with 8
// loads in flight, and the lanes' sums are added in shared memory. Memory-bound: rows * splits * dim * 4
// bytes read, rows * dim written. The lanes along the splits are what keeps enough loads in flight for one
// sequence's few rows: with 64 threads per (row, 256 columns) walking all 128 splits of a one-token decode
// at depth 16384 (16 rows x 512), 32 blocks held ~260 KB in flight for the 4.2 MB of partials. (One warp
// per row walking the splits one dependent load at a time took 120 us for 16 rows x 64 splits x 512 on an
// H200.)
#include "cuda/split_kv_combine.hpp"

#include "cuda/check.hpp"
#include "cuda/launch.cuh"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <string>

namespace latte::cuda {
namespace {

constexpr int kColumnGroups = 32;  // float4 column groups per block: 128 values
constexpr int kMaxLanes = 16;      // threads per column group, along the splits

/// Threads per column group for `splits` partials: about 8 splits each, a power of two, at most kMaxLanes.
int combine_lanes(int splits) {
  int lanes = 1;
  while (lanes < kMaxLanes && 8 * lanes < splits) lanes *= 2;
  return lanes;
}

/// max (or sum) over the block's threads (a multiple of 32, at most 32 * kMaxLanes); every thread gets it.
template <bool Max>
__device__ float block_reduce(float v, float* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = Max ? fmaxf(v, other) : v + other;
  }
  const int warp = static_cast<int>(threadIdx.x) / 32, warps = static_cast<int>(blockDim.x) / 32;
  __syncthreads();  // scratch may still be read by a previous call
  if (threadIdx.x % 32 == 0) scratch[warp] = v;
  __syncthreads();
  float r = scratch[0];
  for (int w = 1; w < warps; ++w) r = Max ? fmaxf(r, scratch[w]) : r + scratch[w];
  return r;
}

__global__ void __launch_bounds__(kColumnGroups * kMaxLanes) split_kv_combine_kernel(const SplitKvCombineParams p) {
  wait_for_producers();  // see launch.cuh
  allow_dependents();
  // [splits]: exp(lse_s - row lse), or -1 for an empty split; afterwards [lanes - 1][kColumnGroups] float4 sums
  extern __shared__ __align__(16) float weight[];
  __shared__ float scratch[kMaxLanes];
  const int tid = static_cast<int>(threadIdx.x), threads = static_cast<int>(blockDim.x);
  const int lanes = threads / kColumnGroups;
  const int64_t row = blockIdx.y;
  const float* lse_row = p.partial_lse + row * p.splits;

  float max_lse = -INFINITY;
  for (int s = tid; s < p.splits; s += threads) max_lse = fmaxf(max_lse, lse_row[s]);
  max_lse = block_reduce<true>(max_lse, scratch);
  float total = 0.0f;  // sum_s exp(lse_s - max_lse)
  if (max_lse != -INFINITY) {
    for (int s = tid; s < p.splits; s += threads) total += expf(lse_row[s] - max_lse);
  }
  total = block_reduce<false>(total, scratch);
  const float row_lse = max_lse == -INFINITY ? -INFINITY : max_lse + logf(total);
  for (int s = tid; s < p.splits; s += threads) {
    const float l = lse_row[s];
    weight[s] = l == -INFINITY || row_lse == -INFINITY ? -1.0f : expf(l - row_lse);
  }
  __syncthreads();

  const int group = tid % kColumnGroups, lane = tid / kColumnGroups;
  const int col = 4 * (static_cast<int>(blockIdx.x) * kColumnGroups + group);
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (col < p.dim) {
    const float* src = p.partial_out + row * p.splits * p.dim + col;
#pragma unroll 8
    for (int s = lane; s < p.splits; s += lanes) {
      const float w = weight[s];
      const float4 v = *reinterpret_cast<const float4*>(src + static_cast<int64_t>(s) * p.dim);
      // an empty split's partial output may be anything: selected away, never multiplied
      const bool empty = w < 0.0f;
      acc.x += empty ? 0.0f : w * v.x;
      acc.y += empty ? 0.0f : w * v.y;
      acc.z += empty ? 0.0f : w * v.z;
      acc.w += empty ? 0.0f : w * v.w;
    }
  }
  __syncthreads();  // every weight was read: the lanes' sums take their place
  float4* lane_sums = reinterpret_cast<float4*>(weight);  // [lanes - 1][kColumnGroups]
  if (lane > 0) lane_sums[(lane - 1) * kColumnGroups + group] = acc;
  __syncthreads();
  if (lane == 0 && col < p.dim) {
    for (int l = 1; l < lanes; ++l) {
      const float4 v = lane_sums[(l - 1) * kColumnGroups + group];
      acc.x += v.x;
      acc.y += v.y;
      acc.z += v.z;
      acc.w += v.w;
    }
    const int64_t out_index = row * p.dim + col;
    if (p.out_type == AttnOutputType::f32) {
      *reinterpret_cast<float4*>(static_cast<float*>(p.out) + out_index) = acc;
    } else {
      __nv_bfloat162* out = reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(p.out) + out_index);
      out[0] = __floats2bfloat162_rn(acc.x, acc.y);
      out[1] = __floats2bfloat162_rn(acc.z, acc.w);
    }
  }
  if (p.lse != nullptr && blockIdx.x == 0 && tid == 0) p.lse[row] = row_lse;
}

}  // namespace

void run_split_kv_combine(const SplitKvCombineParams& p, cudaStream_t stream) {
  const std::string shape = "split_kv_combine(rows " + std::to_string(p.rows) + ", splits " + std::to_string(p.splits) +
                            ", dim " + std::to_string(p.dim) + ")";
  require(p.rows >= 0 && p.splits >= 1 && p.dim >= 4 && p.dim % 4 == 0, ErrorCode::invalid_argument,
          shape + ": needs splits >= 1 and dim a positive multiple of 4");
  require(p.partial_out != nullptr && p.partial_lse != nullptr && p.out != nullptr, ErrorCode::invalid_argument,
          shape + ": null partial or output pointer");
  require(reinterpret_cast<uintptr_t>(p.partial_out) % 16 == 0 && reinterpret_cast<uintptr_t>(p.out) % 8 == 0,
          ErrorCode::invalid_argument, shape + ": partial_out must be 16-byte and out 8-byte aligned");
  require(p.rows <= 65535 && p.splits <= 12 * 1024, ErrorCode::invalid_argument,
          shape + ": at most 65535 rows and 12288 splits");
  if (p.rows == 0) return;
  const int lanes = combine_lanes(p.splits);
  // the split weights, then (in the same bytes) the lanes' float4 sums: at most 48 KB for 12288 splits
  const size_t smem = std::max(static_cast<size_t>(p.splits), static_cast<size_t>(lanes - 1) * kColumnGroups * 4) *
                      sizeof(float);
  const dim3 grid(static_cast<unsigned>((p.dim / 4 + kColumnGroups - 1) / kColumnGroups),
                  static_cast<unsigned>(p.rows));
  launch_kernel(split_kv_combine_kernel, grid, kColumnGroups * lanes, smem, stream, p);
}

}  // namespace latte::cuda
