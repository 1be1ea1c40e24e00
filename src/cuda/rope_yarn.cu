// rope_yarn(): one block per token; thread i < n_rot/2 computes pair i's angle (double) once and
// rotates that pair in every head. Bytes: 8 per rotated pair read and written.
#include "cuda/rope_yarn.hpp"

#include <latte/error.hpp>

#include <algorithm>
#include <cmath>
#include <string>

#include "cuda/check.hpp"

namespace latte::cuda {
namespace {

__global__ void rope_yarn_kernel(const RopeYarnParams p) {
  const int t = static_cast<int>(blockIdx.x);
  const double pos = static_cast<double>(p.positions[t]);
  for (int i = static_cast<int>(threadIdx.x); i < p.n_rot / 2; i += static_cast<int>(blockDim.x)) {
    const double theta_extrap = pos * pow(static_cast<double>(p.freq_base), -2.0 * i / p.n_rot);
    const double theta_interp = static_cast<double>(p.freq_scale) * theta_extrap;
    double theta = theta_interp;
    if (p.ext_factor != 0.0f) {
      const double y =
          (i - static_cast<double>(p.corr.low)) / fmax(0.001, static_cast<double>(p.corr.high - p.corr.low));
      const double ramp = 1.0 - fmin(1.0, fmax(0.0, y));
      const double mix = ramp * p.ext_factor;
      theta = theta_interp * (1.0 - mix) + theta_extrap * mix;
    }
    double s, c;
    sincos(theta, &s, &c);
    const float cf = static_cast<float>(c), sf = static_cast<float>(s);
    for (int h = 0; h < p.n_heads; ++h) {
      float* d = p.data + t * p.token_stride + h * p.head_stride + p.rot_offset + 2 * i;
      const float x0 = d[0], x1 = d[1];
      d[0] = x0 * cf - x1 * sf;
      d[1] = x0 * sf + x1 * cf;
    }
  }
}

}  // namespace

YarnCorrDims yarn_corr_dims(int n_rot, int n_ctx_orig, float freq_base, float beta_fast, float beta_slow) {
  auto corr_dim = [&](float n_rotations) {
    return static_cast<float>(n_rot) *
           std::log(static_cast<float>(n_ctx_orig) / (n_rotations * 2.0f * static_cast<float>(M_PI))) /
           (2.0f * std::log(freq_base));
  };
  const float start = std::floor(corr_dim(beta_fast));
  const float end = std::ceil(corr_dim(beta_slow));
  return {std::max(0.0f, start), std::min(static_cast<float>(n_rot - 1), end)};
}

void rope_yarn(const RopeYarnParams& p, cudaStream_t stream) {
  if (!p.data || !p.positions || p.n_rot <= 0 || p.n_rot % 2 != 0 || p.n_heads <= 0 || p.rot_offset < 0 ||
      (p.n_heads > 1 && p.head_stride < p.rot_offset + p.n_rot) || p.n_tokens < 0 ||
      (p.n_tokens > 1 && p.token_stride < (p.n_heads - 1) * p.head_stride + p.rot_offset + p.n_rot) ||
      !(p.freq_base > 0.0f) || !(p.freq_scale > 0.0f)) {
    throw Error(ErrorCode::invalid_argument,
                "rope_yarn: invalid layout (n_rot = " + std::to_string(p.n_rot) +
                    ", heads = " + std::to_string(p.n_heads) + ", head_stride = " + std::to_string(p.head_stride) +
                    ", offset = " + std::to_string(p.rot_offset) + ") or frequency parameters");
  }
  if (p.n_tokens == 0) return;
  const int threads = std::min(128, std::max(32, p.n_rot / 2));
  rope_yarn_kernel<<<p.n_tokens, threads, 0, stream>>>(p);
  LATTE_CUDA_CHECK_LAUNCH();
}

}  // namespace latte::cuda
