// Scale searches of ggml's reference K-quant quantizers (see kquant_search.hpp). Every expression
// keeps ggml's evaluation order: C evaluates a*b*c as (a*b)*c and a+b-c as (a+b)-c, int operands are
// converted to float where they meet a float, and nothing is fused (-ffp-contract=off), so each
// comparison sees the same float bits as ggml's and makes the same choice.
#include "quant/kquant_search.hpp"

#include <cmath>
#include <cstdint>

namespace latte::quant {
namespace {

inline int clamp_int(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// The value of largest magnitude (the first on ties) with its sign, and that magnitude.
struct SignedMax {
  float value;
  float magnitude;
};
inline SignedMax signed_max(const float* x, int n) {
  SignedMax m{0.0f, 0.0f};
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > m.magnitude) {
      m.magnitude = ax;
      m.value = x[i];
    }
  }
  return m;
}

}  // namespace

float affine_scale_search(const float* x, int n, const float* weights, int nmax, ScaleSteps steps, bool use_abs_error,
                          uint8_t* levels, uint8_t* scratch, float& negated_min) {
  float min = x[0];
  float max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) levels[i] = 0;
    negated_min = -min;
    return 0.0f;
  }
  const auto error_of = [use_abs_error](float diff) { return use_abs_error ? std::fabs(diff) : diff * diff; };

  // Start: the grid spanning [min, max] exactly.
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = round_nearest_even(iscale * (x[i] - min));
    levels[i] = static_cast<uint8_t>(clamp_int(l, 0, nmax));
    const float diff = scale * static_cast<float>(levels[i]) + min - x[i];
    best_error += weights[i] * error_of(diff);
  }
  if (steps.steps < 1) {
    negated_min = -min;
    return scale;
  }

  for (int is = 0; is <= steps.steps; ++is) {
    iscale = (steps.first_offset + steps.step * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0;
    float sum_l2 = 0;
    float sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_int(round_nearest_even(iscale * (x[i] - min)), 0, nmax);
      scratch[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      const float fl = static_cast<float>(l);
      sum_l += w * fl;
      sum_l2 += w * fl * fl;
      sum_xl += w * fl * x[i];
    }
    // Weighted least squares for x ~ this_scale * l + this_min.
    const float determinant = sum_w * sum_l2 - sum_l * sum_l;
    if (determinant > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / determinant;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / determinant;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float error = 0;
      for (int i = 0; i < n; ++i) {
        const float diff = this_scale * static_cast<float>(scratch[i]) + this_min - x[i];
        error += weights[i] * error_of(diff);
      }
      if (error < best_error) {
        for (int i = 0; i < n; ++i) levels[i] = scratch[i];
        best_error = error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  negated_min = -min;
  return scale;
}

float symmetric_scale_search(const float* x, int n, int nmax, int8_t* levels) {
  const SignedMax anchor = signed_max(x, n);
  if (anchor.magnitude < k_all_zero_threshold) {
    for (int i = 0; i < n; ++i) levels[i] = 0;
    return 0.0f;
  }
  // Sums of the x^2-weighted least-squares fit on the grid 1/iscale; writes levels when asked.
  const auto fit = [&](float iscale, float& sum_lx, float& sum_l2, bool write_levels) {
    sum_lx = 0;
    sum_l2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_int(round_nearest_even(iscale * x[i]), -nmax, nmax - 1);
      if (write_levels) levels[i] = static_cast<int8_t>(l + nmax);
      const float w = x[i] * x[i];
      const float fl = static_cast<float>(l);
      sum_lx += w * x[i] * fl;
      sum_l2 += w * fl * fl;
    }
  };
  float sum_lx;
  float sum_l2;
  fit(static_cast<float>(-nmax) / anchor.value, sum_lx, sum_l2, true);
  float scale = sum_l2 != 0 ? sum_lx / sum_l2 : 0.0f;
  float best = scale * sum_lx;  // the error reduction of the fit; larger is better
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    const float iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / anchor.value;
    fit(iscale, sum_lx, sum_l2, false);
    if (sum_l2 > 0 && sum_lx * sum_lx > best * sum_l2) {
      fit(iscale, sum_lx, sum_l2, true);
      scale = sum_lx / sum_l2;
      best = scale * sum_lx;
    }
  }
  return scale;
}

float q3_scale_search(const float* x, int n, int nmax, int8_t* levels) {
  const SignedMax anchor = signed_max(x, n);
  if (anchor.magnitude < k_all_zero_threshold) {
    for (int i = 0; i < n; ++i) levels[i] = 0;
    return 0.0f;
  }
  const float iscale = static_cast<float>(-nmax) / anchor.value;
  float sum_lx = 0;
  float sum_l2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = clamp_int(round_nearest_even(iscale * x[i]), -nmax, nmax - 1);
    levels[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sum_lx += w * x[i] * static_cast<float>(l);
    sum_l2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  // Coordinate descent: move one level to where the fit without it would put it, if that helps.
  for (int pass = 0; pass < 5; ++pass) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      const float old_l = static_cast<float>(levels[i]);
      float slx = sum_lx - w * x[i] * old_l;
      if (slx > 0) {
        float sl2 = sum_l2 - w * old_l * old_l;
        const int new_l = clamp_int(round_nearest_even(x[i] * sl2 / slx), -nmax, nmax - 1);
        if (new_l != levels[i]) {
          const float fl = static_cast<float>(new_l);
          slx += w * x[i] * fl;
          sl2 += w * fl * fl;
          if (sl2 > 0 && slx * slx * sum_l2 > sum_lx * sum_lx * sl2) {
            levels[i] = static_cast<int8_t>(new_l);
            sum_lx = slx;
            sum_l2 = sl2;
            ++changed;
          }
        }
      }
    }
    if (changed == 0) break;
  }
  for (int i = 0; i < n; ++i) levels[i] = static_cast<int8_t>(levels[i] + nmax);
  return sum_l2 > 0.0f ? sum_lx / sum_l2 : 0.0f;
}

}  // namespace latte::quant
