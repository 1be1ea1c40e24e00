// Row-wise normalisations and activations of the CPU forward pass (fp32, accumulations in double
// where a row is reduced).
#pragma once

#include <cstdint>

namespace latte::cpu {

/// dst[r] = src[r] / sqrt(mean(src[r]^2) + eps) * weight, for n_rows rows of `dim` values.
/// Strides in floats; dst may equal src.
void rms_norm_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t n_rows, int64_t dim,
                   const float* weight, float eps) noexcept;

/// dst[r] = (src[r] - mean) / sqrt(var + eps) * weight + bias (LayerNorm with bias).
void layer_norm_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t n_rows, int64_t dim,
                     const float* weight, const float* bias, float eps) noexcept;

/// out[i] = silu(gate[i]) * up[i] for n values (out may alias gate).
void silu_mul(const float* gate, const float* up, float* out, int64_t n) noexcept;

/// In-place softmax of one row of n values (sum accumulated in double); -inf entries get weight 0.
/// At least one entry must be finite.
void softmax_row(float* row, int64_t n) noexcept;

}  // namespace latte::cpu
