// Device-side pseudo-random fills: large benchmark inputs (gigabytes of KV cache) without staging
// them through the host. Values depend only on (seed, index), so a fill is reproducible.
//
//   run_fill_uniform_bf16(cache, n_values, -1.0f, 1.0f, /*seed=*/7, stream);
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace latte::cuda {

/// Fills `count` bf16 values with uniform values in [lo, hi) (never zeros as a pattern, never NaN).
void run_fill_uniform_bf16(__nv_bfloat16* dst, size_t count, float lo, float hi, uint64_t seed, cudaStream_t stream);

/// Fills `count` int32 values with uniform integers in [lo, hi].
void run_fill_uniform_int32(int32_t* dst, size_t count, int32_t lo, int32_t hi, uint64_t seed, cudaStream_t stream);

}  // namespace latte::cuda
