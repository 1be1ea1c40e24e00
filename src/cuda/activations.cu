// Elementwise kernels: one thread per element, grid-stride over rows x cols. Bandwidth-bound:
// silu_gate moves 8 bytes in + 4 (or 2) out per element.
#include "cuda/activations.hpp"

#include <latte/error.hpp>

#include <cuda_bf16.h>

#include <cstdint>
#include <string>

#include "cuda/check.hpp"
#include "cuda/launch.cuh"

namespace latte::cuda {
namespace {

__global__ void silu_gate_kernel(const SiluGateParams p) {
  wait_for_producers();  // see launch.cuh
  allow_dependents();
  const int64_t total = static_cast<int64_t>(p.rows) * p.cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / p.cols, c = i % p.cols;
    const float g = p.gate[r * p.gate_stride + c];
    const float v = g / (1.0f + expf(-g)) * p.up[r * p.up_stride + c];
    if (p.out_type == ActOut::f32) {
      static_cast<float*>(p.out)[r * p.out_stride + c] = v;
    } else {
      static_cast<__nv_bfloat16*>(p.out)[r * p.out_stride + c] = __float2bfloat16_rn(v);
    }
  }
}

__global__ void convert_to_bf16_kernel(const float* x, int64_t x_stride, __nv_bfloat16* out, int64_t out_stride,
                                       int rows, int cols) {
  wait_for_producers();  // see launch.cuh
  allow_dependents();
  const int64_t total = static_cast<int64_t>(rows) * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    out[r * out_stride + c] = __float2bfloat16_rn(x[r * x_stride + c]);
  }
}

unsigned grid_for(int64_t total) {
  const int64_t blocks = (total + 255) / 256;
  return static_cast<unsigned>(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

}  // namespace

void silu_gate(const SiluGateParams& p, cudaStream_t stream) {
  if (!p.gate || !p.up || !p.out || p.rows < 0 || p.cols < 0 || p.gate_stride < p.cols || p.up_stride < p.cols ||
      p.out_stride < p.cols) {
    throw Error(ErrorCode::invalid_argument, "silu_gate: invalid pointers, shape " + std::to_string(p.rows) + " x " +
                                                 std::to_string(p.cols) + " or strides");
  }
  if (p.rows == 0 || p.cols == 0) return;
  launch_kernel(silu_gate_kernel, grid_for(static_cast<int64_t>(p.rows) * p.cols), 256, 0, stream, p);
}

void convert_to_bf16(const float* x, int64_t x_stride, void* out, int64_t out_stride, int rows, int cols,
                     cudaStream_t stream) {
  if (!x || !out || rows < 0 || cols < 0 || x_stride < cols || out_stride < cols) {
    throw Error(ErrorCode::invalid_argument, "convert_to_bf16: invalid pointers, shape or strides");
  }
  if (rows == 0 || cols == 0) return;
  launch_kernel(convert_to_bf16_kernel, grid_for(static_cast<int64_t>(rows) * cols), 256, 0, stream, x, x_stride,
                static_cast<__nv_bfloat16*>(out), out_stride, rows, cols);
}

}  // namespace latte::cuda
