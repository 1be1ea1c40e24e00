// quantize_x_int8(): four threads per unit of 32 values (split_int8::quantize_unit_quad), 64 units per block.
#include "cuda/x_int8.hpp"

#include <latte/error.hpp>

#include <string>

#include "cuda/launch.cuh"
#include "cuda/split_int8_dot.cuh"

namespace latte::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kUnitsPerBlock = kThreads / 4;  // four threads a unit, 8 values each

__global__ void __launch_bounds__(kThreads) quantize_x_int8_kernel(const QuantizeXParams p) {
  wait_for_producers();  // see launch.cuh
  allow_dependents();
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int unit = static_cast<int>(blockIdx.x) * kUnitsPerBlock + static_cast<int>(threadIdx.x) / 4;
  const int n = p.k / 32;
  const bool active = unit < n;
  const int64_t row = blockIdx.y;
  const float* x = p.x + row * p.x_stride + 32 * unit + 8 * (lane % 4);
  float v[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = active ? x[j] : 0.0f;
  split_int8::quantize_unit_quad(p.out + row * p.out_stride, n, unit, v, lane % 4, active);
}

}  // namespace

void quantize_x_int8(const QuantizeXParams& p, cudaStream_t stream) {
  if (p.x == nullptr || p.out == nullptr || p.k <= 0 || p.k % 32 != 0 || p.rows < 0 || p.rows > 65535 ||
      p.x_stride < p.k || !x_int8_records_fit(p.out, p.out_stride, p.k)) {
    throw Error(ErrorCode::invalid_argument, "quantize_x_int8: invalid pointers, k = " + std::to_string(p.k) +
                                                 " (a multiple of 32), rows = " + std::to_string(p.rows) +
                                                 " or strides (out: 16-byte aligned, >= 80 k / 32 bytes apart)");
  }
  if (p.rows == 0) return;
  const dim3 grid(static_cast<unsigned>((p.k / 32 + kUnitsPerBlock - 1) / kUnitsPerBlock),
                  static_cast<unsigned>(p.rows));
  launch_kernel(quantize_x_int8_kernel, grid, dim3(kThreads), 0, stream, p);
}

}  // namespace latte::cuda
