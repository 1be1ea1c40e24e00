// The rotary angle of one pair as rope_yarn.hpp defines it (YaRN-corrected, computed in double), shared
// by the rope kernel (rope_yarn.cu) and the fused decode step (decode_step_kernel.cu).
//
//   float c, s;  rope_cos_sin(pos, i, inv_freq[i], p.freq_scale, p.ext_factor, p.corr, c, s);
#pragma once

#include "cuda/rope_yarn.hpp"

namespace latte::cuda {

/// cos and sin of pair i's angle at position `pos`; `inv_freq` = base^(-2i / n_rot).
__device__ __forceinline__ void rope_cos_sin(double pos, int i, double inv_freq, float freq_scale, float ext_factor,
                                             YarnCorrDims corr, float& cos_out, float& sin_out) {
  const double theta_extrap = pos * inv_freq;
  const double theta_interp = static_cast<double>(freq_scale) * theta_extrap;
  double theta = theta_interp;
  if (ext_factor != 0.0f) {
    const double y = (i - static_cast<double>(corr.low)) / fmax(0.001, static_cast<double>(corr.high - corr.low));
    const double ramp = 1.0 - fmin(1.0, fmax(0.0, y));
    const double mix = ramp * ext_factor;
    theta = theta_interp * (1.0 - mix) + theta_extrap * mix;
  }
  double s, c;
  sincos(theta, &s, &c);
  cos_out = static_cast<float>(c);
  sin_out = static_cast<float>(s);
}

}  // namespace latte::cuda
