// rms_norm / layer_norm: a block of 256 threads per row; block sums via warp shuffles + shared memory.
// Bytes: rms_norm reads x (and h) and writes y (and h): 8-16 bytes per value (+2.5 with the int8 record).
#include "cuda/norms.hpp"

#include <latte/error.hpp>

#include <cuda_bf16.h>

#include <cstdint>
#include <string>

#include "cuda/check.hpp"
#include "cuda/launch.cuh"
#include "cuda/row_norm.cuh"
#include "cuda/x_int8.hpp"

namespace latte::cuda {
namespace {

constexpr int kNormThreads = kRowNormThreads;

__global__ void __launch_bounds__(kNormThreads) rms_norm_kernel(const RmsNormParams p) {
  wait_for_producers();  // see launch.cuh
  allow_dependents();
  __shared__ float scratch[kNormThreads / 32];
  extern __shared__ __align__(16) float y_s[];  // [n] with a router: the row's output values
  const int64_t row = blockIdx.x;
  // Block (row, 0) writes the outputs; blocks (row, j > 0) exist only for the router and write none of them.
  const bool writer = blockIdx.y == 0;
  const float* x = p.x + row * p.x_stride;
  float* h = p.residual ? p.residual + row * p.residual_stride : nullptr;
  const float inv = row_norm_inverse(row_norm_sum(x, h, p.n), p.n, p.eps, scratch);
  void* out_row = nullptr;
  if (writer) {
    out_row = p.out_type == ActOut::f32 ? static_cast<void*>(static_cast<float*>(p.out) + row * p.out_stride)
                                        : static_cast<void*>(static_cast<__nv_bfloat16*>(p.out) + row * p.out_stride);
  }
  uint8_t* q_row = writer && p.out_q != nullptr ? p.out_q + row * p.out_q_stride : nullptr;
  __nv_bfloat16* b_row =
      writer && p.out_bf16 != nullptr ? static_cast<__nv_bfloat16*>(p.out_bf16) + row * p.out_bf16_stride : nullptr;
  row_norm_outputs(h ? h : x, inv, p.weight, p.n, out_row, p.out_type, q_row, p.router != nullptr ? y_s : nullptr,
                   b_row);
  if (p.router == nullptr) return;
  // The router: warp w of block (row, j) takes router row 8 j + w, its lanes 4 values apart (float4 loads,
  // all of a lane's in flight), then a butterfly sum.
  __syncthreads();
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int e = static_cast<int>(blockIdx.y) * kRmsNormRouterRowsPerBlock + warp;
  if (warp >= kRmsNormRouterRowsPerBlock || e >= p.router_rows) return;
  const float4* w = reinterpret_cast<const float4*>(p.router + static_cast<int64_t>(e) * p.n);
  const float4* y = reinterpret_cast<const float4*>(y_s);
  float acc = 0.0f;
#pragma unroll 8
  for (int i = lane; i < p.n / 4; i += 32) {
    const float4 a = __ldg(w + i);
    const float4 b = y[i];
    acc += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) p.router_out[row * p.router_out_stride + e] = acc;
}

__global__ void __launch_bounds__(kNormThreads) layer_norm_kernel(const LayerNormParams p) {
  wait_for_producers();  // see launch.cuh
  allow_dependents();
  __shared__ float scratch[kNormThreads / 32];
  const int64_t row = blockIdx.x;
  const float* x = p.x + row * p.x_stride;
  float sum = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < p.n; i += kNormThreads) sum += x[i];
  const float mean = row_block_sum(sum, scratch) / static_cast<float>(p.n);
  float sum_sq = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < p.n; i += kNormThreads) {
    const float d = x[i] - mean;
    sum_sq += d * d;
  }
  const float inv = rsqrtf(row_block_sum(sum_sq, scratch) / static_cast<float>(p.n) + p.eps);
  __syncthreads();  // every thread has read x before any output (out may alias x)
  for (int i = static_cast<int>(threadIdx.x); i < p.n; i += kNormThreads) {
    p.out[row * p.out_stride + i] = (x[i] - mean) * inv * p.weight[i] + p.bias[i];
  }
}

}  // namespace

void rms_norm(const RmsNormParams& p, cudaStream_t stream) {
  if (!p.x || !p.weight || !p.out || p.n <= 0 || p.rows < 0 || p.x_stride < p.n || p.out_stride < p.n ||
      (p.residual && p.residual_stride < p.n) || !(p.eps >= 0.0f)) {
    throw Error(ErrorCode::invalid_argument, "rms_norm: invalid pointers, n = " + std::to_string(p.n) +
                                                 ", rows = " + std::to_string(p.rows) + ", strides or eps");
  }
  if (p.out_type == ActOut::bf16 && static_cast<const void*>(p.x) == p.out) {
    throw Error(ErrorCode::invalid_argument, "rms_norm: a bf16 output cannot overwrite the fp32 input");
  }
  if (p.out_bf16 != nullptr && (p.out_type != ActOut::f32 || p.out_bf16_stride < p.n || p.out_bf16 == p.out ||
                                static_cast<const void*>(p.x) == p.out_bf16)) {
    throw Error(ErrorCode::invalid_argument,
                "rms_norm: the bf16 copy of the output needs an fp32 output, rows of at least n = " +
                    std::to_string(p.n) + " values and its own memory");
  }
  if (p.out_q != nullptr && !x_int8_records_fit(p.out_q, p.out_q_stride, p.n)) {
    throw Error(ErrorCode::invalid_argument, "rms_norm: the int8 record needs n % 32 == 0 (n = " + std::to_string(p.n) +
                                                 ") and a 16-byte aligned out_q with out_q_stride >= 80 n / 32");
  }
  if (p.router != nullptr &&
      (p.router_rows <= 0 || p.router_out == nullptr || p.router_out_stride < p.router_rows ||
       p.out_type != ActOut::f32 || p.residual != nullptr || static_cast<const void*>(p.x) == p.out || p.n % 4 != 0 ||
       reinterpret_cast<uintptr_t>(p.router) % 16 != 0 || static_cast<size_t>(p.n) * sizeof(float) > 48 * 1024)) {
    throw Error(ErrorCode::invalid_argument,
                "rms_norm: the router product needs router rows and their output, an fp32 output apart from x, no "
                "residual, n % 4 == 0 (n = " +
                    std::to_string(p.n) + ", at most 12288) and 16-byte aligned router rows");
  }
  if (p.rows == 0) return;
  const unsigned router_blocks =
      p.router != nullptr ? (p.router_rows + kRmsNormRouterRowsPerBlock - 1) / kRmsNormRouterRowsPerBlock : 1;
  const size_t smem = p.router != nullptr ? static_cast<size_t>(p.n) * sizeof(float) : 0;
  launch_kernel(rms_norm_kernel, dim3(p.rows, router_blocks), kNormThreads, smem, stream, p);
}

void layer_norm(const LayerNormParams& p, cudaStream_t stream) {
  if (!p.x || !p.weight || !p.bias || !p.out || p.n <= 0 || p.rows < 0 || p.x_stride < p.n || p.out_stride < p.n ||
      !(p.eps >= 0.0f)) {
    throw Error(ErrorCode::invalid_argument, "layer_norm: invalid pointers, n = " + std::to_string(p.n) +
                                                 ", rows = " + std::to_string(p.rows) + ", strides or eps");
  }
  if (p.rows == 0) return;
  launch_kernel(layer_norm_kernel, p.rows, kNormThreads, 0, stream, p);
}

}  // namespace latte::cuda
