// Encoders of IQ4_NL and IQ4_XS making the choices of ggml's quantize_iq4_nl / quantize_iq4_xs without an
// importance matrix (what llama.cpp's quantizer writes a file with; for IQ4_XS also quantize_row_iq4_xs_ref, while
// quantize_row_iq4_nl_ref skips the search below). Per group of 32 values, each value goes to the nearest of the
// 16 levels k_iq4_levels under a trial scale; 16 trial scales (the largest magnitude on level 127, then on
// -127 + i for i = -7..7) are refit by x^2-weighted least squares and the best fit is kept. IQ4_XS then stores the
// eight group scales as 6-bit multiples of one fp16 super-block scale and rounds every value again against them.
// Same bytes as ggml on the same finite input.
#include <latte/quant_blocks.hpp>

#include "quant/half_float.hpp"
#include "quant/kquant_search.hpp"
#include "quant/row_codecs.hpp"

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace latte::quant {
namespace {

constexpr int k_trials = 7;                     // trial scales on each side of the anchored one

// For each integer i in [levels[0], levels[15]): the last level not above i. The levels are integers, so for v in
// [i, i + 1) the last level not above v is this one.
constexpr int k_level_span = k_iq4_levels[15] - k_iq4_levels[0];
constexpr auto k_last_level_at = [] {
  std::array<uint8_t, k_level_span> t{};
  int lo = 0;
  for (int i = 0; i < k_level_span; ++i) {
    while (lo < 15 && k_iq4_levels[lo + 1] <= i + k_iq4_levels[0]) ++lo;
    t[static_cast<size_t>(i)] = static_cast<uint8_t>(lo);
  }
  return t;
}();

// The index of the level nearest to v (the lower one on a tie), as ggml's bisection finds it: the last level not
// above v from a table by floor(v) instead of a bisection (the encoder makes 16 trial roundings of every value,
// and the bisection's branches mispredicted half the time), then ggml's comparison. A NaN gets 15, as there.
int nearest_level(float v) {
  if (v <= static_cast<float>(k_iq4_levels[0])) return 0;
  if (!(v < static_cast<float>(k_iq4_levels[15]))) return 15;
  const int lo = k_last_level_at[static_cast<size_t>(static_cast<int>(std::floor(v)) - k_iq4_levels[0])];
  return v - static_cast<float>(k_iq4_levels[lo]) < static_cast<float>(k_iq4_levels[lo + 1]) - v ? lo : lo + 1;
}

// The x^2-weighted sums of one trial: sum w q x and sum w q^2 over the group, q the level nearest inv * x.
void trial_sums(const float* x, const float* weights, float inv, float& sum_qx, float& sum_q2) {
  sum_qx = 0;
  sum_q2 = 0;
  for (int j = 0; j < 32; ++j) {
    const float q = static_cast<float>(k_iq4_levels[nearest_level(inv * x[j])]);
    const float w = weights[j];
    sum_qx += w * q * x[j];
    sum_q2 += w * q * q;
  }
}

// The scale of one group of 32 values (0 when every |x| is below the threshold).
float group_scale(const float* x) {
  float weights[32];
  for (int j = 0; j < 32; ++j) weights[j] = x[j] * x[j];
  float amax = 0, max = 0;  // the value of largest magnitude, the first one on a tie
  for (int j = 0; j < 32; ++j) {
    const float a = std::fabs(x[j]);
    if (a > amax) {
      amax = a;
      max = x[j];
    }
  }
  if (amax < k_all_zero_threshold) return 0;
  const float lowest = static_cast<float>(k_iq4_levels[0]);
  float d = -max / lowest;  // the largest magnitude on level 127 (max / d = 127)
  float sum_qx = 0, sum_q2 = 0;
  trial_sums(x, weights, 1 / d, sum_qx, sum_q2);
  d = sum_qx / sum_q2;
  float best = d * sum_qx;
  for (int trial = -k_trials; trial <= k_trials; ++trial) {
    const float inv = static_cast<float>(trial + k_iq4_levels[0]) / max;
    trial_sums(x, weights, inv, sum_qx, sum_q2);
    if (sum_q2 > 0 && sum_qx * sum_qx > best * sum_q2) {  // strictly better only
      d = sum_qx / sum_q2;
      best = d * sum_qx;
    }
  }
  return d;
}

// Packs 32 level indices into 16 bytes: byte j holds value j (low nibble) and value j + 16 (high nibble).
void pack_group(const uint8_t* levels, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(levels[j] | (levels[j + 16] << 4));
}

}  // namespace

void encode_iq4_nl(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float* x = src + b * qk4_0;
    uint8_t* block = dst + b * static_cast<int64_t>(sizeof(BlockIq4Nl));
    const float d = group_scale(x);
    store_u16(block + offsetof(BlockIq4Nl, d), float_to_half(d));
    const float inv = d != 0 ? 1 / d : 0.0f;
    uint8_t levels[32];
    for (int j = 0; j < 32; ++j) levels[j] = static_cast<uint8_t>(nearest_level(inv * x[j]));
    pack_group(levels, block + offsetof(BlockIq4Nl, qs));
  }
}

void encode_iq4_xs(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float* x = src + b * qk_k;
    uint8_t* block = dst + b * static_cast<int64_t>(sizeof(BlockIq4Xs));
    float scales[8];
    float max_scale = 0, amax_scale = 0;  // the group scale of largest magnitude, the first one on a tie
    for (int s = 0; s < 8; ++s) {
      scales[s] = group_scale(x + 32 * s);
      if (std::fabs(scales[s]) > amax_scale) {
        amax_scale = std::fabs(scales[s]);
        max_scale = scales[s];
      }
    }
    // the super-block scale puts the largest group scale at -32; each group's 6-bit factor is rounded from it
    const float d = -max_scale / 32;
    store_u16(block + offsetof(BlockIq4Xs, d), float_to_half(d));
    const float inv = d != 0 ? 1 / d : 0.0f;
    uint16_t high = 0;
    uint8_t* low = block + offsetof(BlockIq4Xs, scales_l);
    std::memset(low, 0, qk_k / 64);
    for (int s = 0; s < 8; ++s) {
      int l = round_nearest_even(inv * scales[s]);
      l = l < -32 ? -32 : (l > 31 ? 31 : l);
      const float dl = d * static_cast<float>(l);
      const float inv_dl = dl != 0 ? 1 / dl : 0.0f;
      uint8_t levels[32];
      for (int j = 0; j < 32; ++j) levels[j] = static_cast<uint8_t>(nearest_level(inv_dl * x[32 * s + j]));
      pack_group(levels, block + offsetof(BlockIq4Xs, qs) + 16 * s);
      const int stored = l + 32;
      low[s / 2] = static_cast<uint8_t>(low[s / 2] | ((stored & 0xf) << (4 * (s % 2))));
      high = static_cast<uint16_t>(high | ((stored >> 4) << (2 * s)));
    }
    store_u16(block + offsetof(BlockIq4Xs, scales_h), high);
  }
}

}  // namespace latte::quant
