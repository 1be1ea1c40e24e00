// The fused decode step's persistent kernel (decode_step.hpp describes the phases).
//
// Block = 16 consumer warps + 1 producer warp, one block per SM, ~220 KB of shared memory:
//   [ring: n_stages x stage_bytes (16 KB, more for rows that need it)][x area: split-int8 x units | fp32 x  (attention:
//   the 16 query rows)][misc]
// Both roles run the same walk (walk() below) over the step's phases: the producer turns every chunk of
// weight rows (or cache tile) this block will read into one stage's bulk copies, in order, as soon as a
// stage is free; the consumers prepare each phase's x (normalised, split into int8 planes), take the
// chunks in the same order, and meet the other blocks at a grid barrier after each phase. Only two
// things make the producer wait on the grid: the router's logits (routed experts) and the newest cache
// row (written by this step's phase 2).
//
// Rows of a phase ("row spaces": one matrix, a gate/up pair, or the K routed downs plus the shared down
// of one output row) are split over the blocks in equal ranges of units; a chunk is as many whole units
// as fit a stage. A row is read by a group of G lanes (G = 32 for rows of >= 1024 values, fewer for
// short rows such as W_UK's 128), each lane taking every G-th 32-value unit.
//
// Attention (phase 3): tasks (16-head group, split of the cache positions), split so that the tasks
// fill the grid; per 14-position tile: scores by warp per position (lanes over the 576 dims, a 16-way
// transpose reduction), online softmax by warp per head, o += p c by thread per (dim pair, 8 heads).
// Partials (unnormalised o, running max and sum) go to scratch and are merged in phase 4's input.
//
// Bytes per token (DeepSeek-V2-Lite Q4_K_M): ~1.5 GB of weights + the latent cache (1152 bytes per
// position per block); FLOPs are negligible next to them (~2 per weight value).
#include "cuda/decode_step.hpp"

#include "cuda/check.hpp"
#include "cuda/moe_route.cuh"
#include "cuda/pipeline_primitives.cuh"
#include "cuda/quant_decode.cuh"
#include "cuda/rope_angle.cuh"
#include "cuda/split_int8_dot.cuh"

#include <latte/error.hpp>

#include <cuda_bf16.h>

#include <cstdint>
#include <string>

namespace latte::cuda {
namespace step {
namespace {

using pipeline::load_l2;
constexpr float kLog2e = 1.4426950408889634f;
constexpr int kNamedConsumers = 1;  // named barrier id of the consumer warps
constexpr int kQueryLoads = (kHeadGroup * kCacheRowElems + kConsumerThreads - 1) / kConsumerThreads;  // 20
constexpr int kSplitBatch = 8;  // x units a warp loads before splitting them (loads in flight together)
static_assert(kTilePositions <= kConsumerWarps && kTilePositions <= 16, "one warp per tile position");

// ---- row spaces and chunks ---------------------------------------------------------------------

enum Epilogue : int { kStore = 0, kAdd = 1, kGated = 2, kCombo = 3 };

/// Rows of one phase that produce `n_units` outputs (see the file comment).
struct RowSpace {
  int n_units = 0;
  int n_src = 0;
  int epilogue = kStore;
  int seg_rows = 0;   // > 0: unit u reads x segment u / seg_rows (per-head inputs)
  int seg_units = 0;  // x units per segment
  float* out = nullptr;
  const uint8_t* src[kMaxSources];
  int32_t row_bytes[kMaxSources];
  int32_t type[kMaxSources];
  int32_t k_units[kMaxSources];
  int32_t x_unit0[kMaxSources];
  float weight[kMaxSources];
};

__device__ __forceinline__ void add_source(RowSpace& rs, const uint8_t* data, const Matrix& m, int x_unit0,
                                           float weight = 1.0f) {
  const int s = rs.n_src++;
  rs.src[s] = data;
  rs.row_bytes[s] = static_cast<int32_t>(m.row_bytes);
  rs.type[s] = m.type;
  rs.k_units[s] = m.k / 32;
  rs.x_unit0[s] = x_unit0;
  rs.weight[s] = weight;
}

__device__ __forceinline__ RowSpace single(const Matrix& m, float* out, int epilogue) {
  RowSpace rs;
  rs.n_units = m.rows;
  rs.epilogue = epilogue;
  rs.out = out;
  add_source(rs, m.data, m, 0);
  return rs;
}

__device__ __forceinline__ RowSpace gated(const uint8_t* gate, const uint8_t* up, const Matrix& g, const Matrix& u,
                                          float* out) {
  RowSpace rs;
  rs.n_units = g.rows;
  rs.epilogue = kGated;
  rs.out = out;
  add_source(rs, gate, g, 0);
  add_source(rs, up, u, 0);
  return rs;
}

// ---- shared memory --------------------------------------------------------------------------------

/// Fixed-size region after the x area (bytes; the host reserves kMiscBytes).
struct Misc {  // (decode_step_misc_bytes() reports its size to the host)
  uint64_t full[32];
  uint64_t empty[32];
  float red[64];
  float scores[kHeadGroup][16];  // [head][position in tile]
  float probs[16][kHeadGroup];   // [position in tile][head]
  float alpha[kHeadGroup];
  float m_run[kHeadGroup];  // attention: each head's running max (log2 domain) and sum over a task's tiles
  float l_run[kHeadGroup];
  float rope_cos[kMaxRopePairs], rope_sin[kMaxRopePairs];
  int32_t ids[kMaxExpertsUsed];
  float weights[kMaxExpertsUsed];
  float route_logits[moe_max_experts];
  float route_scratch[moe_max_experts];
  int32_t producer_ids[kMaxExpertsUsed];
  float producer_weights[kMaxExpertsUsed];
  float producer_logits[moe_max_experts];
  float producer_scratch[moe_max_experts];
  RowSpace rows;  // the consumers' current row space (written by thread 0: one copy, broadcast reads)
};

struct Smem {
  uint8_t* stages;
  uint8_t* xq;  // split-int8 units
  float* xf;    // fp32 x
  float* q;     // attention: [16][L + R] (overlays the x area)
  Misc* misc;
  float* x_own;       // this block's rows [lo, hi) of the residual stream x (rows of H split over the grid)
  uint32_t n_stages;  // the ring's shape (copies of Params': registers, not loads through a generic pointer)
  int stage_bytes;
  // (the chunk and row-space arithmetic below is per thread; every table lives in shared memory so
  // that 512 threads do not each hold a copy in local memory, which thrashes the L1 next to a
  // 220 KB shared-memory carve-out)
  __device__ __forceinline__ Smem(uint8_t* base, const Params& p) {
    stages = base;
    n_stages = static_cast<uint32_t>(p.n_stages);
    stage_bytes = p.stage_bytes;
    xq = base + static_cast<size_t>(p.n_stages) * p.stage_bytes;
    xf = reinterpret_cast<float*>(xq + static_cast<size_t>(p.xq_cap) * split_int8::kUnitBytes);
    q = reinterpret_cast<float*>(xq);
    misc = reinterpret_cast<Misc*>(xq + p.x_area_bytes);
    x_own = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(misc) + ((sizeof(Misc) + 127) / 128 * 128));
  }
};

/// This block's units [lo, hi) of a row space and how many go into one stage.
struct ChunkPlan {
  int lo = 0, hi = 0, per_chunk = 1;
};

__device__ __forceinline__ ChunkPlan chunk_plan(const RowSpace& rs, int stage_bytes) {
  ChunkPlan c;
  const int64_t n = rs.n_units, g = gridDim.x, b = blockIdx.x;
  c.lo = static_cast<int>(n * b / g);
  c.hi = static_cast<int>(n * (b + 1) / g);
  int64_t unit_bytes = 0;
  for (int s = 0; s < rs.n_src; ++s) unit_bytes += rs.row_bytes[s];
  const int64_t room = stage_bytes - 32 * rs.n_src;
  c.per_chunk = static_cast<int>(unit_bytes > 0 && room / unit_bytes > 0 ? room / unit_bytes : 1);
  return c;
}

/// Source s's rows of units [u0, u1) as one 16-byte aligned copy: it lands in a stage after the copies
/// of sources 0 .. s-1, its rows `misalign` bytes into it.
struct ChunkPiece {
  const uint8_t* aligned_src;
  uint32_t misalign;
  uint32_t bytes;  // a multiple of 16
};

__device__ __forceinline__ ChunkPiece chunk_piece(const RowSpace& rs, int s, int u0, int u1) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(rs.src[s]) + static_cast<uintptr_t>(u0) * rs.row_bytes[s];
  const uintptr_t end = begin + static_cast<uintptr_t>(u1 - u0) * rs.row_bytes[s];
  const uintptr_t a0 = begin & ~uintptr_t{15}, a1 = (end + 15) & ~uintptr_t{15};
  return {reinterpret_cast<const uint8_t*>(a0), static_cast<uint32_t>(begin - a0), static_cast<uint32_t>(a1 - a0)};
}

// ---- attention tasks ---------------------------------------------------------------------------

struct AttentionPlan {
  int n_kv = 0, n_groups = 0, n_tiles = 0, tiles_per_split = 0, splits = 0, n_tasks = 0;
};

/// (group, split) tasks for n_kv positions: at least 2 tiles per split unless there are fewer, and
/// about one task per block. The same plan serves the producer, the consumers and phase 4's merge.
__device__ __forceinline__ AttentionPlan attention_plan(int n_kv, int n_heads, int max_tasks) {
  AttentionPlan a;
  a.n_kv = n_kv;
  a.n_groups = (n_heads + kHeadGroup - 1) / kHeadGroup;
  a.n_tiles = (n_kv + kTilePositions - 1) / kTilePositions;
  const int grid = static_cast<int>(gridDim.x);
  int tps = (a.n_tiles * a.n_groups + grid - 1) / grid;
  tps = max(tps, min(2, a.n_tiles));
  a.splits = (a.n_tiles + tps - 1) / tps;
  while (a.splits * a.n_groups > max_tasks) {  // never for the buffers the host sizes; a guard
    ++tps;
    a.splits = (a.n_tiles + tps - 1) / tps;
  }
  a.tiles_per_split = tps;
  a.n_tasks = a.splits * a.n_groups;
  return a;
}

// ---- phase inputs ------------------------------------------------------------------------------

/// kNorm: RMSNorm(src); kNormEmbed: RMSNorm(the token's embedding row); kPlain: src; kHeadsQuery: the
/// per-head query rows of the block's heads; kHeadsMerge: the attention partials of the block's heads,
/// merged; kKeep: the x area as the previous phase left it.
enum InputKind : int { kNorm = 0, kNormEmbed = 1, kPlain = 2, kHeadsQuery = 3, kHeadsMerge = 4, kKeep = 5 };

struct Input {
  int kind = kPlain;
  const float* src = nullptr;    // kNorm, kPlain, kHeadsQuery
  int n = 0;                     // values (kNorm, kPlain); per head (kHeads*)
  const float* norm = nullptr;   // RMSNorm weight
  int head_stride = 0;           // kHeadsQuery: floats between heads in src
  int need_f32 = 0, need_q = 1;  // what the phase's row types read
};

__device__ __forceinline__ bool is_float_type(int type) {
  const auto t = static_cast<GgmlType>(type);
  return t == GgmlType::f32 || t == GgmlType::f16 || t == GgmlType::bf16;
}

__device__ __forceinline__ void mark_needs(Input& in, const Matrix& m) {
  if (is_float_type(m.type)) {
    in.need_f32 = 1;
  } else {
    in.need_q = 1;
  }
}

/// Dot of a row (in a stage) with the x area: this lane's part over units first, first + step, ...
__device__ __forceinline__ float row_dot(int type, const uint8_t* row, int n_units, int x_unit0, int first, int step,
                                         const uint8_t* xq, const float* xf, int cap) {
  using split_int8::row_partial;
  using split_int8::row_partial_float;
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::q4_0:
      return row_partial<GgmlType::q4_0>(row, n_units, xq, cap, x_unit0, first, step);
    case GgmlType::q4_1:
      return row_partial<GgmlType::q4_1>(row, n_units, xq, cap, x_unit0, first, step);
    case GgmlType::q5_0:
      return row_partial<GgmlType::q5_0>(row, n_units, xq, cap, x_unit0, first, step);
    case GgmlType::q5_1:
      return row_partial<GgmlType::q5_1>(row, n_units, xq, cap, x_unit0, first, step);
    case GgmlType::q8_0:
      return row_partial<GgmlType::q8_0>(row, n_units, xq, cap, x_unit0, first, step);
    case GgmlType::mxfp4:
      return row_partial<GgmlType::mxfp4>(row, n_units, xq, cap, x_unit0, first, step);
    case GgmlType::q2_k:
      return row_partial<GgmlType::q2_k>(row, n_units, xq, cap, x_unit0, first, step);
    case GgmlType::q3_k:
      return row_partial<GgmlType::q3_k>(row, n_units, xq, cap, x_unit0, first, step);
    case GgmlType::q4_k:
      return row_partial<GgmlType::q4_k>(row, n_units, xq, cap, x_unit0, first, step);
    case GgmlType::q5_k:
      return row_partial<GgmlType::q5_k>(row, n_units, xq, cap, x_unit0, first, step);
    case GgmlType::q6_k:
      return row_partial<GgmlType::q6_k>(row, n_units, xq, cap, x_unit0, first, step);
    case GgmlType::f32:
      return row_partial_float<GgmlType::f32>(row, n_units, xf + 32 * x_unit0, first, step);
    case GgmlType::f16:
      return row_partial_float<GgmlType::f16>(row, n_units, xf + 32 * x_unit0, first, step);
    case GgmlType::bf16:
      return row_partial_float<GgmlType::bf16>(row, n_units, xf + 32 * x_unit0, first, step);
    default:
      return __int_as_float(0x7fc00000);  // the host admits no other type
  }
}

/// The 32 values of unit `unit` of an embedding row of any type.
__device__ void decode_unit(int type, const uint8_t* row, int unit, float (&v)[32]) {
  switch (static_cast<GgmlType>(type)) {
#define LATTE_STEP_DECODE(T)                         \
  case GgmlType::T:                                  \
    quant::decode_values<GgmlType::T>(row, unit, v); \
    return;
    LATTE_STEP_DECODE(q4_0)
    LATTE_STEP_DECODE(q4_1)
    LATTE_STEP_DECODE(q5_0)
    LATTE_STEP_DECODE(q5_1)
    LATTE_STEP_DECODE(q8_0)
    LATTE_STEP_DECODE(mxfp4)
    LATTE_STEP_DECODE(q2_k)
    LATTE_STEP_DECODE(q3_k)
    LATTE_STEP_DECODE(q4_k)
    LATTE_STEP_DECODE(q5_k)
    LATTE_STEP_DECODE(q6_k)
    LATTE_STEP_DECODE(f32)
    LATTE_STEP_DECODE(f16)
    LATTE_STEP_DECODE(bf16)
#undef LATTE_STEP_DECODE
    default:
      for (float& x : v) x = __int_as_float(0x7fc00000);
  }
}

__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }

// ---- the walk ------------------------------------------------------------------------------------

/// The step's phases in order, for either role. V provides gemv(n, make, input), attention(il, plan),
/// append_latent(il), route(params, il), routed_id(k), routed_weight(k), sync(phase), finish(phase) and
/// layer_done(il).
template <class V>
__device__ __forceinline__ void walk(V& v, const Params& p) {
  const Shape& s = p.s;
  const Scratch& w = p.scratch;
  const int kv_width = s.L + s.R;
  const float* q_rows = s.Lq > 0 ? w.q : w.proj;  // per head [nope P | rope R]
  for (int il = 0; il < s.n_layer; ++il) {
    const Layer& L = p.layers[il];
    // 1. proj = [query | kv_a] RMSNorm(x)
    {
      Input in{.kind = il == 0 ? kNormEmbed : kNorm, .src = w.x, .n = s.H, .norm = L.attn_norm, .need_q = 0};
      for (int i = 0; i < L.n_attn_input; ++i) mark_needs(in, L.attn_input[i]);
      const int first_rows = L.attn_input[0].rows;
      v.gemv(
          L.n_attn_input, [&](int i) { return single(L.attn_input[i], w.proj + (i == 0 ? 0 : first_rows), kStore); },
          in);
      v.sync(kPhaseAttnInput);
    }
    if (s.Lq > 0) {  // q = q_b RMSNorm(q_a)
      Input in{.kind = kNorm, .src = w.proj, .n = s.Lq, .norm = L.q_a_norm, .need_q = 0};
      mark_needs(in, L.q_b);
      v.gemv(
          1, [&](int) { return single(L.q_b, w.q, kStore); }, in);
      v.sync(kPhaseQb);
    }
    // 2. q_lat[h] = W_UK_h^T q_nope[h]; one block appends c | k_pe and rotates q_pe
    v.append_latent(il);
    {
      Input in{.kind = kHeadsQuery, .src = q_rows, .n = s.P, .head_stride = s.P + s.R, .need_q = 0};
      mark_needs(in, L.k_b);
      v.gemv(
          1,
          [&](int) {
            RowSpace rs = single(L.k_b, w.q_lat, kStore);
            rs.n_units = L.k_b.rows * s.N;
            rs.seg_rows = L.k_b.rows;
            rs.seg_units = s.P / 32;
            return rs;
          },
          in);
      v.sync(kPhaseAbsorb);
    }
    // 3. attention over the latent cache
    v.attention(il, kv_width);
    v.sync(kPhaseAttention);
    // 4. o[h] = W_UV_h merge(partials of h)
    {
      Input in{.kind = kHeadsMerge, .n = s.L, .need_q = 0};
      mark_needs(in, L.v_b);
      v.gemv(
          1,
          [&](int) {
            RowSpace rs = single(L.v_b, w.attn, kStore);
            rs.n_units = L.v_b.rows * s.N;
            rs.seg_rows = L.v_b.rows;
            rs.seg_units = s.L / 32;
            return rs;
          },
          in);
      v.sync(kPhaseWuv);
    }
    // 5. x += W_o o
    {
      Input in{.kind = kPlain, .src = w.attn, .n = s.N * s.V, .need_q = 0};
      mark_needs(in, L.attn_output);
      v.gemv(
          1, [&](int) { return single(L.attn_output, w.x, kAdd); }, in);
      v.sync(kPhaseOutput);
    }
    if (!L.moe) {
      // 6d. h = silu(gate x_n) * up x_n;  7d. x += down h
      Input in{.kind = kNorm, .src = w.x, .n = s.H, .norm = L.ffn_norm, .need_q = 0};
      mark_needs(in, L.gate);
      mark_needs(in, L.up);
      v.gemv(
          1, [&](int) { return gated(L.gate.data, L.up.data, L.gate, L.up, w.hidden); }, in);
      v.sync(kPhaseDenseGateUp);
      Input down{.kind = kPlain, .src = w.hidden, .n = L.down.k, .need_q = 0};
      mark_needs(down, L.down);
      v.gemv(
          1, [&](int) { return single(L.down, w.x, kAdd); }, down);
      v.sync(kPhaseDenseDown);
    } else {
      const bool shared = L.down.data != nullptr;
      float* h_shared = w.hidden + s.K * s.F;
      // 6. router logits; shared experts' silu(gate) * up
      {
        Input in{.kind = kNorm, .src = w.x, .n = s.H, .norm = L.ffn_norm, .need_q = 0};
        mark_needs(in, L.router);
        mark_needs(in, L.exp_gate);  // (the routed experts' phase reads the same x area)
        mark_needs(in, L.exp_up);
        if (shared) {
          mark_needs(in, L.gate);
          mark_needs(in, L.up);
        }
        v.gemv(
            shared ? 2 : 1,
            [&](int i) {
              return i == 0 ? single(L.router, w.router, kStore)
                            : gated(L.gate.data, L.up.data, L.gate, L.up, h_shared);
            },
            in);
        v.sync(kPhaseRouter);
      }
      // 7. routing (every block, the same experts), routed experts' silu(gate) * up
      const MoeRouterParams route{.logits = w.router,
                                  .n_experts = s.E,
                                  .selection_bias = L.exp_probs_b,
                                  .gating = s.sigmoid ? MoeGating::sigmoid : MoeGating::softmax,
                                  .k = s.K,
                                  .n_groups = s.n_groups,
                                  .groups_used = s.groups_used,
                                  .normalize = s.normalize != 0,
                                  .scale = s.expert_scale};
      v.route(route, il);
      {
        const Input in{.kind = kKeep};  // x area: the router phase's RMSNorm(x), unchanged since
        v.gemv(
            s.K,
            [&](int k) {
              const int64_t e = v.routed_id(k);
              return gated(L.exp_gate.data + e * L.exp_gate.stride, L.exp_up.data + e * L.exp_up.stride, L.exp_gate,
                           L.exp_up, w.hidden + k * s.F);
            },
            in);
        v.sync(kPhaseExperts);
      }
      // 8. x += sum_k w_k down_k h_k (+ shared down h_shared): one output row per unit
      {
        Input in{.kind = kPlain, .src = w.hidden, .n = s.K * s.F + (shared ? s.F_shared : 0), .need_q = 0};
        mark_needs(in, L.exp_down);
        if (shared) mark_needs(in, L.down);
        v.gemv(
            1,
            [&](int) {
              RowSpace rs;
              rs.n_units = s.H;
              rs.epilogue = kCombo;
              rs.out = w.x;
              for (int k = 0; k < s.K; ++k) {
                const int64_t e = v.routed_id(k);
                add_source(rs, L.exp_down.data + e * L.exp_down.stride, L.exp_down, k * (s.F / 32), v.routed_weight(k));
              }
              if (shared) add_source(rs, L.down.data, L.down, s.K * (s.F / 32));
              return rs;
            },
            in);
        v.sync(kPhaseDown);
      }
    }
    v.layer_done(il);
  }
  // logits = output RMSNorm(x)
  Input in{.kind = kNorm, .src = w.x, .n = s.H, .norm = p.output_norm, .need_q = 0};
  mark_needs(in, p.output);
  v.gemv(
      1, [&](int) { return single(p.output, p.logits, kStore); }, in);
  v.finish(kPhaseHead);
}

/// The router's logits into shared memory by one warp, its loads in flight together.
__device__ __forceinline__ void load_logits(const MoeRouterParams& r, float* dst, int lane) {
  float v[moe_max_experts / 32];
#pragma unroll
  for (int k = 0; k < moe_max_experts / 32; ++k) {
    const int e = lane + 32 * k;
    v[k] = e < r.n_experts ? load_l2(r.logits + e) : 0.0f;
  }
#pragma unroll
  for (int k = 0; k < moe_max_experts / 32; ++k) {
    if (lane + 32 * k < r.n_experts) dst[lane + 32 * k] = v[k];
  }
  __syncwarp();
}

// ---- the producer ---------------------------------------------------------------------------------

struct Producer {
  const Params& p;
  Smem sm;  // (by value: a copy of the visitor keeps it in registers)
  int lane;
  uint32_t seq = 0;     // chunks issued (lane 0)
  unsigned n_sync = 0;  // grid barriers walked

  /// Lane 0: waits for a free stage, announces `total` bytes on its full barrier and starts the copies.
  __device__ __forceinline__ uint8_t* begin_chunk(uint32_t total) {
    const uint32_t stage = seq % sm.n_stages;
    const uint32_t parity = (seq / sm.n_stages) & 1u;
    pipeline::mbarrier_wait(&sm.misc->empty[stage], parity ^ 1u);
    pipeline::mbarrier_expect_tx(&sm.misc->full[stage], total);
    return sm.stages + static_cast<size_t>(stage) * sm.stage_bytes;
  }
  __device__ __forceinline__ uint64_t* full_barrier() const { return &sm.misc->full[seq % sm.n_stages]; }

  template <class Make>
  __device__ __forceinline__ void gemv(int n_spaces, Make make, const Input&) {
    if (lane != 0) return;  // one thread issues every copy
    for (int i = 0; i < n_spaces; ++i) {
      const RowSpace rs = make(i);
      const ChunkPlan cp = chunk_plan(rs, sm.stage_bytes);
      for (int u0 = cp.lo; u0 < cp.hi; u0 += cp.per_chunk) {
        const int u1 = min(cp.hi, u0 + cp.per_chunk);
        uint32_t total = 0;
        for (int s = 0; s < rs.n_src; ++s) total += chunk_piece(rs, s, u0, u1).bytes;
        uint8_t* dst = begin_chunk(total);
        uint32_t at = 0;
        for (int s = 0; s < rs.n_src; ++s) {
          const ChunkPiece c = chunk_piece(rs, s, u0, u1);
          pipeline::bulk_copy(dst + at, c.aligned_src, c.bytes, full_barrier());
          at += c.bytes;
        }
        ++seq;
      }
    }
  }

  /// Lane 0: waits until the grid has passed the last barrier walked; then copies may read what the
  /// phases before it wrote.
  __device__ __forceinline__ void wait_grid() {
    pipeline::grid_wait(p.scratch.barrier, n_sync * gridDim.x);
    pipeline::fence_proxy_async_global();
  }

  __device__ __forceinline__ void attention(int il, int kv_width) {
    if (lane != 0) return;
    const int pos = p.inputs->position;
    const AttentionPlan a = attention_plan(pos + 1, p.s.N, p.max_tasks);
    const uint8_t* cache = p.inputs->cache[il];
    const uint32_t row_bytes = 2u * kv_width;
    bool waited = false;
    for (int task = blockIdx.x; task < a.n_tasks; task += gridDim.x) {
      const int split = task / a.n_groups;
      const int t_end = min(a.n_tiles, (split + 1) * a.tiles_per_split);
      for (int t = split * a.tiles_per_split; t < t_end; ++t) {
        const int first = t * kTilePositions, count = min(kTilePositions, a.n_kv - first);
        if (!waited && first + count > pos) {  // the tile holds this step's row: wait for phase 2
          wait_grid();
          waited = true;
        }
        const uint32_t bytes = count * row_bytes;
        uint8_t* dst = begin_chunk(bytes);
        pipeline::bulk_copy(dst, cache + static_cast<size_t>(first) * row_bytes, bytes, full_barrier());
        ++seq;
      }
    }
  }

  __device__ __forceinline__ void route(const MoeRouterParams& r, int) {
    if (lane == 0) wait_grid();
    __syncwarp();
    load_logits(r, sm.misc->producer_logits, lane);
    moe::route_token(r, sm.misc->producer_logits, sm.misc->producer_scratch, lane, sm.misc->producer_ids,
                     sm.misc->producer_weights);
    __syncwarp();
  }
  __device__ __forceinline__ int routed_id(int k) const { return sm.misc->producer_ids[k]; }
  __device__ __forceinline__ float routed_weight(int k) const { return sm.misc->producer_weights[k]; }
  __device__ __forceinline__ void append_latent(int) {}
  __device__ __forceinline__ void sync(int) { ++n_sync; }
  __device__ __forceinline__ void finish(int) {}
  __device__ __forceinline__ void layer_done(int) {}
};

// ---- the consumers --------------------------------------------------------------------------------

struct Consumer {
  const Params& p;
  Smem sm;  // (by value: a copy of the visitor keeps it in registers)
  int tid, warp, lane;
  bool timed = false;  // timing on: thread 0 also counts its cycles in prepare and waiting for chunks
  uint32_t seq = 0;
  unsigned n_sync = 0;
  int dealt = 0;  // items of the phase's earlier row spaces, modulo the lane groups (see consume_rows)
  long long prep_cycles = 0, wait_cycles = 0;  // (thread 0, since the last barrier)

  __device__ __forceinline__ void bar() { pipeline::named_barrier(kNamedConsumers, kConsumerThreads); }

  /// The grid barrier after a phase of kind `phase`; with timing on, thread 0 records this block's
  /// clock when it arrives and when the grid has passed (Scratch::timing).
  __device__ __forceinline__ void sync(int phase) {
    dealt = 0;
    bar();
    if (tid == 0) {
      const long long arrived = clock64();
      __threadfence();
      pipeline::grid_arrive(p.scratch.barrier);
      pipeline::grid_wait(p.scratch.barrier, ++n_sync * gridDim.x);
      __threadfence();
      record(phase, arrived);
    } else {
      ++n_sync;
    }
    bar();
  }
  /// Thread 0: timing slot n_sync of this block = {phase, arrival, release, cycles in prepare, cycles
  /// waiting for chunks} (slot 0: the start).
  __device__ __forceinline__ void record(int phase, long long arrived) {
    if (!timed || static_cast<int>(n_sync) >= kMaxTimedSyncs) return;
    long long* slot = p.scratch.timing + (static_cast<int64_t>(blockIdx.x) * kMaxTimedSyncs + n_sync) * kTimingFields;
    slot[0] = phase;
    slot[1] = arrived;
    slot[2] = clock64();
    slot[3] = prep_cycles;
    slot[4] = wait_cycles;
    prep_cycles = wait_cycles = 0;
  }

  /// Waits for chunk `chunk`'s stage; returns it.
  __device__ __forceinline__ const uint8_t* take(uint32_t chunk) {
    const uint32_t stage = chunk % sm.n_stages;
    const bool clocked = timed && tid == 0;
    const long long t0 = clocked ? clock64() : 0;
    pipeline::mbarrier_wait(&sm.misc->full[stage], (chunk / sm.n_stages) & 1u);
    if (clocked) wait_cycles += clock64() - t0;
    return sm.stages + static_cast<size_t>(stage) * sm.stage_bytes;
  }
  /// Gives chunk `chunk`'s stage back to the producer (every warp once).
  __device__ __forceinline__ void release(uint32_t chunk) const {
    __syncwarp();
    if (lane == 0) pipeline::mbarrier_arrive(&sm.misc->empty[chunk % sm.n_stages]);
  }
  __device__ __forceinline__ const uint8_t* take() { return take(seq); }
  __device__ __forceinline__ void release() { release(seq++); }

  /// Sum over the consumer threads (every consumer thread calls it).
  __device__ __forceinline__ float block_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) sm.misc->red[warp] = v;
    bar();
    float total = 0.0f;
#pragma unroll
    for (int i = 0; i < kConsumerWarps; ++i) total += sm.misc->red[i];
    bar();  // red may be reused
    return total;
  }

  /// The end of an RMSNorm input: xf[0 .. in.n) holds x * norm weight and `ss` this thread's part of
  /// sum x^2; scales xf by 1 / rms per unit and splits it into int8 planes (and keeps it when the phase
  /// reads fp32 x). A short loop: see prepare_here.
  __device__ __forceinline__ void finish_norm(const Input& in, float ss) {
    const float rstd = 1.0f / sqrtf(block_sum(ss) / static_cast<float>(in.n) + p.s.eps);  // (orders xf)
#pragma unroll 1
    for (int u = warp; u < in.n / 32; u += kConsumerWarps) {
      const float x = sm.xf[32 * u + lane] * rstd;
      if (in.need_q) split_int8::quantize_unit(sm.xq, p.xq_cap, u, x, lane);
      if (in.need_f32) sm.xf[32 * u + lane] = x;
    }
  }

  /// Stages the phase's x (see InputKind); `rs` is the phase's first row space (its rows decide the
  /// heads of per-head inputs). Not inlined (one copy for every phase); it works on a copy of this
  /// visitor and of the input, which then live in registers rather than in local memory.
  __device__ __noinline__ void prepare(const Input& in_ref, const RowSpace& rs) {
    Consumer self = *this;
    const Input in = in_ref;
    const long long t0 = timed ? clock64() : 0;
    self.prepare_here(in, rs);
    if (timed && tid == 0) prep_cycles += clock64() - t0;
  }
  __device__ __forceinline__ void prepare_here(const Input& in, const RowSpace& rs) {
    if (in.kind == kKeep) {
      // the previous phase's x area
    } else if (in.kind == kNorm) {
      // x * norm weight into the fp32 area (every RMSNorm input has room there: decode_step.cpp), x and
      // the weight loaded together, 4 values per thread and load; then per unit scaled by 1 / rms and
      // split into int8 planes. Short loops: this code runs once per phase, from a cold instruction
      // cache, and its length costs more than a second round of loads (BENCHMARKS.md, fused step run 5).
      const int n4 = in.n / 4;
      float ss = 0.0f;
#pragma unroll 2
      for (int i = tid; i < n4; i += kConsumerThreads) {
        const float4 x = load_l2(reinterpret_cast<const float4*>(in.src) + i);
        const float4 g = __ldg(reinterpret_cast<const float4*>(in.norm) + i);
        ss += x.x * x.x + x.y * x.y + x.z * x.z + x.w * x.w;
        reinterpret_cast<float4*>(sm.xf)[i] = make_float4(x.x * g.x, x.y * g.y, x.z * g.z, x.w * g.w);
      }
      finish_norm(in, ss);
    } else if (in.kind == kNormEmbed) {
      // layer 0: x = the token's embedding row (block 0 also writes it to the residual stream)
      const Matrix& e = p.token_embd;
      const uint8_t* row = e.data + static_cast<int64_t>(p.inputs->token) * e.row_bytes;
      for (int u = tid; u < in.n / 32; u += kConsumerThreads) {
        decode_unit(e.type, row, u, *reinterpret_cast<float(*)[32]>(sm.xf + 32 * u));  // straight into xf
      }
      bar();
      if (blockIdx.x == 0) {
        for (int i = tid; i < in.n; i += kConsumerThreads) p.scratch.x[i] = sm.xf[i];
        if (p.scratch.embed_out != nullptr) {
          for (int i = tid; i < in.n; i += kConsumerThreads) p.scratch.embed_out[i] = sm.xf[i];
        }
      }
      {  // this block's rows of x, the ones it adds to in every later phase (see epilogue)
        const int64_t g = gridDim.x, b = blockIdx.x;
        const int lo = static_cast<int>(in.n * b / g), hi = static_cast<int>(in.n * (b + 1) / g);
        for (int i = tid; i < hi - lo; i += kConsumerThreads) sm.x_own[i] = sm.xf[lo + i];
      }
      bar();  // (the copies above read xf before it is scaled)
      float ss = 0.0f;
      for (int i = tid; i < in.n; i += kConsumerThreads) {
        const float x = sm.xf[i];
        ss += x * x;
        sm.xf[i] = x * in.norm[i];
      }
      finish_norm(in, ss);
    } else if (in.kind == kPlain) {
      split_units(in, in.n / 32, [&](int u) { return in.src + 32 * u; });
    } else {
      // per-head inputs of this block's rows
      const ChunkPlan cp = chunk_plan(rs, sm.stage_bytes);
      if (cp.hi > cp.lo) {
        const int h_lo = cp.lo / rs.seg_rows, h_hi = (cp.hi - 1) / rs.seg_rows;
        const int units = in.n / 32;
        if (in.kind == kHeadsQuery) {
          split_units(in, (h_hi - h_lo + 1) * units, [&](int j) {
            return in.src + static_cast<int64_t>(h_lo + j / units) * in.head_stride + 32 * (j % units);
          });
        } else {
          merge_heads(in, h_lo, h_hi);
        }
      }
    }
    bar();
  }

  /// x units 0 .. n-1 from global memory (unit j's 32 values at unit_src(j), written by other blocks)
  /// into the x area: each warp loads a batch of kSplitBatch units (the loads in flight together), then
  /// splits them.
  template <class UnitSource>
  __device__ __forceinline__ void split_units(const Input& in, int n, UnitSource unit_src) {
    for (int j0 = warp; j0 < n; j0 += kConsumerWarps * kSplitBatch) {
      float v[kSplitBatch];
#pragma unroll
      for (int k = 0; k < kSplitBatch; ++k) {
        const int j = j0 + kConsumerWarps * k;
        v[k] = j < n ? load_l2(unit_src(j) + lane) : 0.0f;
      }
#pragma unroll
      for (int k = 0; k < kSplitBatch; ++k) {
        const int j = j0 + kConsumerWarps * k;
        if (j < n) {
          if (in.need_q) split_int8::quantize_unit(sm.xq, p.xq_cap, j, v[k], lane);
          if (in.need_f32) sm.xf[32 * j + lane] = v[k];
        }
      }
    }
  }

  /// kHeadsMerge: o_lat of heads h_lo..h_hi from the attention partials, into the x area.
  __device__ __forceinline__ void merge_heads(const Input& in, int h_lo, int h_hi) {
    const AttentionPlan a = attention_plan(p.inputs->position + 1, p.s.N, p.max_tasks);
    const int L = p.s.L, units = L / 32;
    for (int j = warp; j < (h_hi - h_lo + 1) * units; j += kConsumerWarps) {
      const int h = h_lo + j / units, u = j % units;
      const int g = h / kHeadGroup, hl = h % kHeadGroup;
      auto ml = [&](int sp) {
        return p.scratch.partial_ml + ((static_cast<int64_t>(sp) * a.n_groups + g) * kHeadGroup + hl) * 2;
      };
      // the splits' maxima and sums: lanes over splits, each lane's pairs loaded once (kept for the weights
      // when there are at most 32 splits, the usual case: one load latency for them all)
      float2 ml_lane = make_float2(-INFINITY, 0.0f);
      if (lane < a.splits) ml_lane = load_l2(reinterpret_cast<const float2*>(ml(lane)));
      float m = ml_lane.x;
      for (int base = 32; base < a.splits; base += 32) {
        if (base + lane < a.splits) m = fmaxf(m, load_l2(ml(base + lane)));
      }
#pragma unroll
      for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
      float num = 0.0f, den = 0.0f;
      for (int base = 0; base < a.splits; base += 32) {
        const int sp = base + lane;
        const float2 v = base == 0       ? ml_lane
                         : sp < a.splits ? load_l2(reinterpret_cast<const float2*>(ml(sp)))
                                         : make_float2(-INFINITY, 0.0f);
        const float wl = sp < a.splits ? exp2f(v.x - m) : 0.0f;  // split sp's weight, on lane sp % 32
        if (sp < a.splits) den += wl * v.y;
        const int n = min(32, a.splits - base);
        // lane l's value of o: every split's partial at dim 32 u + l, 8 loads in flight
#pragma unroll 8
        for (int t = 0; t < n; ++t) {
          const float wgt = __shfl_sync(0xffffffffu, wl, t);
          const int64_t task = static_cast<int64_t>(base + t) * a.n_groups + g;
          num = fmaf(wgt, load_l2(p.scratch.partial_o + (task * kHeadGroup + hl) * L + 32 * u + lane), num);
        }
      }
#pragma unroll
      for (int o = 16; o > 0; o /= 2) den += __shfl_xor_sync(0xffffffffu, den, o);
      const float v = num / den;
      if (in.need_q) split_int8::quantize_unit(sm.xq, p.xq_cap, j, v, lane);
      if (in.need_f32) sm.xf[32 * j + lane] = v;
    }
  }

  /// Output u of a row space from its lane-group sums: `a` = the dot of source 0 (kStore, kAdd), of the
  /// gate (kGated, `b` the up's) or the weighted sum over the sources (kCombo). The adding kinds write the
  /// residual stream x: the block owns rows [lo, hi) of it in every such phase (the same equal split of H
  /// rows), keeps them in shared memory, and never reads x back.
  __device__ __forceinline__ void epilogue(const RowSpace& rs, int u, float a, float b, int lo) {
    float* out = rs.out + u;
    switch (rs.epilogue) {
      case kStore:
        *out = a;
        break;
      case kGated:
        *out = silu(a) * b;
        break;
      default:  // kAdd, kCombo
        *out = sm.x_own[u - lo] += a;
    }
  }

  /// Every chunk of the phase's row spaces (see consume_rows). The row spaces pass through shared
  /// memory, so that one copy of the chunk loop serves every phase.
  template <class Make>
  __device__ __forceinline__ void gemv(int n_spaces, Make make, const Input& in) {
    for (int i = 0; i < n_spaces; ++i) {
      bar();  // every thread is done with the previous row space
      if (tid == 0) sm.misc->rows = make(i);
      bar();
      if (i == 0) prepare(in, sm.misc->rows);
      consume_rows();
    }
  }

  /// The chunks of the row space in sm.misc->rows. Each output unit (every source of its row) is one
  /// work item of a group of G lanes (G from the longest row: 32 lanes for rows of >= 1024 values); the
  /// items are dealt round-robin to the groups over the whole row space, and the group that computes a
  /// unit writes it. No barrier between the warps: each takes and releases every chunk on its own (the
  /// ring's empty barriers count the warps), so the warps drift apart by up to the ring's depth and
  /// their latencies overlap. Not inlined: one copy of the hot loop for every phase (instruction
  /// cache, compile time), run on a copy of this visitor (registers).
  __device__ __noinline__ void consume_rows() {
    Consumer self = *this;
    self.consume_rows_here();
    seq = self.seq;
    dealt = self.dealt;
    wait_cycles = self.wait_cycles;
  }
  __device__ __forceinline__ void consume_rows_here() {
    const RowSpace& rs = sm.misc->rows;
    const ChunkPlan cp = chunk_plan(rs, sm.stage_bytes);
    int ku_max = 1;
    for (int s = 0; s < rs.n_src; ++s) ku_max = max(ku_max, rs.k_units[s]);
    const int G = ku_max >= 32 ? 32 : ku_max >= 16 ? 16 : ku_max >= 8 ? 8 : ku_max >= 4 ? 4 : ku_max >= 2 ? 2 : 1;
    const int per_warp = 32 / G, n_slots = kConsumerWarps * per_warp;
    const int sub = lane % G;
    const int seg_lo = rs.seg_rows > 0 ? cp.lo / rs.seg_rows : 0;
    const int n_src = rs.n_src, kind = rs.epilogue;
    const uint8_t* const xq = sm.xq;  // (the row dots' arguments, hoisted)
    const float* const xf = sm.xf;
    const int cap = p.xq_cap;
    // item i (counted from cp.lo) is lane group (i + dealt) % n_slots's: the dealing goes on where the
    // phase's previous row space stopped (K routed experts of ~11 rows per block would otherwise all
    // go to the same 11 of 15 warps)
    const int slot = warp * per_warp + lane / G;
    int mine = ((slot - dealt) % n_slots + n_slots) % n_slots;  // this group's next item
    uint32_t chunk = seq;
    for (int u0 = cp.lo; u0 < cp.hi; u0 += cp.per_chunk, ++chunk) {
      const int u1 = min(cp.hi, u0 + cp.per_chunk), lim = u1 - cp.lo;
      const uint8_t* stage = take(chunk);            // (also when no item is this warp's: see release)
      while (__any_sync(0xffffffffu, mine < lim)) {  // (the lanes of a warp shuffle together)
        const bool valid = mine < lim;
        const int j = mine - (u0 - cp.lo);  // this group's unit in the chunk
        float a = 0.0f, b = 0.0f;
        if (valid) {
          const int seg = rs.seg_rows > 0 ? ((u0 + j) / rs.seg_rows - seg_lo) * rs.seg_units : 0;
          uint32_t at = 0;  // source s's copy follows those of sources 0 .. s-1
          for (int s = 0; s < n_src; ++s) {
            const ChunkPiece c = chunk_piece(rs, s, u0, u1);
            const uint8_t* row = stage + at + c.misalign + static_cast<int64_t>(j) * rs.row_bytes[s];
            at += c.bytes;
            const float d = row_dot(rs.type[s], row, rs.k_units[s], rs.x_unit0[s] + seg, sub, G, xq, xf, cap);
            if (kind == kCombo) {
              a = fmaf(rs.weight[s], d, a);
            } else if (s == 0) {
              a = d;
            } else {
              b = d;
            }
          }
        }
        a = split_int8::group_sum(a, G);
        if (kind == kGated) b = split_int8::group_sum(b, G);
        if (valid) {
          if (sub == 0) epilogue(rs, u0 + j, a, b, cp.lo);
          mine += n_slots;
        }
      }
      release(chunk);
    }
    seq = chunk;
    dealt = (dealt + (cp.hi - cp.lo)) % n_slots;
  }

  /// Phase 2's single-block work: c = RMSNorm(kv) and k_pe rotated, appended as bf16 at `position`;
  /// q_pe of every head rotated into scratch.
  __device__ __forceinline__ void append_latent(int il) {
    if (static_cast<int>(blockIdx.x) != static_cast<int>(gridDim.x) - 1) return;
    const Shape& s = p.s;
    const int pos = p.inputs->position;
    const int pairs = s.R / 2;
    for (int i = tid; i < pairs; i += kConsumerThreads) {
      rope_cos_sin(static_cast<double>(pos), i, s.inv_freq[i], s.freq_scale, s.ext_factor, {s.corr_low, s.corr_high},
                   sm.misc->rope_cos[i], sm.misc->rope_sin[i]);
    }
    const float* kv = p.scratch.proj + s.query_width;
    float ss = 0.0f;
    for (int i = tid; i < s.L; i += kConsumerThreads) {
      const float c = load_l2(kv + i);
      ss += c * c;
    }
    const float rstd =
        1.0f / sqrtf(block_sum(ss) / static_cast<float>(s.L) + s.eps);  // (its barriers order the angles)
    const Layer& L = p.layers[il];
    __nv_bfloat16* row =
        reinterpret_cast<__nv_bfloat16*>(p.inputs->cache[il]) + static_cast<int64_t>(pos) * (s.L + s.R);
    for (int i = tid; i < s.L; i += kConsumerThreads)
      row[i] = __float2bfloat16_rn(load_l2(kv + i) * rstd * L.kv_a_norm[i]);
    for (int i = tid; i < pairs; i += kConsumerThreads) {
      const float x0 = load_l2(kv + s.L + 2 * i), x1 = load_l2(kv + s.L + 2 * i + 1);
      const float c = sm.misc->rope_cos[i], sn = sm.misc->rope_sin[i];
      row[s.L + 2 * i] = __float2bfloat16_rn(x0 * c - x1 * sn);
      row[s.L + 2 * i + 1] = __float2bfloat16_rn(x0 * sn + x1 * c);
    }
    const float* q_rows = s.Lq > 0 ? p.scratch.q : p.scratch.proj;
    for (int e = tid; e < s.N * pairs; e += kConsumerThreads) {
      const int h = e / pairs, i = e % pairs;
      const float* src = q_rows + static_cast<int64_t>(h) * (s.P + s.R) + s.P + 2 * i;
      const float x0 = load_l2(src), x1 = load_l2(src + 1);
      const float c = sm.misc->rope_cos[i], sn = sm.misc->rope_sin[i];
      p.scratch.q_pe[h * s.R + 2 * i] = x0 * c - x1 * sn;
      p.scratch.q_pe[h * s.R + 2 * i + 1] = x0 * sn + x1 * c;
    }
    pipeline::fence_proxy_async_global();  // the cache row is read by bulk copies after the barrier
  }

  /// Phase 3 (see the file comment); not inlined, on a copy of this visitor (as consume_rows).
  __device__ __noinline__ void attention(int il, int kv_width) {
    Consumer self = *this;
    self.attention_here(il, kv_width);
    seq = self.seq;
    wait_cycles = self.wait_cycles;
  }
  __device__ __forceinline__ void attention_here(int il, int kv_width) {
    const Shape& s = p.s;
    const int pos = p.inputs->position;
    const AttentionPlan a = attention_plan(pos + 1, s.N, p.max_tasks);
    const int L = s.L;
    const int dp = tid;  // o += p c: thread dp < L / 2 takes dims 2dp, 2dp + 1 of the group's 16 heads
    const float qscale = s.attn_scale * kLog2e;
    for (int task = blockIdx.x; task < a.n_tasks; task += gridDim.x) {
      const int g = task % a.n_groups, split = task / a.n_groups;
      // the group's 16 query rows [q_lat | q_pe], scaled into the log2 domain: every thread's loads
      // in flight together (kQueryLoads per thread)
      {
        float v[kQueryLoads];
#pragma unroll
        for (int k = 0; k < kQueryLoads; ++k) {
          const int e = tid + kConsumerThreads * k;
          const int hl = e / kv_width, d = e % kv_width, h = g * kHeadGroup + hl;
          v[k] = 0.0f;
          if (e < kHeadGroup * kv_width && h < s.N) {
            v[k] = d < L ? load_l2(p.scratch.q_lat + static_cast<int64_t>(h) * L + d)
                         : load_l2(p.scratch.q_pe + h * s.R + d - L);
          }
        }
#pragma unroll
        for (int k = 0; k < kQueryLoads; ++k) {
          const int e = tid + kConsumerThreads * k;
          if (e < kHeadGroup * kv_width) sm.q[e] = v[k] * qscale;
        }
      }
      if (tid < kHeadGroup) {
        sm.misc->m_run[tid] = -INFINITY;
        sm.misc->l_run[tid] = 0.0f;
      }
      bar();
      float acc[kHeadGroup][2];
#pragma unroll
      for (int h = 0; h < kHeadGroup; ++h) acc[h][0] = acc[h][1] = 0.0f;
      const int t_end = min(a.n_tiles, (split + 1) * a.tiles_per_split);
      for (int t = split * a.tiles_per_split; t < t_end; ++t) {
        const int first = t * kTilePositions, count = min(kTilePositions, a.n_kv - first);
        const __nv_bfloat16* tile = reinterpret_cast<const __nv_bfloat16*>(take());
        // scores: warp j takes position j of the tile, heads in two passes of 8 (registers: o's
        // accumulators stay live across the tiles)
        if (warp < count) {
          const __nv_bfloat16* crow = tile + warp * kv_width;
#pragma unroll 1
          for (int hg = 0; hg < 2; ++hg) {
            const float* qg = sm.q + 8 * hg * kv_width;
            float sc[8];
#pragma unroll
            for (int h = 0; h < 8; ++h) sc[h] = 0.0f;
#pragma unroll 1
            for (int d = 2 * lane; d < kv_width; d += 64) {
              const float2 c = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(crow + d));
#pragma unroll
              for (int h = 0; h < 8; ++h) {
                const float2 qv = *reinterpret_cast<const float2*>(qg + h * kv_width + d);
                sc[h] = fmaf(qv.x, c.x, fmaf(qv.y, c.y, sc[h]));
              }
            }
            // transpose reduction: lanes 4h .. 4h + 3 end with head 8 hg + h's sum
#pragma unroll
            for (int o = 16, n = 8; o >= 4; o /= 2, n /= 2) {
              const bool upper = (lane & o) != 0;
#pragma unroll
              for (int i = 0; i < n / 2; ++i) {
                const float send = upper ? sc[i] : sc[i + n / 2];
                const float keep = upper ? sc[i + n / 2] : sc[i];
                sc[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
              }
            }
            sc[0] += __shfl_xor_sync(0xffffffffu, sc[0], 2);
            sc[0] += __shfl_xor_sync(0xffffffffu, sc[0], 1);
            if ((lane & 3) == 0) sm.misc->scores[8 * hg + lane / 4][warp] = sc[0];
          }
        }
        bar();
        // online softmax: warp w takes heads w, w + 15, ... (lane j: position j)
        for (int h = warp; h < kHeadGroup; h += kConsumerWarps) {
          const float x = lane < count ? sm.misc->scores[h][lane] : -INFINITY;
          float mx = x;
#pragma unroll
          for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
          const float m_old = sm.misc->m_run[h];
          const float m_new = fmaxf(m_old, mx);
          const float pr = lane < count ? exp2f(x - m_new) : 0.0f;
          float ps = pr;
#pragma unroll
          for (int o = 16; o > 0; o /= 2) ps += __shfl_xor_sync(0xffffffffu, ps, o);
          const float alpha = m_old == -INFINITY ? 0.0f : exp2f(m_old - m_new);
          if (lane < count) sm.misc->probs[lane][h] = pr;
          __syncwarp();
          if (lane == 0) {
            sm.misc->alpha[h] = alpha;
            sm.misc->l_run[h] = sm.misc->l_run[h] * alpha + ps;
            sm.misc->m_run[h] = m_new;
          }
        }
        bar();
        // o += p c for dims 2dp, 2dp + 1 (< L) of the 16 heads
        if (2 * dp < L) {
#pragma unroll
          for (int h = 0; h < kHeadGroup; ++h) {
            const float al = sm.misc->alpha[h];
            acc[h][0] *= al;
            acc[h][1] *= al;
          }
          for (int j = 0; j < count; ++j) {
            const float2 c = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(tile + j * kv_width + 2 * dp));
#pragma unroll
            for (int q4 = 0; q4 < kHeadGroup / 4; ++q4) {
              const float4 pq = *reinterpret_cast<const float4*>(&sm.misc->probs[j][4 * q4]);
              const float pj[4] = {pq.x, pq.y, pq.z, pq.w};
#pragma unroll
              for (int i = 0; i < 4; ++i) {
                acc[4 * q4 + i][0] = fmaf(pj[i], c.x, acc[4 * q4 + i][0]);
                acc[4 * q4 + i][1] = fmaf(pj[i], c.y, acc[4 * q4 + i][1]);
              }
            }
          }
        }
        release();
      }
      // the task's partial: unnormalised o, running max and sum per head
      if (2 * dp < L) {
#pragma unroll
        for (int h = 0; h < kHeadGroup; ++h) {
          float* o = p.scratch.partial_o + (static_cast<int64_t>(task) * kHeadGroup + h) * L + 2 * dp;
          *reinterpret_cast<float2*>(o) = make_float2(acc[h][0], acc[h][1]);
        }
      }
      if (tid < kHeadGroup) {
        float* ml = p.scratch.partial_ml + (static_cast<int64_t>(task) * kHeadGroup + tid) * 2;
        ml[0] = sm.misc->m_run[tid];
        ml[1] = sm.misc->l_run[tid];
      }
      bar();  // sm.q, m_run and l_run are rewritten by the next task
    }
  }

  __device__ __forceinline__ void route(const MoeRouterParams& r, int il) {
    if (warp == 0) {
      load_logits(r, sm.misc->route_logits, lane);
      moe::route_token(r, sm.misc->route_logits, sm.misc->route_scratch, lane, sm.misc->ids, sm.misc->weights);
    }
    bar();
    if (p.scratch.expert_ids != nullptr && blockIdx.x == 0 && tid < r.k) {
      p.scratch.expert_ids[il * r.k + tid] = sm.misc->ids[tid];
      p.scratch.expert_weights[il * r.k + tid] = sm.misc->weights[tid];
    }
  }
  __device__ __forceinline__ int routed_id(int k) const { return sm.misc->ids[k]; }
  __device__ __forceinline__ float routed_weight(int k) const { return sm.misc->weights[k]; }
  /// After the last phase: its end (no barrier follows it).
  __device__ __forceinline__ void finish(int phase) {
    bar();
    if (tid == 0) {
      ++n_sync;
      record(phase, clock64());
    }
  }

  __device__ __forceinline__ void layer_done(int il) {
    if (p.scratch.layer_out != nullptr && blockIdx.x == 0) {
      for (int i = tid; i < p.s.H; i += kConsumerThreads) {
        p.scratch.layer_out[static_cast<int64_t>(il) * p.s.H + i] = load_l2(p.scratch.x + i);
      }
    }
  }
};

__global__ void __launch_bounds__(kThreads, 1) decode_step_kernel(const __grid_constant__ Params p) {
  extern __shared__ __align__(128) uint8_t smem[];
  Smem sm(smem, p);
  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0) {
    for (int i = 0; i < p.n_stages; ++i) {
      pipeline::mbarrier_init(&sm.misc->full[i], 1);
      pipeline::mbarrier_init(&sm.misc->empty[i], kConsumerWarps);
    }
    pipeline::fence_barrier_init();
  }
  __syncthreads();
  if (tid >= kConsumerThreads) {
    Producer v{p, sm, tid % 32};
    walk(v, p);
  } else {
    Consumer v{p, sm, tid, tid / 32, tid % 32, p.scratch.timing != nullptr};
    if (tid == 0) v.record(-1, clock64());  // slot 0: the start
    walk(v, p);
  }
}

}  // namespace
}  // namespace step

int decode_step_misc_bytes() noexcept { return static_cast<int>((sizeof(step::Misc) + 127) / 128 * 128); }

int decode_step_blocks_per_sm(int smem_bytes) {
  auto* kernel = step::decode_step_kernel;
  LATTE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  int blocks = 0;
  LATTE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, step::kThreads, smem_bytes));
  return blocks;
}

void launch_decode_step(const step::Params& p, int grid, cudaStream_t stream) {
  auto* kernel = step::decode_step_kernel;
  LATTE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, p.smem_bytes));
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeCooperative;
  attribute.val.cooperative = 1;
  // {gridDim, blockDim, dynamicSmemBytes, stream, attrs, numAttrs}, by position (see launch.cuh)
  cudaLaunchConfig_t config{dim3(static_cast<unsigned>(grid)),
                            dim3(step::kThreads),
                            static_cast<size_t>(p.smem_bytes),
                            stream,
                            &attribute,
                            1};
  const cudaError_t status = cudaLaunchKernelEx(&config, kernel, p);
  if (status != cudaSuccess) {
    const std::string what = "launch of the fused decode step (grid " + std::to_string(grid) + ", " +
                             std::to_string(p.smem_bytes) + " bytes of shared memory per block)";
    throw_cuda_error(status, what.c_str(), __FILE__, __LINE__);
  }
}

}  // namespace latte::cuda
