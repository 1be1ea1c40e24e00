// quantize_x_int8(): one warp per unit of 32 values (split_int8::quantize_unit), 8 units per block.
#include "cuda/x_int8.hpp"

#include <latte/error.hpp>

#include <string>

#include "cuda/launch.cuh"
#include "cuda/split_int8_dot.cuh"

namespace latte::cuda {
namespace {

constexpr int kUnitsPerBlock = 8;

__global__ void __launch_bounds__(32 * kUnitsPerBlock) quantize_x_int8_kernel(const QuantizeXParams p) {
  wait_for_producers();  // see launch.cuh
  allow_dependents();
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int unit = static_cast<int>(blockIdx.x) * kUnitsPerBlock + static_cast<int>(threadIdx.x) / 32;
  const int n = p.k / 32;
  if (unit >= n) return;
  const int64_t row = blockIdx.y;
  const float v = p.x[row * p.x_stride + 32 * unit + lane];
  split_int8::quantize_unit(p.out + row * p.out_stride, n, unit, v, lane);
}

}  // namespace

void quantize_x_int8(const QuantizeXParams& p, cudaStream_t stream) {
  if (p.x == nullptr || p.out == nullptr || p.k <= 0 || p.k % 32 != 0 || p.rows < 0 || p.rows > 65535 ||
      p.x_stride < p.k || p.out_stride < x_int8_record_bytes(p.k) || p.out_stride % 16 != 0 ||
      reinterpret_cast<uintptr_t>(p.out) % 16 != 0) {
    throw Error(ErrorCode::invalid_argument,
                "quantize_x_int8: invalid pointers, k = " + std::to_string(p.k) + " (a multiple of 32), rows = " +
                    std::to_string(p.rows) + " or strides (out: 16-byte aligned, >= 80 k / 32 bytes apart)");
  }
  if (p.rows == 0) return;
  const dim3 grid(static_cast<unsigned>((p.k / 32 + kUnitsPerBlock - 1) / kUnitsPerBlock), static_cast<unsigned>(p.rows));
  launch_kernel(quantize_x_int8_kernel, grid, dim3(32 * kUnitsPerBlock), 0, stream, p);
}

}  // namespace latte::cuda
