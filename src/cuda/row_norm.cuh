// The RMS normalisation of one row by one block of kRowNormThreads threads, in pieces shared by rms_norm
// (norms.cu) and moe_combine's normalising form (moe_dispatch.cu), which thereby make the same bits from the
// same row. Thread t owns values 8t .. 8t + 7 of every kRowNormPass-value pass of the row, so that it also
// holds whole quarters of the 32-value units of the split-int8 records (x_int8.hpp).
//
//   float sum_sq = 0;  // over the thread's own values, pass by pass, in order
//   for (...) sum_sq = row_norm_square(v, sum_sq);
//   const float inv = row_norm_inverse(sum_sq, n, eps, scratch);
//   for (int base = 0; base < n; base += kRowNormPass) row_norm_write(src, inv, weight, n, base + 8 * t, ...);
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/activations.hpp"
#include "cuda/split_int8_dot.cuh"

namespace latte::cuda {

inline constexpr int kRowNormThreads = 256;
inline constexpr int kRowNormPass = 8 * kRowNormThreads;

/// sum_sq + v * v, the one way both kernels add a square.
__device__ __forceinline__ float row_norm_square(float v, float sum_sq) { return fmaf(v, v, sum_sq); }

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

/// Values i0 .. i0 + 7 (those below n) of the normalised row: src[i] * inv * weight[i], stored to out_row
/// (fp32 or bf16; none when null) and y_s (when set); with q_row, their quarter of the row's split-int8 record
/// (n % 32 == 0; the four threads of a unit call it together, past n too).
__device__ __forceinline__ void row_norm_write(const float* src, float inv, const float* weight, int n, int i0,
                                               void* out_row, ActOut out_type, uint8_t* q_row, float* y_s) {
  float v[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int i = i0 + j;
    v[j] = i < n ? src[i] * inv * weight[i] : 0.0f;
    if (i >= n) continue;
    if (y_s != nullptr) y_s[i] = v[j];
    if (out_row == nullptr) continue;
    if (out_type == ActOut::f32) {
      static_cast<float*>(out_row)[i] = v[j];
    } else {
      static_cast<__nv_bfloat16*>(out_row)[i] = __float2bfloat16_rn(v[j]);
    }
  }
  if (q_row != nullptr) {
    split_int8::quantize_unit_quad(q_row, n / 32, i0 / 32, v, static_cast<int>(threadIdx.x) % 4, i0 < n);
  }
}

}  // namespace latte::cuda
