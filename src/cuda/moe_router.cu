// moe_route(): one warp per token (the rule itself is moe::route_token in moe_route.cuh); lane l owns
// experts l, l + 32, ... (at most 8 each). Softmax reductions and the top-k argmax are warp shuffles on
// (value, index) pairs with the lower index winning ties; group sums go through shared memory. Bytes:
// logits read once + 8 bytes per choice.
#include "cuda/moe_router.hpp"

#include <latte/error.hpp>

#include <cmath>
#include <string>

#include "cuda/check.hpp"
#include "cuda/launch.cuh"
#include "cuda/moe_route.cuh"

namespace latte::cuda {
namespace {

constexpr int kRouterWarps = 4;

__global__ void __launch_bounds__(32 * kRouterWarps) moe_router_kernel(const MoeRouterParams p) {
  wait_for_producers();  // see launch.cuh
  allow_dependents();
  __shared__ float select_smem[kRouterWarps][moe_max_experts];
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int t = static_cast<int>(blockIdx.x) * kRouterWarps + warp;
  if (t >= p.n_tokens) return;
  moe::route_token(p, p.logits + t * p.logits_stride, select_smem[warp], lane, p.ids + t * p.k, p.weights + t * p.k);
}

void require_arg(bool ok, const std::string& what) {
  if (!ok) throw Error(ErrorCode::invalid_argument, "moe_route: " + what);
}

}  // namespace

void check_moe_route(const MoeRouterParams& p) {
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
}

void moe_route(const MoeRouterParams& p, cudaStream_t stream) {
  check_moe_route(p);
  if (p.n_tokens == 0) return;
  const dim3 grid(static_cast<unsigned>((p.n_tokens + kRouterWarps - 1) / kRouterWarps));
  launch_kernel(moe_router_kernel, grid, 32 * kRouterWarps, 0, stream, p);
}

}  // namespace latte::cuda
