// rope_yarn(): blocks of (token, group of heads); the first n_rot/2 threads compute pair i's angle (double)
// once per block into shared memory, then all threads rotate the pairs of the block's heads. Bytes: 8 per
// rotated pair read and written.
#include "cuda/rope_yarn.hpp"

#include <latte/error.hpp>

#include <algorithm>
#include <cmath>
#include <string>

#include "cuda/check.hpp"

namespace latte::cuda {
namespace {

constexpr int kRopeThreads = 128;
constexpr int kRopeMaxPairs = 256;  // n_rot up to 512

__global__ void __launch_bounds__(kRopeThreads) rope_yarn_kernel(const RopeYarnParams p, const int heads_per_block) {
  __shared__ float cos_of[kRopeMaxPairs], sin_of[kRopeMaxPairs];
  const int t = static_cast<int>(blockIdx.x);
  const int pairs = p.n_rot / 2;
  const double pos = static_cast<double>(p.positions[t]);
  for (int i = static_cast<int>(threadIdx.x); i < pairs; i += static_cast<int>(blockDim.x)) {
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
    cos_of[i] = static_cast<float>(c);
    sin_of[i] = static_cast<float>(s);
  }
  __syncthreads();
  const int h0 = static_cast<int>(blockIdx.y) * heads_per_block;
  const int n = min(heads_per_block, p.n_heads - h0) * pairs;
  for (int e = static_cast<int>(threadIdx.x); e < n; e += static_cast<int>(blockDim.x)) {
    const int h = h0 + e / pairs, i = e % pairs;
    float* d = p.data + t * p.token_stride + h * p.head_stride + p.rot_offset + 2 * i;
    const float2 x = *reinterpret_cast<const float2*>(d);
    *reinterpret_cast<float2*>(d) = make_float2(x.x * cos_of[i] - x.y * sin_of[i], x.x * sin_of[i] + x.y * cos_of[i]);
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
  if (p.n_rot / 2 > kRopeMaxPairs) {
    throw Error(ErrorCode::unsupported, "rope_yarn: n_rot = " + std::to_string(p.n_rot) + " exceeds " +
                                            std::to_string(2 * kRopeMaxPairs));
  }
  if (reinterpret_cast<uintptr_t>(p.data) % 8 != 0 || p.rot_offset % 2 != 0 || p.head_stride % 2 != 0 ||
      p.token_stride % 2 != 0) {
    throw Error(ErrorCode::invalid_argument, "rope_yarn: data, offsets and strides must keep pairs 8-byte aligned");
  }
  if (p.n_tokens == 0) return;
  // Enough blocks per token to fill the GPU when there are few tokens (decode); one block per token otherwise.
  const int pairs = p.n_rot / 2;
  const int blocks_per_token = std::max(1, std::min(p.n_heads, 264 / std::max(1, p.n_tokens)));
  int heads_per_block = (p.n_heads + blocks_per_token - 1) / blocks_per_token;
  heads_per_block = std::max(heads_per_block, std::max(1, kRopeThreads / std::max(1, pairs)));
  const dim3 grid(static_cast<unsigned>(p.n_tokens), static_cast<unsigned>((p.n_heads + heads_per_block - 1) / heads_per_block));
  rope_yarn_kernel<<<grid, kRopeThreads, 0, stream>>>(p, heads_per_block);
  LATTE_CUDA_CHECK_LAUNCH();
}

}  // namespace latte::cuda
