// The passes of latte::Sampler that touch the whole vocabulary, written so compilers vectorise them
// (raw pointers, fixed-width lanes, no early exits) while staying deterministic: every reduction
// combines its lanes in a fixed order, so the result does not depend on the vector width.
// Not part of the stable API; included by <latte/sampler.hpp>.
//
//   float max = latte::detail::max_and_check(logits, n, bad);
//   latte::detail::exp_weights(out, weights, n, max, 1.0f / temperature);
#pragma once

#include <latte/detail/sampler_math.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>

#if defined(__SSE2__) || defined(_M_X64) || defined(_M_AMD64)
#include <emmintrin.h>
#define LATTE_SAMPLER_SSE2 1
#else
#define LATTE_SAMPLER_SSE2 0
#endif

namespace latte::detail {

inline constexpr size_t kLanes = 16;  // independent accumulators per pass

/// The largest of x[0, n) (-inf for n == 0); sets `bad` when some value is NaN or +inf (NaNs do
/// not take part in the maximum). Max is exact, so the lane split cannot change the result.
inline float max_and_check(const float* x, size_t n, bool& bad) noexcept {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  float m = -kInf;
  size_t tail = 0;  // first index the scalar loop handles
#if LATTE_SAMPLER_SSE2
  // Four SSE registers of maxima and of "not below +inf" flags (the explicit form: compilers do not
  // vectorise a float max reduction without -ffast-math).
  const __m128 inf = _mm_set1_ps(kInf);
  __m128 m0 = _mm_set1_ps(-kInf), m1 = m0, m2 = m0, m3 = m0;
  __m128 f0 = _mm_setzero_ps(), f1 = f0, f2 = f0, f3 = f0;
  tail = n - n % 16;
  for (size_t i = 0; i < tail; i += 16) {
    const __m128 v0 = _mm_loadu_ps(x + i), v1 = _mm_loadu_ps(x + i + 4);
    const __m128 v2 = _mm_loadu_ps(x + i + 8), v3 = _mm_loadu_ps(x + i + 12);
    m0 = _mm_max_ps(v0, m0), m1 = _mm_max_ps(v1, m1), m2 = _mm_max_ps(v2, m2), m3 = _mm_max_ps(v3, m3);
    f0 = _mm_or_ps(f0, _mm_cmpnlt_ps(v0, inf)), f1 = _mm_or_ps(f1, _mm_cmpnlt_ps(v1, inf));
    f2 = _mm_or_ps(f2, _mm_cmpnlt_ps(v2, inf)), f3 = _mm_or_ps(f3, _mm_cmpnlt_ps(v3, inf));
  }
  alignas(16) float lanes[4];
  _mm_store_ps(lanes, _mm_max_ps(_mm_max_ps(m0, m1), _mm_max_ps(m2, m3)));
  for (float v : lanes) m = v > m ? v : m;
  bad = _mm_movemask_ps(_mm_or_ps(_mm_or_ps(f0, f1), _mm_or_ps(f2, f3))) != 0;
#else
  bad = false;
#endif
  for (size_t i = tail; i < n; ++i) {
    m = x[i] > m ? x[i] : m;
    bad |= !(x[i] < kInf);
  }
  return m;
}

/// The largest of x[0, n) (-inf for n == 0), for data already checked by max_and_check().
inline float max_of(const float* x, size_t n) noexcept {
  bool unused = false;
  return max_and_check(x, n, unused);
}

/// Whether some x[i] in [0, n) is > threshold (false for NaNs).
inline bool any_above(const float* x, size_t n, float threshold) noexcept {
  size_t tail = 0;  // first index the scalar loop handles
#if LATTE_SAMPLER_SSE2
  const __m128 t = _mm_set1_ps(threshold);
  __m128 hit = _mm_setzero_ps();
  tail = n - n % 8;
  for (size_t i = 0; i < tail; i += 8) {
    hit = _mm_or_ps(hit, _mm_cmpgt_ps(_mm_loadu_ps(x + i), t));
    hit = _mm_or_ps(hit, _mm_cmpgt_ps(_mm_loadu_ps(x + i + 4), t));
  }
  if (_mm_movemask_ps(hit) != 0) return true;
#endif
  for (size_t i = tail; i < n; ++i) {
    if (x[i] > threshold) return true;
  }
  return false;
}

/// The first index i with x[i] == value (n when there is none), testing a block of 64 at a time.
inline size_t first_index_of(const float* x, size_t n, float value) noexcept {
  constexpr size_t kBlock = 64;
  const size_t full = n - n % kBlock;
  size_t start = full;  // where the element-wise search begins: the first block with a hit
  for (size_t b = 0; b < full; b += kBlock) {
    int32_t hit = 0;
    for (size_t k = 0; k < kBlock; ++k) hit |= x[b + k] == value ? 1 : 0;
    if (hit) {
      start = b;
      break;
    }
  }
  for (size_t i = start; i < n; ++i) {
    if (x[i] == value) return i;
  }
  return n;
}

/// w[i] = exp((logits[i] - max) * inv_temperature); logits <= max, so every weight is in [0, 1].
inline void exp_weights(const float* logits, float* w, size_t n, float max, float inv_temperature) noexcept {
  for (size_t i = 0; i < n; ++i) {
    const float d = logits[i] - max;
    const float s = d * inv_temperature;
    w[i] = exp_nonpositive(s);
  }
}

/// As exp_weights, and bins[i] = min(max_bin, floor(-s * bins_per_unit)) for the scaled logit s.
/// The bin never decreases as the logit decreases.
inline void exp_weights_and_bins(const float* logits, float* w, uint8_t* bins, size_t n, float max,
                                 float inv_temperature, float bins_per_unit, uint8_t max_bin) noexcept {
  const int32_t last = max_bin;
  for (size_t i = 0; i < n; ++i) {
    const float d = logits[i] - max;
    const float s = d * inv_temperature;
    w[i] = exp_nonpositive(s);
    const float b = clamp_below(s, -1e6f) * -bins_per_unit;  // finite even for -inf logits
    const int32_t bin = static_cast<int32_t>(b);
    bins[i] = static_cast<uint8_t>(bin < last ? bin : last);
  }
}

/// The sum of w[0, n) in double precision, lanes combined in a fixed order.
inline double sum_of(const float* w, size_t n) noexcept {
  constexpr size_t kSumLanes = 8;
  double lane[kSumLanes] = {};
  const size_t tail = n - n % kSumLanes;
  for (size_t i = 0; i < tail; i += kSumLanes) {
    for (size_t k = 0; k < kSumLanes; ++k) lane[k] += static_cast<double>(w[i + k]);
  }
  for (size_t i = tail; i < n; ++i) lane[0] += static_cast<double>(w[i]);
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

}  // namespace latte::detail
