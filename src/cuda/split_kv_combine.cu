// Flash-decoding combine (see split_kv_combine.hpp). One warp per output row; each lane owns columns
// lane*4 + 128*k. Memory-bound: rows * splits * dim * 4 bytes read, rows * dim written.
#include "cuda/split_kv_combine.hpp"

#include "cuda/check.hpp"
#include "cuda/launch.cuh"

#include <cuda_bf16.h>

#include <cstdint>
#include <string>

namespace latte::cuda {
namespace {

constexpr int kCombineWarps = 4;

__global__ void __launch_bounds__(32 * kCombineWarps) split_kv_combine_kernel(const SplitKvCombineParams p) {
  wait_for_producers();  // see launch.cuh
  allow_dependents();
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kCombineWarps + threadIdx.x / 32;
  if (row >= p.rows) return;
  const float* lse_row = p.partial_lse + static_cast<int64_t>(row) * p.splits;

  float max_lse = -INFINITY;
  for (int s = lane; s < p.splits; s += 32) max_lse = fmaxf(max_lse, lse_row[s]);
  for (int offset = 16; offset > 0; offset /= 2)
    max_lse = fmaxf(max_lse, __shfl_xor_sync(0xffffffffu, max_lse, offset));

  float total = 0.0f;  // sum_s exp(lse_s - max_lse)
  if (max_lse != -INFINITY) {
    for (int s = lane; s < p.splits; s += 32) total += expf(lse_row[s] - max_lse);
  }
  for (int offset = 16; offset > 0; offset /= 2) total += __shfl_xor_sync(0xffffffffu, total, offset);
  const float row_lse = max_lse == -INFINITY ? -INFINITY : max_lse + logf(total);

  for (int col = lane * 4; col < p.dim; col += 128) {
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (row_lse != -INFINITY) {
      for (int s = 0; s < p.splits; ++s) {
        const float split_lse = lse_row[s];
        if (split_lse == -INFINITY) continue;  // empty split: its partial output may be anything
        const float weight = expf(split_lse - row_lse);
        const float4 v =
            *reinterpret_cast<const float4*>(p.partial_out + (static_cast<int64_t>(row) * p.splits + s) * p.dim + col);
        acc.x += weight * v.x;
        acc.y += weight * v.y;
        acc.z += weight * v.z;
        acc.w += weight * v.w;
      }
    }
    const int64_t out_index = static_cast<int64_t>(row) * p.dim + col;
    if (p.out_type == AttnOutputType::f32) {
      *reinterpret_cast<float4*>(static_cast<float*>(p.out) + out_index) = acc;
    } else {
      __nv_bfloat162* out = reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(p.out) + out_index);
      out[0] = __floats2bfloat162_rn(acc.x, acc.y);
      out[1] = __floats2bfloat162_rn(acc.z, acc.w);
    }
  }
  if (p.lse != nullptr && lane == 0) p.lse[row] = row_lse;
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
  if (p.rows == 0) return;
  const int blocks = (p.rows + kCombineWarps - 1) / kCombineWarps;
  launch_kernel(split_kv_combine_kernel, blocks, 32 * kCombineWarps, 0, stream, p);
}

}  // namespace latte::cuda
