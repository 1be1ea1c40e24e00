// moe_sort(): grid of n_experts blocks. Every block builds the full histogram in shared memory
// (order-independent, so deterministic) and the exclusive scan, then block e compacts the pairs of
// expert e in pair order with a ballot-based block scan. Block 0 writes the offsets, the GEMM tile
// list and the group count. moe_combine(): one thread per 4 output columns, choices summed in order.
#include "cuda/moe_dispatch.hpp"

#include <latte/error.hpp>

#include <cstdint>
#include <string>

#include "cuda/check.hpp"
#include "cuda/launch.cuh"
#include "cuda/moe_route.cuh"
#include "cuda/moe_router.hpp"
#include "cuda/row_norm.cuh"
#include "cuda/x_int8.hpp"

namespace latte::cuda {
namespace {

constexpr int kSortThreads = 256;

__global__ void __launch_bounds__(kSortThreads) moe_sort_kernel(const MoeSortParams p) {
  wait_for_producers();  // see launch.cuh
  allow_dependents();
  __shared__ int counts[moe_max_experts];
  __shared__ int offsets[moe_max_experts + 1];
  __shared__ int warp_totals[kSortThreads / 32];
  __shared__ int running;
  __shared__ int32_t routed_ids[moe_sort_route_max_pairs];
  __shared__ float routed_weights[moe_sort_route_max_pairs];
  __shared__ float select_smem[kSortThreads / 32][moe_max_experts];
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int E = p.n_experts, P = p.n_tokens * p.k;
  const int me = static_cast<int>(blockIdx.x);
  const int32_t* ids = p.ids;
  if (p.route.logits != nullptr) {
    // every block routes every token (a warp per token, moe_route's rule); block 0 keeps the choices
    for (int t = warp; t < p.n_tokens; t += kSortThreads / 32) {
      moe::route_token(p.route, p.route.logits + static_cast<int64_t>(t) * p.route.logits_stride, select_smem[warp],
                       lane, routed_ids + t * p.k, routed_weights + t * p.k);
    }
    __syncthreads();
    if (me == 0) {
      for (int i = tid; i < P; i += kSortThreads) {
        p.route.ids[i] = routed_ids[i];
        p.route.weights[i] = routed_weights[i];
      }
    }
    ids = routed_ids;
  }
  // -1: the pair's expert is held by another rank (held_first >= 0), it gets no slot
  auto expert_of = [&](int pair) {
    if (p.held_first < 0) return min(max(ids[pair], 0), E - 1);
    const int local = ids[pair] - p.held_first;
    return local >= 0 && local < E ? local : -1;
  };

  for (int e = tid; e < E; e += kSortThreads) counts[e] = 0;
  if (tid == 0) running = 0;
  __syncthreads();
  for (int i = tid; i < P; i += kSortThreads) {
    const int e = expert_of(i);
    if (e >= 0) {
      atomicAdd(&counts[e], 1);
    } else if (me == 0) {
      p.slot_of_pair[i] = -1;
    }
  }
  __syncthreads();
  if (tid == 0) {
    offsets[0] = 0;
    for (int e = 0; e < E; ++e) offsets[e + 1] = offsets[e] + counts[e];
  }
  __syncthreads();

  // GEMV groups: an expert's pairs in groups of at most group_tokens; this expert's first group index is
  // the number of groups of the experts before it
  const int G = p.group_tokens;
  int group_index = 0;
  if (p.groups != nullptr) {
    for (int e = 0; e < me; ++e) group_index += (counts[e] + G - 1) / G;
    for (int q = tid; q < (counts[me] + G - 1) / G; q += kSortThreads) {
      p.groups[group_index + q].matrix = me;
      p.groups[group_index + q].count = min(counts[me] - G * q, G);
    }
  }

  const int base = offsets[me];
  for (int start = 0; start < P; start += kSortThreads) {
    const int i = start + tid;
    const bool mine = i < P && expert_of(i) == me;
    const unsigned ballot = __ballot_sync(0xffffffffu, mine);
    if (lane == 0) warp_totals[warp] = __popc(ballot);
    __syncthreads();
    int before = running;
    for (int w = 0; w < warp; ++w) before += warp_totals[w];
    if (mine) {
      const int rank = before + __popc(ballot & ((1u << lane) - 1u));
      const int slot = base + rank;
      p.slot_of_pair[i] = slot;
      p.token_of_slot[slot] = i / p.k;
      if (p.groups != nullptr) {
        p.groups[group_index + rank / G].x_row[rank % G] = i / p.k;
        p.groups[group_index + rank / G].y_row[rank % G] = slot;
      }
    }
    __syncthreads();
    if (tid == 0) {
      for (int w = 0; w < kSortThreads / 32; ++w) running += warp_totals[w];
    }
    __syncthreads();
  }

  if (me == 0) {
    for (int e = tid; e <= E; e += kSortThreads) p.expert_offsets[e] = offsets[e];
    if (tid == 0) {
      if (p.tiles != nullptr) {
        int n = 0;
        for (int e = 0; e < E; ++e) {
          for (int r = offsets[e]; r < offsets[e + 1]; r += gemm_tile_rows) {
            p.tiles[n++] = GemmTile{e, r, min(r + gemm_tile_rows, offsets[e + 1])};
          }
        }
        *p.n_tiles = n;
      }
      if (p.groups != nullptr) {
        int n = 0;
        for (int e = 0; e < E; ++e) n += (counts[e] + G - 1) / G;
        *p.n_groups = n;
      }
    }
  }
}

/// Token t's choices: the slot (-1: an expert of another rank, expert parallelism) and weight of each.
struct Choices {
  int slot[moe_max_k];
  float weight[moe_max_k];
};
__device__ __forceinline__ Choices load_choices(const MoeCombineParams& p, int t) {
  Choices c;
#pragma unroll
  for (int j = 0; j < moe_max_k; ++j) {
    c.slot[j] = j < p.k ? p.slot_of_pair[t * p.k + j] : -1;
    c.weight[j] = j < p.k ? p.weights[t * p.k + j] : 0.0f;
  }
  return c;
}

/// Token t's combined values c .. c + 3: (out if accumulating) + add + sum_j weight_j expert_out[slot_j], in
/// choice order; every load issued before the first add.
__device__ __forceinline__ float4 combine_unit(const MoeCombineParams& p, const Choices& ch, int t, int c) {
  const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
  float4 acc = p.accumulate ? *reinterpret_cast<const float4*>(p.out + t * p.out_stride + c) : zero;
  const float4 add = p.add != nullptr ? *reinterpret_cast<const float4*>(p.add + t * p.add_stride + c) : zero;
  float4 v[moe_max_k];
#pragma unroll
  for (int j = 0; j < moe_max_k; ++j) {
    v[j] = ch.slot[j] >= 0
               ? *reinterpret_cast<const float4*>(p.expert_out + static_cast<int64_t>(ch.slot[j]) * p.ld + c)
               : zero;
  }
  if (p.add != nullptr) acc.x += add.x, acc.y += add.y, acc.z += add.z, acc.w += add.w;
#pragma unroll
  for (int j = 0; j < moe_max_k; ++j) {
    if (ch.slot[j] < 0) continue;
    const float w = ch.weight[j];
    acc.x += w * v[j].x, acc.y += w * v[j].y, acc.z += w * v[j].z, acc.w += w * v[j].w;
  }
  return acc;
}

__global__ void moe_combine_kernel(const MoeCombineParams p) {
  wait_for_producers();  // see launch.cuh
  allow_dependents();
  const int t = static_cast<int>(blockIdx.y);
  const int c = 4 * (static_cast<int>(blockIdx.x) * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x));
  if (c >= p.hidden) return;
  *reinterpret_cast<float4*>(p.out + t * p.out_stride + c) = combine_unit(p, load_choices(p, t), t, c);
}

/// The combine with then_norm: block t combines row t (thread i: float4 units i, i + blockDim, ...), then, after
/// a barrier, normalises the row as rms_norm does (row_norm.cuh: the same threads sum the same values).
__global__ void __launch_bounds__(kRowNormThreads) moe_combine_norm_kernel(const MoeCombineParams p) {
  wait_for_producers();  // see launch.cuh
  allow_dependents();
  __shared__ float scratch[kRowNormThreads / 32];
  const int t = static_cast<int>(blockIdx.x);
  float* row = p.out + t * p.out_stride;
  const Choices choices = load_choices(p, t);
  for (int c = 4 * static_cast<int>(threadIdx.x); c < p.hidden; c += 4 * kRowNormThreads) {
    *reinterpret_cast<float4*>(row + c) = combine_unit(p, choices, t, c);
  }
  __syncthreads();  // the row's values, written by the block's threads, before they are summed by others
  const RowNormTarget& n = p.then_norm;
  const float inv = row_norm_inverse(row_norm_sum(row, nullptr, p.hidden), p.hidden, n.eps, scratch);
  row_norm_outputs(row, inv, n.weight, p.hidden, n.out + t * n.out_stride, ActOut::f32,
                   n.out_q != nullptr ? n.out_q + t * n.out_q_stride : nullptr, nullptr);
}

void require_arg(bool ok, const char* fn, const std::string& what) {
  if (!ok) throw Error(ErrorCode::invalid_argument, std::string(fn) + ": " + what);
}

}  // namespace

void moe_sort(const MoeSortParams& p, cudaStream_t stream) {
  require_arg(p.ids && p.expert_offsets && p.slot_of_pair && p.token_of_slot, "moe_sort", "output arrays must be set");
  require_arg(p.n_experts >= 1 && p.n_experts <= moe_max_experts, "moe_sort", "n_experts outside 1..256");
  require_arg(p.k >= 1 && p.k <= moe_max_k && p.n_tokens >= 0, "moe_sort", "k outside 1..8 or n_tokens < 0");
  require_arg((p.tiles == nullptr) == (p.n_tiles == nullptr), "moe_sort", "tiles and n_tiles go together");
  require_arg((p.groups == nullptr) == (p.n_groups == nullptr), "moe_sort", "groups and n_groups go together");
  require_arg(p.group_tokens >= 1 && p.group_tokens <= gemv_group_max_tokens, "moe_sort", "group_tokens outside 1..16");
  require_arg(p.groups == nullptr || p.n_tokens <= moe_gemv_max_tokens, "moe_sort",
              "GEMV groups need n_tokens <= " + std::to_string(moe_gemv_max_tokens) + " (got " +
                  std::to_string(p.n_tokens) + ")");
  if (p.route.logits != nullptr) {
    check_moe_route(p.route);
    require_arg(p.route.ids == p.ids && p.route.weights != nullptr && p.route.n_tokens == p.n_tokens &&
                    p.route.k == p.k && p.n_tokens * p.k <= moe_sort_route_max_pairs,
                "moe_sort",
                "routing in the sort needs the route's ids to be the sort's, the same tokens and k, and at most " +
                    std::to_string(moe_sort_route_max_pairs) + " pairs");
  }
  launch_kernel(moe_sort_kernel, p.n_experts, kSortThreads, 0, stream, p);
}

void moe_combine(const MoeCombineParams& p, cudaStream_t stream) {
  require_arg(p.expert_out && p.slot_of_pair && p.weights && p.out, "moe_combine", "pointers must be set");
  require_arg(p.hidden > 0 && p.hidden % 4 == 0 && p.ld % 4 == 0 && p.out_stride % 4 == 0 && p.ld >= p.hidden &&
                  p.out_stride >= p.hidden,
              "moe_combine", "hidden, ld and out_stride must be multiples of 4 with ld, out_stride >= hidden");
  require_arg(reinterpret_cast<uintptr_t>(p.expert_out) % 16 == 0 && reinterpret_cast<uintptr_t>(p.out) % 16 == 0,
              "moe_combine", "expert_out and out must be 16-byte aligned");
  require_arg(p.add == nullptr ||
                  (reinterpret_cast<uintptr_t>(p.add) % 16 == 0 && p.add_stride % 4 == 0 && p.add_stride >= p.hidden),
              "moe_combine", "add must be 16-byte aligned with add_stride a multiple of 4, >= hidden");
  require_arg(p.k >= 1 && p.k <= moe_max_k && p.n_tokens >= 0 && p.n_tokens <= 65535, "moe_combine",
              "k outside 1..8 or n_tokens outside 0..65535");
  const RowNormTarget& n = p.then_norm;
  require_arg(
      n.weight == nullptr || (n.out != nullptr && p.hidden % 32 == 0 && n.out_stride >= p.hidden && n.eps >= 0.0f &&
                              (n.out_q == nullptr || x_int8_records_fit(n.out_q, n.out_q_stride, p.hidden))),
      "moe_combine",
      "then_norm needs an output, hidden % 32 == 0 and, for records, 16-byte aligned rows of at "
      "least 80 hidden / 32 bytes");
  if (p.n_tokens == 0) return;
  if (n.weight != nullptr) {
    launch_kernel(moe_combine_norm_kernel, p.n_tokens, kRowNormThreads, 0, stream, p);
    return;
  }
  const int threads = 128;
  const dim3 grid(static_cast<unsigned>((p.hidden / 4 + threads - 1) / threads), static_cast<unsigned>(p.n_tokens));
  launch_kernel(moe_combine_kernel, grid, threads, 0, stream, p);
}

}  // namespace latte::cuda
