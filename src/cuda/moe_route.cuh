// The MoE router's per-token rule as a warp-level device function (moe_router.hpp states the rule):
// shared by the router kernel (moe_router.cu) and the fused decode step (decode_step_kernel.cu), so
// that both choose the same experts with the same weights, bit for bit.
//
//   route_token(p, logits_row, select_scratch, lane, ids, weights);   // all 32 lanes of one warp
#pragma once

#include <cstdint>

#include "cuda/moe_router.hpp"

namespace latte::cuda::moe {

inline constexpr int kPerLane = moe_max_experts / 32;

/// (v, i) beats (bv, bi): larger value, or equal value and lower index.
__device__ __forceinline__ bool beats(float v, int i, float bv, int bi) { return v > bv || (v == bv && i < bi); }

/// Warp-wide best (value, index); lanes without a candidate pass (-inf, INT_MAX).
__device__ __forceinline__ void warp_best(float& v, int& i) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (beats(ov, oi, v, i)) v = ov, i = oi;
  }
}

/// Routes one token: `logits` (p.n_experts values, plain loads), `select_scratch` [moe_max_experts]
/// shared memory of this warp. Lane 0 writes ids[0..k) (best first) and weights[0..k).
__device__ __forceinline__ void route_token(const MoeRouterParams& p, const float* logits, float* select_scratch,
                                            int lane, int32_t* ids, float* weights) {
  const int E = p.n_experts;
  float score[kPerLane], select[kPerLane];
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + 32 * i;
    float v = e < E ? logits[e] : -INFINITY;
    if (v != v) v = -INFINITY;  // NaN
    score[i] = v;
    mx = fmaxf(mx, v);
  }
  if (p.gating == MoeGating::softmax) {
#pragma unroll
    for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      score[i] = lane + 32 * i < E ? expf(score[i] - mx) : 0.0f;
      sum += score[i];
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) score[i] /= sum;
  } else {
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) score[i] = lane + 32 * i < E ? 1.0f / (1.0f + expf(-score[i])) : 0.0f;
  }

  unsigned eligible = 0;  // bit i: expert lane + 32 i may still be chosen
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + 32 * i;
    float s = score[i] + (p.selection_bias && e < E ? p.selection_bias[e] : 0.0f);
    if (s != s) s = -INFINITY;  // NaN
    select[i] = s;
    if (e < E) eligible |= 1u << i;
  }

  if (p.n_groups > 1) {
    const int group_size = E / p.n_groups;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      if (lane + 32 * i < E) select_scratch[lane + 32 * i] = select[i];
    }
    __syncwarp();
    // lane g < n_groups: sum of its group's top-2 selection scores
    float group_score = -INFINITY;
    if (lane < p.n_groups) {
      float top1 = -INFINITY, top2 = -INFINITY;
      for (int e = lane * group_size; e < (lane + 1) * group_size; ++e) {
        const float v = select_scratch[e];
        if (v > top1) {
          top2 = top1;
          top1 = v;
        } else if (v > top2) {
          top2 = v;
        }
      }
      group_score = group_size >= 2 ? top1 + top2 : top1;
    }
    unsigned kept_groups = 0;
    bool candidate = lane < p.n_groups;
    for (int r = 0; r < p.groups_used; ++r) {
      float bv = candidate ? group_score : -INFINITY;
      int bi = candidate ? lane : 0x7fffffff;
      warp_best(bv, bi);
      kept_groups |= 1u << bi;
      if (lane == bi) candidate = false;
    }
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int e = lane + 32 * i;
      if (e < E && !((kept_groups >> (e / group_size)) & 1u)) eligible &= ~(1u << i);
    }
  }

  int chosen[moe_max_k];
  float weight[moe_max_k];
  float weight_sum = 0.0f;
  for (int j = 0; j < p.k; ++j) {
    float bv = -INFINITY;
    int bi = 0x7fffffff;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      if (((eligible >> i) & 1u) && beats(select[i], lane + 32 * i, bv, bi)) bv = select[i], bi = lane + 32 * i;
    }
    warp_best(bv, bi);
    const int owner = bi % 32, slot = bi / 32;
    float w = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      if (i == slot) w = score[i];
    }
    w = __shfl_sync(0xffffffffu, w, owner);
    if (lane == owner) eligible &= ~(1u << slot);
    if (j < moe_max_k) {
      chosen[j] = bi;
      weight[j] = w;
    }
    weight_sum += w;
  }
  if (lane == 0) {
    const float norm = p.normalize ? 1.0f / weight_sum : 1.0f;
    for (int j = 0; j < p.k; ++j) {
      ids[j] = chosen[j];
      weights[j] = weight[j] * norm * p.scale;
    }
  }
}

}  // namespace latte::cuda::moe
