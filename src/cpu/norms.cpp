#include "cpu/norms.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace latte::cpu {

void rms_norm_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t n_rows, int64_t dim,
                   const float* weight, float eps) noexcept {
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* x = src + r * src_stride;
    float* y = dst + r * dst_stride;
    double sum_sq = 0.0;
    for (int64_t i = 0; i < dim; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(dim) + eps));
    for (int64_t i = 0; i < dim; ++i) y[i] = x[i] * inv * weight[i];
  }
}

void layer_norm_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t n_rows, int64_t dim,
                     const float* weight, const float* bias, float eps) noexcept {
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* x = src + r * src_stride;
    float* y = dst + r * dst_stride;
    double sum = 0.0;
    for (int64_t i = 0; i < dim; ++i) sum += x[i];
    const double mean = sum / static_cast<double>(dim);
    double var = 0.0;
    for (int64_t i = 0; i < dim; ++i) var += (x[i] - mean) * (x[i] - mean);
    var /= static_cast<double>(dim);
    const double inv = 1.0 / std::sqrt(var + eps);
    for (int64_t i = 0; i < dim; ++i) y[i] = static_cast<float>((x[i] - mean) * inv) * weight[i] + bias[i];
  }
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n) noexcept {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void softmax_row(float* row, int64_t n) noexcept {
  float max_v = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) max_v = std::max(max_v, row[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float e = row[i] == -std::numeric_limits<float>::infinity() ? 0.0f : std::exp(row[i] - max_v);
    row[i] = e;
    sum += e;
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) row[i] *= inv;
}

}  // namespace latte::cpu
