// rope_yarn(): blocks of (token, group of heads); the first n_rot/2 threads compute pair i's angle (double)
// once per block into shared memory, then all threads rotate the pairs of the block's heads. Bytes: 8 per
// rotated pair read and written.
#include "cuda/rope_yarn.hpp"

#include <latte/error.hpp>

#include <algorithm>
#include <cmath>
#include <string>

#include "cuda/check.hpp"
#include "cuda/kv_cache_layout.cuh"
#include "cuda/launch.cuh"
#include "cuda/rope_angle.cuh"
#include "cuda/split_int8_dot.cuh"
#include "cuda/x_int8.hpp"

namespace latte::cuda {
namespace {

constexpr int kRopeThreads = 128;
constexpr int kRopeMaxPairs = 256;  // n_rot up to 512

/// base^(-2i / n_rot) per pair, computed on the host in double (a kernel argument: no pow per launch).
struct InverseFrequencies {
  double of[kRopeMaxPairs];
};

/// Token t's cache row (RopeYarnParams::cache), or null without one.
__device__ __forceinline__ __nv_bfloat16* cache_row(const RopeYarnParams& p, int t) {
  if (p.cache.data == nullptr) return nullptr;
  const int b = p.cache_batch != nullptr ? p.cache_batch[t] : 0;
  return p.cache.data + paged_rows_offset(p.cache, b, p.positions[t]);
}

__global__ void __launch_bounds__(kRopeThreads)
    rope_yarn_kernel(const RopeYarnParams p, const int heads_per_block, const InverseFrequencies inv) {
  wait_for_producers();  // see launch.cuh
  allow_dependents();
  __shared__ float cos_of[kRopeMaxPairs], sin_of[kRopeMaxPairs];
  const int t = static_cast<int>(blockIdx.x);
  const int pairs = p.n_rot / 2;
  const double pos = static_cast<double>(p.positions[t]);
  for (int i = static_cast<int>(threadIdx.x); i < pairs; i += static_cast<int>(blockDim.x)) {
    rope_cos_sin(pos, i, inv.of[i], p.freq_scale, p.ext_factor, p.corr, cos_of[i], sin_of[i]);
  }
  __syncthreads();
  const int extra =
      static_cast<int>(blockIdx.y) - (static_cast<int>(gridDim.y) - (p.pair_dst != nullptr) - (p.norm_dst != nullptr));
  if (p.norm_dst != nullptr && extra == (p.pair_dst != nullptr ? 1 : 0)) {
    // the normalisation block: sum of squares over the block, then the scaled row
    __shared__ float partial[kRopeThreads / 32];
    const float* x = p.norm_src + t * p.norm_src_stride;
    float sum_sq = 0.0f;
    for (int i = static_cast<int>(threadIdx.x); i < p.norm_n; i += static_cast<int>(blockDim.x)) sum_sq += x[i] * x[i];
#pragma unroll
    for (int o = 16; o > 0; o /= 2) sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, o);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = sum_sq;
    __syncthreads();
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kRopeThreads / 32; ++w) total += partial[w];
    const float inv = rsqrtf(total / static_cast<float>(p.norm_n) + p.norm_eps);
    __nv_bfloat16* row = cache_row(p, t);
    for (int i = static_cast<int>(threadIdx.x); i < p.norm_n; i += static_cast<int>(blockDim.x)) {
      const float v = x[i] * inv * p.norm_weight[i];
      p.norm_dst[t * p.norm_dst_stride + i] = v;
      if (row != nullptr) row[p.cache_norm_offset + i] = __float2bfloat16_rn(v);
    }
    return;
  }
  if (p.pair_dst != nullptr && extra == 0) {
    // the second target: one head of n_rot dims, out of place
    __nv_bfloat16* row = cache_row(p, t);
    for (int i = static_cast<int>(threadIdx.x); i < pairs; i += static_cast<int>(blockDim.x)) {
      const float2 x = *reinterpret_cast<const float2*>(p.pair_src + t * p.pair_src_stride + 2 * i);
      const float2 r = make_float2(x.x * cos_of[i] - x.y * sin_of[i], x.x * sin_of[i] + x.y * cos_of[i]);
      *reinterpret_cast<float2*>(p.pair_dst + t * p.pair_dst_stride + 2 * i) = r;
      if (row != nullptr) {
        *reinterpret_cast<__nv_bfloat162*>(row + p.cache_pair_offset + 2 * i) = __floats2bfloat162_rn(r.x, r.y);
      }
    }
    return;
  }
  const int h0 = static_cast<int>(blockIdx.y) * heads_per_block;
  const int heads = min(heads_per_block, p.n_heads - h0);
  if (p.src != nullptr) {
    // out of place: the unrotated dims [0, rot_offset) of the block's heads first
    const int n_copy = heads * p.rot_offset;
    for (int e = static_cast<int>(threadIdx.x); e < n_copy; e += static_cast<int>(blockDim.x)) {
      const int h = h0 + e / p.rot_offset, d = e % p.rot_offset;
      p.data[t * p.token_stride + h * p.head_stride + d] = p.src[t * p.src_token_stride + h * p.head_stride + d];
    }
  }
  const float* from = p.src != nullptr ? p.src : p.data;
  const int64_t from_stride = p.src != nullptr ? p.src_token_stride : p.token_stride;
  if (p.nope_q != nullptr) {
    // the unrotated dims as records, four threads a unit of 32 values; the trip count is the block's,
    // so every lane of a quad takes part in its shuffles (before the in-place rotation overwrites
    // nothing it reads: the rotated dims start at rot_offset)
    const int units = p.rot_offset / 32, n_units = heads * units, q = static_cast<int>(threadIdx.x) % 4;
    for (int base = 0; base < n_units; base += static_cast<int>(blockDim.x) / 4) {
      const int u = base + static_cast<int>(threadIdx.x) / 4;
      const bool active = u < n_units;
      const int h = h0 + (active ? u / units : 0), unit = active ? u % units : 0;
      const float* x = from + t * from_stride + h * p.head_stride + 32 * unit + 8 * q;
      float v[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] = active ? x[j] : 0.0f;
      split_int8::quantize_unit_quad(p.nope_q + (static_cast<int64_t>(t) * p.n_heads + h) * p.nope_q_stride, units,
                                     unit, v, q, active);
    }
  }
  if (p.nope_bf16 != nullptr) {
    // the unrotated dims as bf16, a pair per thread (read before the in-place rotation, which starts at rot_offset)
    const int nope_pairs = p.rot_offset / 2, n_nope = heads * nope_pairs;
    for (int e = static_cast<int>(threadIdx.x); e < n_nope; e += static_cast<int>(blockDim.x)) {
      const int h = h0 + e / nope_pairs, i = e % nope_pairs;
      const float2 x = *reinterpret_cast<const float2*>(from + t * from_stride + h * p.head_stride + 2 * i);
      *reinterpret_cast<__nv_bfloat162*>(p.nope_bf16 + (static_cast<int64_t>(t) * p.n_heads + h) * p.rot_offset +
                                         2 * i) = __floats2bfloat162_rn(x.x, x.y);
    }
  }
  const int n = heads * pairs;
  for (int e = static_cast<int>(threadIdx.x); e < n; e += static_cast<int>(blockDim.x)) {
    const int h = h0 + e / pairs, i = e % pairs;
    const int64_t dim = h * p.head_stride + p.rot_offset + 2 * i;
    const float2 x = *reinterpret_cast<const float2*>(from + t * from_stride + dim);
    const float2 r = make_float2(x.x * cos_of[i] - x.y * sin_of[i], x.x * sin_of[i] + x.y * cos_of[i]);
    *reinterpret_cast<float2*>(p.data + t * p.token_stride + dim) = r;
    if (p.rot_bf16 != nullptr) {
      *reinterpret_cast<__nv_bfloat162*>(p.rot_bf16 + (static_cast<int64_t>(t) * p.n_heads + h) * p.n_rot + 2 * i) =
          __floats2bfloat162_rn(r.x, r.y);
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
  if (p.n_rot / 2 > kRopeMaxPairs) {
    throw Error(ErrorCode::unsupported,
                "rope_yarn: n_rot = " + std::to_string(p.n_rot) + " exceeds " + std::to_string(2 * kRopeMaxPairs));
  }
  if (reinterpret_cast<uintptr_t>(p.data) % 8 != 0 || p.rot_offset % 2 != 0 || p.head_stride % 2 != 0 ||
      p.token_stride % 2 != 0) {
    throw Error(ErrorCode::invalid_argument, "rope_yarn: data, offsets and strides must keep pairs 8-byte aligned");
  }
  if (p.src != nullptr &&
      (reinterpret_cast<uintptr_t>(p.src) % 8 != 0 || p.src_token_stride % 2 != 0 ||
       (p.n_tokens > 1 && p.src_token_stride < (p.n_heads - 1) * p.head_stride + p.rot_offset + p.n_rot) ||
       (p.n_heads > 1 && p.head_stride != p.rot_offset + p.n_rot))) {
    throw Error(ErrorCode::invalid_argument,
                "rope_yarn: an out-of-place source needs 8-byte aligned pairs, heads of exactly rot_offset + n_rot "
                "dims and a token stride that holds them");
  }
  if ((p.pair_dst != nullptr) != (p.pair_src != nullptr) ||
      (p.pair_dst != nullptr &&
       (reinterpret_cast<uintptr_t>(p.pair_src) % 8 != 0 || reinterpret_cast<uintptr_t>(p.pair_dst) % 8 != 0 ||
        p.pair_src_stride % 2 != 0 || p.pair_dst_stride % 2 != 0 ||
        (p.n_tokens > 1 && (p.pair_src_stride < p.n_rot || p.pair_dst_stride < p.n_rot))))) {
    throw Error(ErrorCode::invalid_argument,
                "rope_yarn: the second target needs both pointers, 8-byte aligned, with strides of at least n_rot");
  }
  if (p.nope_q != nullptr && (p.rot_offset == 0 || !x_int8_records_fit(p.nope_q, p.nope_q_stride, p.rot_offset))) {
    throw Error(ErrorCode::invalid_argument,
                "rope_yarn: q_nope records need rot_offset a positive multiple of 32 (" + std::to_string(p.rot_offset) +
                    "), a 16-byte aligned target and a stride of at least " +
                    std::to_string(x_int8_record_bytes(std::max(p.rot_offset, 0))) + " bytes, a multiple of 16");
  }
  if (p.rot_bf16 != nullptr && reinterpret_cast<uintptr_t>(p.rot_bf16) % 4 != 0) {
    throw Error(ErrorCode::invalid_argument, "rope_yarn: the bf16 copy of the rotated dims must be 4-byte aligned");
  }
  if (p.nope_bf16 != nullptr && (p.rot_offset == 0 || reinterpret_cast<uintptr_t>(p.nope_bf16) % 4 != 0)) {
    throw Error(ErrorCode::invalid_argument,
                "rope_yarn: the bf16 copy of the unrotated dims needs rot_offset > 0 and a 4-byte aligned target");
  }
  if (p.norm_dst != nullptr &&
      (p.norm_src == nullptr || p.norm_weight == nullptr || p.norm_n <= 0 ||
       (p.n_tokens > 1 && (p.norm_src_stride < p.norm_n || p.norm_dst_stride < p.norm_n)) || !(p.norm_eps >= 0.0f))) {
    throw Error(ErrorCode::invalid_argument, "rope_yarn: the normalisation needs its source, weight, n > 0 (" +
                                                 std::to_string(p.norm_n) +
                                                 "), row strides of at least n and eps >= 0");
  }
  if (p.cache.data != nullptr) {
    check_paged_rows(p.cache, "rope_yarn", "the cache rows");
    if (p.norm_dst == nullptr || p.pair_dst == nullptr || p.cache_norm_offset < 0 || p.cache_pair_offset < 0 ||
        p.cache_pair_offset % 2 != 0 || p.cache.token_stride < p.cache_norm_offset + p.norm_n ||
        p.cache.token_stride < p.cache_pair_offset + p.n_rot) {
      throw Error(ErrorCode::invalid_argument,
                  "rope_yarn: cache rows need the normalisation and the second target, and both segments (from " +
                      std::to_string(p.cache_norm_offset) + " and " + std::to_string(p.cache_pair_offset) +
                      ", the second even) inside a row of " + std::to_string(p.cache.token_stride) + " elements");
    }
  }
  if (p.n_tokens == 0) return;
  // Enough blocks per token to fill the GPU when there are few tokens (decode); one block per token otherwise.
  const int pairs = p.n_rot / 2;
  const int blocks_per_token = std::max(1, std::min(p.n_heads, 264 / std::max(1, p.n_tokens)));
  int heads_per_block = (p.n_heads + blocks_per_token - 1) / blocks_per_token;
  heads_per_block = std::max(heads_per_block, std::max(1, kRopeThreads / std::max(1, pairs)));
  const int head_blocks = (p.n_heads + heads_per_block - 1) / heads_per_block;
  const dim3 grid(static_cast<unsigned>(p.n_tokens),
                  static_cast<unsigned>(head_blocks + (p.pair_dst ? 1 : 0) + (p.norm_dst ? 1 : 0)));
  InverseFrequencies inv;
  for (int i = 0; i < pairs; ++i) inv.of[i] = std::pow(static_cast<double>(p.freq_base), -2.0 * i / p.n_rot);
  launch_kernel(rope_yarn_kernel, grid, kRopeThreads, 0, stream, p, heads_per_block, inv);
}

}  // namespace latte::cuda
