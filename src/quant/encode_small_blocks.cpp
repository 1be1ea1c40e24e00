// Reference encoders of the 32-value block formats, making the same choices as ggml's
// quantize_row_*_ref: the same scale from the same extreme value, the same float operations in the
// same order, and the same rounding (truncation of x + 0.5 for Q4/Q5, round-half-away for Q8, the
// first nearest table entry for MXFP4), so the bytes match ggml's on the same input.
//
// Inputs are finite (rows.cpp rejects NaN and infinity). Float-to-integer conversions are clamped
// before the cast; the clamp never changes a value ggml itself could produce.
#include <latte/quant_blocks.hpp>

#include "quant/half_float.hpp"
#include "quant/row_codecs.hpp"

#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace latte::quant {
namespace {

// C's float -> integer conversion (truncation toward zero), clamped to [lo, hi].
inline int truncate_clamped(float v, int lo, int hi) {
  if (!(v > static_cast<float>(lo))) return lo;  // also NaN
  if (v >= static_cast<float>(hi)) return hi;
  return static_cast<int>(v);
}

// The value of largest magnitude (the first one on ties), with its sign: ggml's scale anchor for
// the symmetric formats.
inline float signed_absmax(const float* x, int n) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

struct MinMax {
  float min;
  float max;
};
inline MinMax min_max(const float* x, int n) {
  MinMax r{FLT_MAX, -FLT_MAX};
  for (int j = 0; j < n; ++j) {
    if (x[j] < r.min) r.min = x[j];
    if (x[j] > r.max) r.max = x[j];
  }
  return r;
}

inline float absmax(const float* x, int n) {
  float amax = 0.0f;
  for (int j = 0; j < n; ++j) amax = amax > std::fabs(x[j]) ? amax : std::fabs(x[j]);
  return amax;
}

// Round half away from zero (C's roundf), into int8 range.
inline int8_t round_to_int8(float v) {
  const float r = std::round(v);
  return static_cast<int8_t>(r >= 127.0f ? 127 : (r <= -128.0f ? -128 : static_cast<int>(r)));
}

// ggml's MXFP4 table (twice the E2M1 values).
constexpr int8_t k_e2m1_doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// Index of the first table entry nearest to x at scale d.
inline uint8_t nearest_e2m1(float x, float d) {
  uint8_t best = 0;
  float best_error = std::fabs(static_cast<float>(k_e2m1_doubled[0]) * d - x);
  for (uint8_t i = 1; i < 16; ++i) {
    const float error = std::fabs(static_cast<float>(k_e2m1_doubled[i]) * d - x);
    if (error < best_error) {
      best = i;
      best_error = error;
    }
  }
  return best;
}

}  // namespace

void encode_q4_0(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float* x = src + b * qk4_0;
    uint8_t* block = dst + b * static_cast<int64_t>(sizeof(BlockQ4_0));  // d | qs[16]
    const float d = signed_absmax(x, qk4_0) / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_u16(block + offsetof(BlockQ4_0, d), float_to_half(d));
    uint8_t* qs = block + offsetof(BlockQ4_0, qs);
    for (int j = 0; j < qk4_0 / 2; ++j) {
      const int q0 = truncate_clamped(x[j] * id + 8.5f, 0, 15);
      const int q1 = truncate_clamped(x[j + qk4_0 / 2] * id + 8.5f, 0, 15);
      qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void encode_q4_1(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float* x = src + b * qk4_0;
    uint8_t* block = dst + b * static_cast<int64_t>(sizeof(BlockQ4_1));  // d | m | qs[16]
    const MinMax r = min_max(x, qk4_0);
    const float d = (r.max - r.min) / 15;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_u16(block + offsetof(BlockQ4_1, d), float_to_half(d));
    store_u16(block + offsetof(BlockQ4_1, m), float_to_half(r.min));
    uint8_t* qs = block + offsetof(BlockQ4_1, qs);
    for (int j = 0; j < qk4_0 / 2; ++j) {
      const int q0 = truncate_clamped((x[j] - r.min) * id + 0.5f, 0, 15);
      const int q1 = truncate_clamped((x[j + qk4_0 / 2] - r.min) * id + 0.5f, 0, 15);
      qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void encode_q5_0(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float* x = src + b * qk5_0;
    uint8_t* block = dst + b * static_cast<int64_t>(sizeof(BlockQ5_0));  // d | qh (u32) | qs[16]
    const float d = signed_absmax(x, qk5_0) / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_u16(block + offsetof(BlockQ5_0, d), float_to_half(d));
    uint8_t* qs = block + offsetof(BlockQ5_0, qs);
    uint32_t qh = 0;
    for (int j = 0; j < qk5_0 / 2; ++j) {
      const int q0 = truncate_clamped(x[j] * id + 16.5f, 0, 31);
      const int q1 = truncate_clamped(x[j + qk5_0 / 2] * id + 16.5f, 0, 31);
      qs[j] = static_cast<uint8_t>((q0 & 0x0f) | ((q1 & 0x0f) << 4));
      qh |= static_cast<uint32_t>(q0 >> 4) << j;
      qh |= static_cast<uint32_t>(q1 >> 4) << (j + qk5_0 / 2);
    }
    std::memcpy(block + offsetof(BlockQ5_0, qh), &qh, sizeof qh);
  }
}

void encode_q5_1(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float* x = src + b * qk5_0;
    uint8_t* block = dst + b * static_cast<int64_t>(sizeof(BlockQ5_1));  // d | m | qh (u32) | qs[16]
    const MinMax r = min_max(x, qk5_0);
    const float d = (r.max - r.min) / 31;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_u16(block + offsetof(BlockQ5_1, d), float_to_half(d));
    store_u16(block + offsetof(BlockQ5_1, m), float_to_half(r.min));
    uint8_t* qs = block + offsetof(BlockQ5_1, qs);
    uint32_t qh = 0;
    for (int j = 0; j < qk5_0 / 2; ++j) {
      const int q0 = truncate_clamped((x[j] - r.min) * id + 0.5f, 0, 31);
      const int q1 = truncate_clamped((x[j + qk5_0 / 2] - r.min) * id + 0.5f, 0, 31);
      qs[j] = static_cast<uint8_t>((q0 & 0x0f) | ((q1 & 0x0f) << 4));
      qh |= static_cast<uint32_t>(q0 >> 4) << j;
      qh |= static_cast<uint32_t>(q1 >> 4) << (j + qk5_0 / 2);
    }
    std::memcpy(block + offsetof(BlockQ5_1, qh), &qh, sizeof qh);
  }
}

void encode_q8_0(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float* x = src + b * qk8_0;
    uint8_t* block = dst + b * static_cast<int64_t>(sizeof(BlockQ8_0));  // d | qs[32] (int8)
    const float d = absmax(x, qk8_0) / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_u16(block + offsetof(BlockQ8_0, d), float_to_half(d));
    auto* qs = reinterpret_cast<int8_t*>(block + offsetof(BlockQ8_0, qs));
    for (int j = 0; j < qk8_0; ++j) qs[j] = round_to_int8(x[j] * id);
  }
}

void encode_q8_1(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float* x = src + b * qk8_0;
    uint8_t* block = dst + b * static_cast<int64_t>(sizeof(BlockQ8_1));  // d | s | qs[32] (int8)
    const float d = absmax(x, qk8_0) / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_u16(block + offsetof(BlockQ8_1, d), float_to_half(d));
    auto* qs = reinterpret_cast<int8_t*>(block + offsetof(BlockQ8_1, qs));
    int sum = 0;
    for (int j = 0; j < qk8_0; ++j) {
      qs[j] = round_to_int8(x[j] * id);
      sum += qs[j];
    }
    store_u16(block + offsetof(BlockQ8_1, s), float_to_half(static_cast<float>(sum) * d));
  }
}

void encode_mxfp4(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float* x = src + b * qk_mxfp4;
    uint8_t* block = dst + b * static_cast<int64_t>(sizeof(BlockMxfp4));  // e | qs[16]
    float amax = 0.0f;
    for (int j = 0; j < qk_mxfp4; ++j) {
      if (amax < std::fabs(x[j])) amax = std::fabs(x[j]);
    }
    // The exponent puts amax in [4, 8) times the unit, so the largest value lands on 4, 6 (or 8, 12
    // doubled). ggml casts a negative result (amax < 2^-125) to uint8 without a check; here it is 0.
    uint8_t e = 0;
    if (amax > 0.0f) {
      const float biased = std::floor(std::log2(amax)) - 2 + 127;
      e = static_cast<uint8_t>(biased < 0.0f ? 0.0f : biased);
    }
    const float d = e8m0_to_float_half(e);
    block[offsetof(BlockMxfp4, e)] = e;
    uint8_t* qs = block + offsetof(BlockMxfp4, qs);
    for (int j = 0; j < qk_mxfp4 / 2; ++j) {
      qs[j] = static_cast<uint8_t>(nearest_e2m1(x[j], d) | (nearest_e2m1(x[j + qk_mxfp4 / 2], d) << 4));
    }
  }
}

}  // namespace latte::quant
