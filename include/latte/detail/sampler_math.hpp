// Building blocks of latte::Sampler that must give bit-identical results on every platform: the
// random number generator and an exp() made only of IEEE-754 additions, multiplications and bit
// manipulation. Not part of the stable API; included by <latte/sampler.hpp>.
//
//   latte::SamplerRng rng(42);
//   float u = rng.uniform();  // in [0, 1), the same sequence on every platform
#pragma once

#include <array>
#include <bit>
#include <cstdint>

// Forces inlining of the per-element routines: the loops over the vocabulary only vectorise when
// the call is inlined, which compilers otherwise decide differently from one translation unit to
// the next.
#if defined(_MSC_VER) && !defined(__clang__)
#define LATTE_SAMPLER_INLINE __forceinline
#else
#define LATTE_SAMPLER_INLINE inline __attribute__((always_inline))
#endif

namespace latte {

/// The sampler's random number generator: xoshiro256** (Blackman & Vigna, 2018) whose 256-bit state
/// is filled from the 64-bit seed by four outputs of splitmix64. Implemented here so that a seed
/// gives the same sequence on every platform and standard library (the <random> distributions are
/// implementation-defined).
class SamplerRng {
 public:
  /// Seeds the state with splitmix64(seed), four times.
  explicit SamplerRng(uint64_t seed) noexcept {
    uint64_t x = seed;
    for (uint64_t& word : state_) word = splitmix64(x);
  }

  /// A generator continuing from `state` (as returned by state()); the state must not be all zero.
  static SamplerRng from_state(const std::array<uint64_t, 4>& state) noexcept {
    SamplerRng rng(0);
    rng.state_ = state;
    return rng;
  }
  /// The 256-bit state, to save and later resume the exact stream.
  [[nodiscard]] std::array<uint64_t, 4> state() const noexcept { return state_; }

  /// The next 64 random bits.
  uint64_t next() noexcept {
    const uint64_t result = std::rotl(state_[1] * 5u, 7) * 9u;
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = std::rotl(state_[3], 45);
    return result;
  }

  /// A uniform float in [0, 1): the top 24 bits of next() times 2^-24 (every value is exact).
  float uniform() noexcept { return static_cast<float>(next() >> 40) * 0x1.0p-24f; }

  /// One step of splitmix64 (Steele, Lea & Flood, 2014): advances `x` and returns a mixed output.
  static uint64_t splitmix64(uint64_t& x) noexcept {
    x += 0x9e3779b97f4a7c15u;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
  }

 private:
  std::array<uint64_t, 4> state_;
};

namespace detail {

/// max(x, lowest) for x <= 0 and lowest < 0 (x = -inf included), computed on the bit patterns: for
/// non-positive floats the pattern grows with the magnitude, and an integer select vectorises where
/// a float compare-and-select is turned into a branch by compilers that preserve FP traps.
LATTE_SAMPLER_INLINE float clamp_below(float x, float lowest) noexcept {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t lowest_bits = std::bit_cast<uint32_t>(lowest);
  return std::bit_cast<float>(bits < lowest_bits ? bits : lowest_bits);
}

/// exp(x) for x <= 0 (the sampler only exponentiates logit - max_logit), relative error < 4e-7,
/// exactly 0 below -87.7 (including -inf); x must not be positive or NaN. Written with one IEEE operation per statement
/// so no compiler may fuse a multiply-add (C/C++ contraction applies only inside one expression), which makes the
/// result bit-identical across compilers and CPUs. Free of branches and of data-dependent selects on the result, so
/// loops over it vectorise even under the default -ftrapping-math.
LATTE_SAMPLER_INLINE float exp_nonpositive(float x) noexcept {
  constexpr float kLowest = -104.0f;              // below this every result is 0 anyway
  constexpr float kLog2e = 1.44269504088896341f;  // 1 / ln 2
  constexpr float kLn2Hi = 0.693359375f;          // ln 2 split in two (Cody & Waite): 9-bit high part,
  constexpr float kLn2Lo = -2.12194440e-4f;       // so n * kLn2Hi is exact, and the remainder
  constexpr float kRoundMagic = 12582912.0f;      // 1.5 * 2^23: adding it rounds to an integer
  const float xc = clamp_below(x, kLowest);
  // n = round(x / ln 2), r = x - n ln 2 with |r| <= ln(2) / 2.
  float n = xc * kLog2e;
  n = n + kRoundMagic;
  n = n - kRoundMagic;
  float hi = n * kLn2Hi;
  float r = xc - hi;
  float lo = n * kLn2Lo;
  r = r - lo;
  // exp(r) by its Taylor polynomial to degree 6 (truncation error < 1.2e-7 on |r| <= 0.347), Horner.
  float p = 1.0f / 720.0f;
  p = p * r;
  p = p + 1.0f / 120.0f;
  p = p * r;
  p = p + 1.0f / 24.0f;
  p = p * r;
  p = p + 1.0f / 6.0f;
  p = p * r;
  p = p + 0.5f;
  p = p * r;
  p = p + 1.0f;
  p = p * r;
  p = p + 1.0f;
  // times 2^n built from its exponent bits; n < -126 (x below about -87.7) gives exponent field 0,
  // a scale of exactly 0 and so a result of exactly 0.
  int32_t exponent = static_cast<int32_t>(n) + 127;
  exponent = exponent > 0 ? exponent : 0;
  const float scale = std::bit_cast<float>(exponent << 23);
  return p * scale;
}

}  // namespace detail
}  // namespace latte
