// Inputs and float64 references shared by the GEMV tests (tests/gpu/gemv_int8_test.cpp and the CPU
// emulation's tests/emulation/gemv_test.cpp): random weight matrices encoded by latte's CPU quantizer
// and decoded back by its CPU decoder, random vectors, double-precision dot products.
#pragma once

#include <latte/quant.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "gpu/attention_test_support.hpp"

namespace latte::test::gemv {

/// A random matrix as the GPU reads it (encoded rows) and as the reference uses it (decoded values).
struct Matrix {
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // rows x k, decoded
};

inline Matrix random_matrix(GgmlType type, int64_t rows, int64_t k, attention::Rng& rng) {
  Matrix m;
  const uint64_t row_bytes = latte::row_bytes(type, static_cast<uint64_t>(k));
  m.bytes.resize(row_bytes * static_cast<uint64_t>(rows));
  m.values.resize(static_cast<size_t>(rows * k));
  std::vector<float> src(static_cast<size_t>(k));
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : src) v = rng.uniform(-1.0f, 1.0f);
    latte::quantize_row(type, src.data(), m.bytes.data() + r * row_bytes, k);
    latte::dequantize_row(type, m.bytes.data() + r * row_bytes, m.values.data() + r * k, k);
  }
  return m;
}

inline std::vector<float> random_vector(size_t n, attention::Rng& rng) {
  std::vector<float> v(n);
  for (float& x : v) x = rng.uniform(-1.0f, 1.0f);
  return v;
}

inline double dot(const float* w, const float* x, int64_t k) {
  double s = 0.0;
  for (int64_t i = 0; i < k; ++i) s += static_cast<double>(w[i]) * x[i];
  return s;
}

inline double silu(double g) { return g / (1.0 + std::exp(-g)); }

}  // namespace latte::test::gemv
