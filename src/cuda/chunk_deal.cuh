// How a CTA's threads share the 16-byte asynchronous copies of a tile of bf16 rows into shared memory (the
// MLA decode's query rows and cache tiles, the flash prefill's query and K/V tiles): 8 consecutive threads take
// 128 contiguous bytes of one row (one L2 request of 4 sectors, one shared-memory wavefront), so a warp covers 4
// rows per copy and the CTA kThreads / 8 rows per "wave"; thread t takes chunks t % 8, t % 8 + 8, ... of rows
// t / 8, t / 8 + kThreads / 8, ... A loader works out each of its rows' source once and issues that row's copies
// as fixed steps from it (unrolled). Dealing chunk c to thread c % kThreads instead costs a division, the row's
// lookup and 64-bit address arithmetic per copy: ~1,100 of the ~2,600 instructions per warp of a one-tile MLA
// decode CTA (ncu, H100, BENCHMARKS.md twentieth round).
#pragma once

#include "cuda/bf16_mma.cuh"

namespace latte::cuda {

template <int kRows, int kRowChunks, int kThreads>
struct ChunkDeal {
  static constexpr int kThreadsPerRow = 8;
  static constexpr int kRowsPerWave = kThreads / kThreadsPerRow;
  static constexpr int kWaves = kRows / kRowsPerWave;          ///< rows per thread
  static constexpr int kChunks = kRowChunks / kThreadsPerRow;  ///< copies per thread and row
  static constexpr int kStep = 8 * kThreadsPerRow;             ///< bf16 elements between them
  static_assert(kThreads % kThreadsPerRow == 0 && kRows % kRowsPerWave == 0 && kRowChunks % kThreadsPerRow == 0,
                "whole rows per wave, whole 128-byte pieces per row");

  /// The element of each row where this thread's first chunk starts.
  __device__ static int first_element() { return static_cast<int>(threadIdx.x) % kThreadsPerRow * 8; }
  /// This thread's row in wave w (0 .. kWaves - 1).
  __device__ static int row(int w) { return static_cast<int>(threadIdx.x) / kThreadsPerRow + w * kRowsPerWave; }
  /// Issues the first kCount of this thread's chunks of one row (all by default): dst and src point at the row's
  /// first_element(), the copies kStep elements apart (zero-filled where !valid; src must stay a readable address).
  template <int kCount = kChunks, class T>
  __device__ __forceinline__ static void copy_row(T* dst, const T* src, bool valid) {
    static_assert(kCount >= 0 && kCount <= kChunks);
#pragma unroll
    for (int j = 0; j < kCount; ++j) mma::cp_async_16(dst + kStep * j, src + kStep * j, valid);
  }
};

}  // namespace latte::cuda
