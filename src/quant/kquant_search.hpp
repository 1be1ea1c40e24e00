// The scale searches behind ggml's reference K-quant quantizers. Each picks, for a group of 16 or 32
// values, a scale (and for the affine formats a min) and the integer levels that go with it, by
// trying a small fixed set of candidate scales and keeping the one with the least weighted error.
// They reproduce ggml's choices exactly: same candidates, same float operations in the same order,
// same rounding (round_nearest_even), same tie-breaking (a candidate must be strictly better).
//
//   uint8_t levels[32], scratch[32]; float min;
//   float scale = latte::quant::affine_scale_search({x, 32}, weights, 15, {-1.f, 0.1f, 20}, levels, scratch, min);
#pragma once

#include <bit>
#include <cstdint>

namespace latte::quant {

/// ggml's GROUP_MAX_EPS: a group whose every |x| is below it quantizes to scale 0.
inline constexpr float k_all_zero_threshold = 1e-15f;

/// Rounds to the nearest integer, ties to even, as ggml's nearest_int: adding 1.5 * 2^23 leaves the
/// integer in the low mantissa bits (the float addition does the rounding). Valid for |v| < 2^22;
/// larger magnitudes are clamped first (ggml leaves them undefined).
inline int round_nearest_even(float v) {
  constexpr float limit = 4194303.0f;  // 2^22 - 1
  const float clamped = v < -limit ? -limit : (v > limit ? limit : v);
  const float shifted = clamped + 12582912.0f;  // 1.5 * 2^23
  return static_cast<int>(std::bit_cast<uint32_t>(shifted) & 0x007fffffu) - 0x00400000;
}

/// Candidate scales of affine_scale_search: nmax + first_offset + step * i for i = 0..steps.
struct ScaleSteps {
  float first_offset;
  float step;
  int steps;
};

/// Affine fit x ~ scale * L + min with L in [0, nmax] and min <= 0 (ggml's make_qkx2_quants): starts
/// from the min/max fit, then tries steps+1 stretched grids, refitting scale and min by weighted
/// least squares on each; the error is the weighted |diff| (use_abs_error) or diff^2. Writes the
/// levels of the best fit to `levels` and -min to `negated_min`; `scratch` holds n bytes of work.
/// Returns the scale (0 with all levels 0 when the values are all equal and >= 0).
float affine_scale_search(const float* x, int n, const float* weights, int nmax, ScaleSteps steps, bool use_abs_error,
                          uint8_t* levels, uint8_t* scratch, float& negated_min);

/// Symmetric fit x ~ scale * l with l in [-nmax, nmax) weighted by x^2 (ggml's make_qx_quants with
/// rmse_type 1 and no importance weights): anchors the grid at the value of largest magnitude and
/// tries 18 slightly stretched or shrunk grids, refitting the scale by least squares. Writes the
/// levels offset by nmax (in [0, 2 nmax)) and returns the scale (0 when every |x| < 1e-15).
float symmetric_scale_search(const float* x, int n, int nmax, int8_t* levels);

/// Symmetric fit for Q3_K's 16-value groups (ggml's make_q3_quants with do_rmse): the anchored grid,
/// then up to 5 passes that move single levels when that lowers the x^2-weighted error. Writes levels
/// offset by nmax and returns the scale (0, with levels 0, when every |x| < 1e-15).
float q3_scale_search(const float* x, int n, int nmax, int8_t* levels);

}  // namespace latte::quant
