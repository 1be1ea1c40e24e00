// moe_route(): one warp per token; lane l owns experts l, l + 32, ... (at most 8 each). Softmax
// reductions and the top-k argmax are warp shuffles on (value, index) pairs with the lower index
// winning ties; group sums go through shared memory. Bytes: logits read once + 8 bytes per choice.
#include "cuda/moe_router.hpp"

#include <latte/error.hpp>

#include <cmath>
#include <string>

#include "cuda/check.hpp"
#include "cuda/launch.cuh"

namespace latte::cuda {
namespace {

constexpr int kRouterWarps = 4;
constexpr int kPerLane = moe_max_experts / 32;

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

__global__ void __launch_bounds__(32 * kRouterWarps) moe_router_kernel(const MoeRouterParams p) {
  wait_for_producers();  // see launch.cuh
  allow_dependents();
  __shared__ float select_smem[kRouterWarps][moe_max_experts];
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int t = static_cast<int>(blockIdx.x) * kRouterWarps + warp;
  if (t >= p.n_tokens) return;
  const float* logits = p.logits + t * p.logits_stride;
  const int E = p.n_experts;

  float score[kPerLane], select[kPerLane];
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + 32 * i;
    float v = e < E ? logits[e] : -INFINITY;
    if (isnan(v)) v = -INFINITY;
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
    if (isnan(s)) s = -INFINITY;
    select[i] = s;
    if (e < E) eligible |= 1u << i;
  }

  if (p.n_groups > 1) {
    const int group_size = E / p.n_groups;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      if (lane + 32 * i < E) select_smem[warp][lane + 32 * i] = select[i];
    }
    __syncwarp();
    // lane g < n_groups: sum of its group's top-2 selection scores
    float group_score = -INFINITY;
    if (lane < p.n_groups) {
      float top1 = -INFINITY, top2 = -INFINITY;
      for (int e = lane * group_size; e < (lane + 1) * group_size; ++e) {
        const float v = select_smem[warp][e];
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
      p.ids[t * p.k + j] = chosen[j];
      p.weights[t * p.k + j] = weight[j] * norm * p.scale;
    }
  }
}

void require_arg(bool ok, const std::string& what) {
  if (!ok) throw Error(ErrorCode::invalid_argument, "moe_route: " + what);
}

}  // namespace

void moe_route(const MoeRouterParams& p, cudaStream_t stream) {
  require_arg(p.logits != nullptr && p.ids != nullptr && p.weights != nullptr, "logits, ids and weights must be set");
  require_arg(p.n_experts >= 1 && p.n_experts <= moe_max_experts,
              "n_experts = " + std::to_string(p.n_experts) + " outside 1..256");
  require_arg(p.logits_stride >= p.n_experts, "logits_stride < n_experts");
  require_arg(p.k >= 1 && p.k <= moe_max_k && p.k <= p.n_experts, "k = " + std::to_string(p.k) + " outside 1..8");
  require_arg(p.n_groups >= 1 && p.n_groups <= moe_max_expert_groups && p.n_experts % p.n_groups == 0,
              "n_groups = " + std::to_string(p.n_groups) + " must be in 1..8 and divide n_experts");
  require_arg(p.groups_used >= 1 && p.groups_used <= p.n_groups, "groups_used outside 1..n_groups");
  require_arg(p.k <= p.groups_used * (p.n_experts / p.n_groups), "k exceeds the experts of the kept groups");
  require_arg(p.gating == MoeGating::softmax || p.gating == MoeGating::sigmoid, "unknown gating function");
  require_arg(std::isfinite(p.scale), "scale must be finite");
  require_arg(p.n_tokens >= 0, "n_tokens < 0");
  if (p.n_tokens == 0) return;
  const dim3 grid(static_cast<unsigned>((p.n_tokens + kRouterWarps - 1) / kRouterWarps));
  launch_kernel(moe_router_kernel, grid, 32 * kRouterWarps, 0, stream, p);
}

}  // namespace latte::cuda
