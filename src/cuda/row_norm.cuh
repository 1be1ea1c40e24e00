// The RMS normalisation of one row by one block of kRowNormThreads threads, in pieces shared by rms_norm
// (norms.cu) and moe_combine's normalising form (moe_dispatch.cu), which thereby make the same bits from the
// same row. The squares are summed with thread t taking values t, t + kRowNormThreads, ... (coalesced loads);
// the normalised values are written the same way, or, where the split-int8 records (x_int8.hpp) are made too,
// with thread t taking values 8t .. 8t + 7 of every kRowNormPass-value pass (whole quarters of the records'
// 32-value units).
//
//   const float inv = row_norm_inverse(row_norm_sum(x, h, n), n, eps, scratch);
//   row_norm_outputs(h ? h : x, inv, weight, n, out_row, out_type, q_row, y_s);
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/activations.hpp"
#include "cuda/split_int8_dot.cuh"

namespace latte::cuda {

inline constexpr int kRowNormThreads = 256;
inline constexpr int kRowNormPass = 8 * kRowNormThreads;

/// This thread's sum of squares of the row's values t, t + kRowNormThreads, ...; with h, each value is first
/// x[i] + h[i], stored back to h[i] (the fused residual add).
__device__ __forceinline__ float row_norm_sum(const float* x, float* h, int n) {
  float sum_sq = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < n; i += kRowNormThreads) {
    float v = x[i];
    if (h != nullptr) {
      v += h[i];
      h[i] = v;
    }
    sum_sq = fmaf(v, v, sum_sq);
  }
  return sum_sq;
}

/// The sum of v over the block's threads, every thread getting it; `scratch` holds kRowNormThreads / 32
/// floats of shared memory. Every thread of the block calls it.
__device__ __forceinline__ float row_block_sum(float v, float* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < kRowNormThreads / 32; ++w) total += scratch[w];
  return total;
}

/// 1 / sqrt(mean square + eps) of the row from every thread's sum of its own squares (row_block_sum).
__device__ __forceinline__ float row_norm_inverse(float sum_sq, int n, float eps, float* scratch) {
  return rsqrtf(row_block_sum(sum_sq, scratch) / static_cast<float>(n) + eps);
}

/// Stores value i of the normalised row to out_row (fp32 or bf16; none when null), y_s and b_row (bf16) when set.
__device__ __forceinline__ void row_norm_store(float v, int i, void* out_row, ActOut out_type, float* y_s,
                                               __nv_bfloat16* b_row) {
  if (y_s != nullptr) y_s[i] = v;
  if (b_row != nullptr) b_row[i] = __float2bfloat16_rn(v);
  if (out_row == nullptr) return;
  if (out_type == ActOut::f32) {
    static_cast<float*>(out_row)[i] = v;
  } else {
    static_cast<__nv_bfloat16*>(out_row)[i] = __float2bfloat16_rn(v);
  }
}

/// The normalised row src[i] * inv * weight[i] to out_row / y_s / b_row (row_norm_store), and with q_row its
/// split-int8 record too (n % 32 == 0). Every thread of the block calls it, after a barrier that follows the writes
/// of src (each thread reads values other threads summed); it reads src[i] before it writes out_row[i] (in place).
__device__ __forceinline__ void row_norm_outputs(const float* src, float inv, const float* weight, int n, void* out_row,
                                                 ActOut out_type, uint8_t* q_row, float* y_s,
                                                 __nv_bfloat16* b_row = nullptr) {
  const int t = static_cast<int>(threadIdx.x);
  if (q_row == nullptr) {
    for (int i = t; i < n; i += kRowNormThreads) {
      row_norm_store(src[i] * inv * weight[i], i, out_row, out_type, y_s, b_row);
    }
    return;
  }
  for (int base = 0; base < n; base += kRowNormPass) {
    const int i0 = base + 8 * t;
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int i = i0 + j;
      v[j] = i < n ? src[i] * inv * weight[i] : 0.0f;
      if (i < n) row_norm_store(v[j], i, out_row, out_type, y_s, b_row);
    }
    split_int8::quantize_unit_quad(q_row, n / 32, i0 / 32, v, t % 4, i0 < n);  // whole units: n % 32 == 0
  }
}

}  // namespace latte::cuda
