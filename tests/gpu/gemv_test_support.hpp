// Inputs and float64 references shared by the GEMV tests (tests/gpu/gemv_int8_test.cpp and the CPU
// emulation's tests/emulation/gemv_test.cpp): random weight matrices encoded by latte's CPU quantizer (random
// blocks for the decode-only IQ4 types) and decoded back by its CPU decoder, random vectors, double-precision dot
// products.
#pragma once

#include <latte/quant.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
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
  if (type == GgmlType::iq4_nl || type == GgmlType::iq4_xs) {
    // decoded, never encoded: random codes (and IQ4_XS sub-block scales), each block's fp16 d small enough that
    // the values stay within about +-1
    for (uint8_t& b : m.bytes) b = static_cast<uint8_t>(rng.uniform_int(0, 255));
    const auto& t = latte::type_traits(type);
    const float d = type == GgmlType::iq4_nl ? 1.0f / 128 : 1.0f / 4096;
    for (size_t at = 0; at < m.bytes.size(); at += t.block_bytes) {
      const uint16_t h = latte::fp32_to_fp16(d * rng.uniform(0.5f, 1.0f) * (rng.uniform_int(0, 1) ? 1.0f : -1.0f));
      std::memcpy(&m.bytes[at], &h, 2);
    }
    for (int64_t r = 0; r < rows; ++r)
      latte::dequantize_row(type, m.bytes.data() + r * row_bytes, m.values.data() + r * k, k);
    return m;
  }
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
