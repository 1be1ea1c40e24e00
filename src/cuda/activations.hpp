// Elementwise kernels of the FFN and of prefill input preparation:
//   silu_gate: out = silu(g) * u  (SiLU-gated FFN), fp32 in, fp32 or bf16 out
//   convert_to_bf16: fp32 rows -> bf16 rows (the A operand of the prefill GEMM)
//
//   latte::cuda::silu_gate({.gate = g, .up = u, .out = h, .rows = t, .cols = 1408, ...}, stream);
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace latte::cuda {

/// Element type written by an elementwise kernel or a norm.
enum class ActOut { f32, bf16 };

/// out[r, c] = silu(gate[r, c]) * up[r, c] with silu(g) = g / (1 + exp(-g)).
struct SiluGateParams {
  const float* gate = nullptr;  ///< fp32 [rows, gate_stride]
  int64_t gate_stride = 0;
  const float* up = nullptr;  ///< fp32 [rows, up_stride]
  int64_t up_stride = 0;
  void* out = nullptr;  ///< fp32 or bf16 [rows, out_stride]
  int64_t out_stride = 0;
  ActOut out_type = ActOut::f32;
  int rows = 0;
  int cols = 0;
};
void silu_gate(const SiluGateParams& p, cudaStream_t stream);

/// out[r, c] = bf16(x[r, c]) (round to nearest even).
void convert_to_bf16(const float* x, int64_t x_stride, void* out, int64_t out_stride, int rows, int cols,
                     cudaStream_t stream);

}  // namespace latte::cuda
