// DSA top-k selection (see dsa_indexer.hpp).
//
// One CTA of 512 threads per score row. Scores map to order-preserving 32-bit keys; four 8-bit radix
// passes (shared-memory histogram + a CUB block scan over the bins, from the top) find the exact key
// of the top_k-th largest score and how many of the scores equal to it are still needed. A last pass
// in position order keeps every key above that threshold plus the first `needed` keys equal to it
// (the lower positions win ties) and writes them in ascending position order, so the result is the
// same on every run and architecture.
#include "cuda/dsa_indexer.hpp"

#include "cuda/check.hpp"
#include "cuda/launch.cuh"

#include <cub/block/block_scan.cuh>

#include <cstdint>
#include <string>

namespace latte::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kItemsPerThread = 4;  // positions per thread per compaction step (2048 per step < 2^16)
constexpr int kBins = 256;

/// Float -> unsigned key with the same order (negative floats reversed below the positive ones).
__device__ __forceinline__ uint32_t order_key(float x) {
  const uint32_t bits = __float_as_uint(x);
  return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}

__global__ void __launch_bounds__(kThreads) dsa_top_k_kernel(const DsaTopKParams p) {
  wait_for_producers();  // see launch.cuh
  allow_dependents();
  using BlockScan = cub::BlockScan<int, kThreads>;
  __shared__ typename BlockScan::TempStorage scan_storage;
  __shared__ int histogram[kBins];
  __shared__ uint32_t chosen_prefix;
  __shared__ int chosen_remaining;

  const int row = blockIdx.x;
  const int b = row / p.q_len;
  const int t = row % p.q_len;
  const int visible = max(0, p.kv_lens[b] - p.q_len + t + 1);
  int32_t* out = p.indices + static_cast<int64_t>(row) * p.index_stride;
  if (visible <= p.top_k) {  // everything visible is selected
    for (int i = threadIdx.x; i < p.top_k; i += kThreads) out[i] = i < visible ? i : -1;
    return;
  }
  const float* scores = p.scores + static_cast<int64_t>(row) * p.scores_stride;

  uint32_t prefix = 0;  // key bits fixed so far
  uint32_t prefix_mask = 0;
  int remaining = p.top_k;  // how many of the keys matching `prefix` are still to be selected
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < kBins; i += kThreads) histogram[i] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < visible; i += kThreads) {
      const uint32_t key = order_key(scores[i]);
      if ((key & prefix_mask) == prefix) atomicAdd(&histogram[(key >> shift) & 0xffu], 1);
    }
    __syncthreads();
    // Thread i looks at digit 255 - i; the inclusive scan gives the count of keys with digit >= it.
    const int digit = kBins - 1 - static_cast<int>(threadIdx.x);
    const int count = threadIdx.x < kBins ? histogram[digit] : 0;
    int at_or_above = 0;
    BlockScan(scan_storage).InclusiveSum(count, at_or_above);
    const int above = at_or_above - count;
    if (threadIdx.x < kBins && above < remaining && at_or_above >= remaining) {
      chosen_prefix = prefix | (static_cast<uint32_t>(digit) << shift);
      chosen_remaining = remaining - above;
    }
    __syncthreads();
    prefix = chosen_prefix;
    remaining = chosen_remaining;
    prefix_mask |= 0xffu << shift;
    __syncthreads();  // histogram and scan storage are reused
  }
  // `prefix` is now the exact key of the top_k-th largest score: select every key above it and the
  // first `remaining` keys equal to it, in position order.
  const uint32_t threshold = prefix;
  const int needed_equal = remaining;
  int greater_base = 0;  // selected keys above the threshold before this step
  int equal_base = 0;    // keys equal to the threshold before this step
  for (int step = 0; step < visible; step += kThreads * kItemsPerThread) {
    const int first = step + threadIdx.x * kItemsPerThread;
    uint32_t keys[kItemsPerThread];
    int packed = 0;  // (greater count << 16) | equal count of this thread's items
    for (int j = 0; j < kItemsPerThread; ++j) {
      const int pos = first + j;
      keys[j] = pos < visible ? order_key(scores[pos]) : 0u;
      if (pos < visible) packed += keys[j] > threshold ? (1 << 16) : (keys[j] == threshold ? 1 : 0);
    }
    int before = 0, step_total = 0;
    BlockScan(scan_storage).ExclusiveSum(packed, before, step_total);
    int greater_before = greater_base + (before >> 16);
    int equal_before = equal_base + (before & 0xffff);
    for (int j = 0; j < kItemsPerThread; ++j) {
      const int pos = first + j;
      if (pos >= visible) break;
      if (keys[j] > threshold) {
        out[greater_before + min(equal_before, needed_equal)] = pos;
        ++greater_before;
      } else if (keys[j] == threshold) {
        if (equal_before < needed_equal) out[greater_before + equal_before] = pos;
        ++equal_before;
      }
    }
    greater_base += step_total >> 16;
    equal_base += step_total & 0xffff;
    __syncthreads();  // scan storage is reused
  }
}

}  // namespace

void run_dsa_top_k(const DsaTopKParams& p, cudaStream_t stream) {
  const std::string what = "dsa_top_k(batch " + std::to_string(p.batch) + ", q_len " + std::to_string(p.q_len) +
                           ", top_k " + std::to_string(p.top_k) + ")";
  require(p.batch >= 1 && p.q_len >= 1 && p.top_k >= 1, ErrorCode::invalid_argument,
          what + ": batch, q_len and top_k must be positive");
  require(static_cast<int64_t>(p.batch) * p.q_len <= 0x7fffffff, ErrorCode::invalid_argument, what + ": too many rows");
  require(p.scores != nullptr && p.kv_lens != nullptr && p.indices != nullptr, ErrorCode::invalid_argument,
          what + ": scores, kv_lens and indices must be set");
  require(p.index_stride >= p.top_k && p.scores_stride >= 1, ErrorCode::invalid_argument,
          what + ": index_stride must be at least top_k");
  launch_kernel(dsa_top_k_kernel, p.batch * p.q_len, kThreads, 0, stream, p);
}

}  // namespace latte::cuda
