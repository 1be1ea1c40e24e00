// GEMVs of 1-8 tokens against x as split-int8 records (x_int8.hpp): the path gemv_quant() takes when
// GemvParams::x_q is set (launch_gemv in gemv_kernel.cuh decides). Three kernels, each compiled for NT = 1,
// 2, 4 and 8 tokens per block: gemv_x8_kernel (Q4_K, Q5_K, described below), gemv_x8_legacy_kernel (the
// 2-byte aligned Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 blocks and Q6_K super-blocks, staged through shared memory)
// and gemv_x8_short_rows_kernel (legacy rows of 1-16 blocks, several rows per step). A lane decodes each
// weight unit once, for both of its rows, then loads each token's x unit once and multiplies it with both
// rows' codes: with 8 tokens the decode is an eighth of the work.
//
// Why: the fp32 GEMV spends ~3 instructions per weight (code -> float, FMA, plus the shared-memory
// staging of the weights), which caps it near the issue rate at a fraction of the DRAM bandwidth
// (BENCHMARKS.md). Here each weight byte meets x through dp4a: per 64 weights a lane issues 32 dp4a
// and ~60 other instructions, and reads its weights straight from global memory into registers (a
// Q4_K / Q5_K super-block is 16-byte aligned whenever its row is).
//
// Work split: a warp owns two rows (dense: rows 2p and 2p+1; gated: row p of W_gate and of W_up) of a
// tile of four warps; a row is walked in "items" of 64 values -- sub-blocks 2j and 2j+1 of a super-block,
// whose codes share the same 32 qs bytes (low and high nibbles) --, lane l taking items l, l + 32, ...
// Each lane loads its item's 32 qs bytes (Q5_K: and the super-block's 32 qh bytes) and the 16-byte
// header (d, dmin, packed scales; the four lanes of a super-block read the same one) and issues the
// next step's loads before it computes the current one. The block stages x's record in shared memory
// once and walks its tiles (x8_group: blockIdx.x, + gridDim.x, ... of one wave of resident blocks).
//
// Arithmetic per sub-block s with scale d sc_s, offset dmin m_s and x unit u (split_int8_dot.cuh):
//     sum_i (d sc_s c_i - dmin m_s) x_i ~= dx_u / 254 [ d sc_s (254 A + B) - dmin m_s S_u ]
// with A = sum c_i hi_i, B = sum c_i lo_i exact integers. Sums per lane, then over the warp, in fp32.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/environment.hpp"
#include "cuda/bf16_mma.cuh"
#include "cuda/check.hpp"
#include "cuda/device_caps.hpp"
#include "cuda/gemv_quant.hpp"
#include "cuda/launch.cuh"
#include "cuda/moe_route.cuh"
#include "cuda/pipeline_primitives.cuh"
#include "cuda/quant_decode.cuh"
#include "cuda/row_staging.cuh"
#include "cuda/split_int8_dot.cuh"
#include "cuda/x_int8.hpp"

namespace latte::cuda {

/// K-quants whose super-blocks the split-int8 GEMV reads straight into registers (16-byte aligned).
template <GgmlType T>
inline constexpr bool kGemvX8KQuant = T == GgmlType::q4_k || T == GgmlType::q5_k;
/// Types it stages through shared memory first (2-byte aligned blocks): the 32-value legacy blocks and IQ4_NL,
/// Q6_K's 210-byte and IQ4_XS's 136-byte super-blocks.
template <GgmlType T>
inline constexpr bool kGemvX8Legacy =
    T == GgmlType::q8_0 || T == GgmlType::q4_0 || T == GgmlType::q5_0 || T == GgmlType::q4_1 || T == GgmlType::q5_1 ||
    T == GgmlType::q6_k || T == GgmlType::iq4_nl || T == GgmlType::iq4_xs;
/// The staged types of 256-value super-blocks (a lane decodes one 32-value unit of one): Q6_K and IQ4_XS.
template <GgmlType T>
inline constexpr bool kGemvX8SuperBlocks = T == GgmlType::q6_k || T == GgmlType::iq4_xs;
/// Types with a split-int8 GEMV.
template <GgmlType T>
inline constexpr bool kGemvX8Type = kGemvX8KQuant<T> || kGemvX8Legacy<T>;
/// Values per block of such a type: k must be a multiple.
template <GgmlType T>
inline constexpr int kGemvX8BlockValues = quant::BlockTraits<T>::values;

/// Whether gemv_quant may take the split-int8 path (LATTE_GEMV_INT8=0: never, to compare).
inline bool gemv_int8_enabled() {
  static const bool on = latte::detail::env_flag("LATTE_GEMV_INT8", true);
  return on;
}

/// One lane's loads for one item (64 values) of one row.
struct X8Item {
  uint4 head;   ///< d, dmin, scales[12]
  uint4 qs[2];  ///< qs bytes [32 j, 32 j + 32) of the super-block
  uint4 qh[2];  ///< Q5_K: the super-block's qh[32]
};

template <GgmlType T>
__device__ __forceinline__ void x8_load(const uint8_t* row, int item, X8Item& w) {
  constexpr int kBlock = quant::BlockTraits<T>::bytes;
  constexpr int kQs = T == GgmlType::q4_k ? 16 : 48;
  const uint8_t* b = row + static_cast<int64_t>(item >> 2) * kBlock;
  const int j = item & 3;
  w.head = __ldg(reinterpret_cast<const uint4*>(b));
  w.qs[0] = __ldg(reinterpret_cast<const uint4*>(b + kQs + 32 * j));
  w.qs[1] = __ldg(reinterpret_cast<const uint4*>(b + kQs + 32 * j + 16));
  if constexpr (T == GgmlType::q5_k) {
    w.qh[0] = __ldg(reinterpret_cast<const uint4*>(b + 16));
    w.qh[1] = __ldg(reinterpret_cast<const uint4*>(b + 32));
  }
}

__device__ __forceinline__ int x8_dot16(const uint32_t (&c)[8], int first, uint4 x, int acc) {
  acc = pipeline::dot4_us(c[first], x.x, acc);
  acc = pipeline::dot4_us(c[first + 1], x.y, acc);
  acc = pipeline::dot4_us(c[first + 2], x.z, acc);
  return pipeline::dot4_us(c[first + 3], x.w, acc);
}

/// Unit u of a staged record of n units: its hi and lo planes (values 0-15, 16-31) and its meta record.
struct X8XUnit {
  uint4 h0, h1, l0, l1;
  split_int8::Meta m;
};
__device__ __forceinline__ X8XUnit x8_x_unit(const uint8_t* xs, int n, int u) {
  return {*reinterpret_cast<const uint4*>(xs + 16 * u), *reinterpret_cast<const uint4*>(xs + 16 * (n + u)),
          *reinterpret_cast<const uint4*>(xs + 16 * (2 * n + u)),
          *reinterpret_cast<const uint4*>(xs + 16 * (3 * n + u)),
          *reinterpret_cast<const split_int8::Meta*>(xs + 64 * n + 16 * u)};
}

/// What one block multiplies: a matrix of the stack and up to NT tokens (x row, y row) with it.
template <int NT>
struct X8Rows {
  int matrix = 0;
  int count = 0;
  int x_row[NT];
  int y_row[NT];
  int first_tile = 0;  ///< the block walks tiles first_tile, first_tile + tile_stride, ...
  int tile_stride = 1;
};

/// Shared memory bytes the in-block routing (GemvParams::route) takes after the staged records.
inline constexpr int kX8RouteSmemBytes = (moe_max_experts + 2 * moe_max_k) * 4;

/// GemvParams::route: the token's experts chosen by this block (warp 0, moe::route_token), choice j's
/// returned; block (0, 0) also writes them and their weights out. Every thread of the block calls it.
__device__ __forceinline__ int x8_route_choice(const GemvParams& p, uint8_t* route_smem, int j) {
  float* scratch = reinterpret_cast<float*>(route_smem);                 // [moe_max_experts]
  int32_t* ids = reinterpret_cast<int32_t*>(scratch + moe_max_experts);  // [moe_max_k]
  float* weights = reinterpret_cast<float*>(ids + moe_max_k);            // [moe_max_k]
  const int tid = static_cast<int>(threadIdx.x);
  if (tid < 32) moe::route_token(p.route, p.route.logits, scratch, tid, ids, weights);
  __syncthreads();
  if (blockIdx.x == 0 && blockIdx.y == 0 && tid < p.route.k) {
    p.route.ids[tid] = ids[tid];
    p.route.weights[tid] = weights[tid];
  }
  return ids[j];
}

/// Group gr's matrix, token count (at most NT) and rows into r; rows past the count are 0.
template <int NT>
__device__ __forceinline__ void x8_take_group(const GemvParams& p, const GemvGroup& gr, X8Rows<NT>& r) {
  r.matrix = gr.matrix;
  r.count = min(gr.count, NT);
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    r.y_row[t] = t < r.count ? gr.y_row[t] : 0;
    r.x_row[t] = t < r.count ? (p.x_row_is_y_row ? gr.y_row[t] : gr.x_row[t]) : 0;
  }
}

/// This block's matrix, tokens and tiles: dense (tokens 0 .. n_tokens - 1, in rows of NT per blockIdx.y), gathered (a
/// group's) or a choice (choice blockIdx.y: one token); false when the block has nothing to do. Dense launches and
/// choices walk tiles blockIdx.x, + gridDim.x, ... A gathered launch has a row of blocks for each of max_groups groups,
/// but the sort makes fewer (8 tokens x 6 of 64 experts: ~37 of 48, 32 tokens: ~65 of 88): the grid's
/// blocks are dealt out over the groups that exist (as evenly as they divide), so that none of the launch's
/// single wave of resident blocks idles.
template <int NT>
__device__ __forceinline__ bool x8_group(const GemvParams& p, X8Rows<NT>& r, uint8_t* route_smem) {
  const int j = static_cast<int>(blockIdx.y);
#pragma unroll
  for (int t = 0; t < NT; ++t) r.x_row[t] = r.y_row[t] = 0;
  r.first_tile = static_cast<int>(blockIdx.x);
  r.tile_stride = static_cast<int>(gridDim.x);
  if (p.choice_ids != nullptr) {
    const int n_matrices = static_cast<int>(p.weight_bytes / p.matrix_stride_bytes);
    const int id = p.route.logits != nullptr ? x8_route_choice(p, route_smem, j) : p.choice_ids[j];
    r.matrix = min(max(id, 0), n_matrices - 1);
    r.count = 1;
    r.y_row[0] = j;
    r.x_row[0] = p.x_row_is_y_row ? j : p.choices_per_token > 0 ? j / p.choices_per_token : 0;
    return true;
  }
  if (p.groups == nullptr) {
    // dense: rows NT j .. NT j + NT - 1 of x and y (one row of blocks unless the tensor-core GEMV takes
    // more than NT rows, gemv_mma_dense)
    const int first = NT * j;
    r.count = min(p.n_tokens - first, NT);
#pragma unroll
    for (int t = 0; t < NT; ++t) r.x_row[t] = r.y_row[t] = first + (t < r.count ? t : 0);
    return r.count > 0;
  }
  const int n_groups = *p.n_groups;
  const int slots = static_cast<int>(gridDim.y);
  int group = j;
  const int64_t grid_blocks = static_cast<int64_t>(slots) * gridDim.x;
  // deal_blocks only where it gives every group a block (more groups than one wave: a row of blocks each, as
  // without it)
  const int64_t total = p.deal_blocks >= n_groups && p.deal_blocks > 0
                            ? min(grid_blocks, static_cast<int64_t>(p.deal_blocks))
                            : grid_blocks;
  if (n_groups > 0 && (n_groups < slots || total < grid_blocks)) {
    // group g takes blocks [ceil(g total / n), ceil((g + 1) total / n)) of the first `total` in linear order
    const int64_t linear = static_cast<int64_t>(j) * gridDim.x + blockIdx.x;
    if (linear >= total) return false;
    group = static_cast<int>(linear * n_groups / total);
    const int64_t first = (group * total + n_groups - 1) / n_groups;
    const int64_t next = ((group + 1) * total + n_groups - 1) / n_groups;
    r.first_tile = static_cast<int>(linear - first);
    r.tile_stride = static_cast<int>(next - first);
  }
  if (group >= n_groups) return false;
  const GemvGroup& g = p.groups[group];
  if (g.count <= 0) return false;
  x8_take_group(p, g, r);
  return true;
}

/// Where a paired staging (x8_stage_records) puts unit u of n: within each of the five planes, unit u goes
/// to slot u / 2 (even u) or n / 2 + u / 2 (odd u), so that a warp whose lane l reads units 2 l and 2 l + 1
/// reads 32 consecutive 16-byte words per load (no bank conflicts).
__device__ __forceinline__ int x8_pair_slot(int u, int n) { return (u & 1) * (n / 2) + (u >> 1); }

/// 1 / sqrt(mean(x^2) + eps) over the n values of row x (n % 4 == 0, 16-byte aligned), summed by the
/// whole block (every thread calls it): fp32 partial sums per thread, then per warp, then over the warps.
__device__ __forceinline__ float x8_rms_scale(const float* x, int n, float eps) {
  __shared__ float warp_sums[32];
  const int threads = static_cast<int>(blockDim.x), tid = static_cast<int>(threadIdx.x);
  float sum_sq = 0.0f;
  for (int i = 4 * tid; i < n; i += 4 * threads) {
    const float4 v = __ldg(reinterpret_cast<const float4*>(x + i));
    sum_sq += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, o);
  __syncthreads();  // the previous token's sums were read
  if (tid % 32 == 0) warp_sums[tid / 32] = sum_sq;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < threads / 32; ++w) total += warp_sums[w];
  return rsqrtf(total / static_cast<float>(n) + eps);
}

/// The block's tokens' x records (n_units units each) into shared memory, record t at x_record + token_words t
/// (16-byte words; 0: 5 n_units, the records back to back); the caller syncs. Paired (n_units even): units at
/// x8_pair_slot.
///  - from p.x_q (rows x_row[t]), in blocks built for GemvParams::x_async_tokens tokens or more: copied with
///    16-byte asynchronous copies, every token's in flight before the one wait (8 tokens' records are 40 KB
///    at k = 2048), so that a block of 8 tokens does not wait for ~8 round trips to L2 before its first
///    product (BENCHMARKS.md, eleventh round); the caller's cp.async groups committed before are complete too
///    when this returns. Else token after token, each thread issuing four 16-byte loads before it stores them;
///  - without x_q (GemvParams::x_quantize): made from the fp32 rows x_row[t] of p.x, four threads a unit
///    (split_int8::quantize_unit_quad, the same records quantize_x_int8 writes). The trip count is the
///    block's, so every lane of a quad takes part in its shuffles.
template <int NT, bool Paired = false>
__device__ __forceinline__ void x8_stage_records(const GemvParams& p, const X8Rows<NT>& r, int n_units, uint4* x_record,
                                                 int token_words = 0) {
  const int threads = static_cast<int>(blockDim.x);
  const int words = 5 * n_units;
  if (token_words == 0) token_words = words;
  // where word i of a record goes in its token's area (paired: each plane's units at x8_pair_slot)
  auto staged_word = [&](int i) {
    if constexpr (Paired) {
      const int plane = i / n_units, u = i - plane * n_units;
      return plane * n_units + x8_pair_slot(u, n_units);
    } else {
      return i;
    }
  };
  if (p.x_q == nullptr) {
    const int q = static_cast<int>(threadIdx.x) % 4;
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t >= r.count) break;
      const float* x = p.x + static_cast<int64_t>(r.x_row[t]) * p.x_stride;
      uint8_t* area = reinterpret_cast<uint8_t*>(x_record + t * token_words);
      const float inv = p.x_norm_weight != nullptr ? x8_rms_scale(x, 32 * n_units, p.x_norm_eps) : 1.0f;
      for (int base = 0; base < n_units; base += threads / 4) {
        const int u = base + static_cast<int>(threadIdx.x) / 4;
        const bool active = u < n_units;
        float v[8] = {};
        if (active) {
          const float4 a = __ldg(reinterpret_cast<const float4*>(x + 32 * u + 8 * q));
          const float4 b = __ldg(reinterpret_cast<const float4*>(x + 32 * u + 8 * q + 4));
          v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
          if (p.x_norm_weight != nullptr) {
            const float* w = p.x_norm_weight + 32 * u + 8 * q;
#pragma unroll
            for (int j = 0; j < 8; ++j) v[j] = v[j] * inv * w[j];
          }
        }
        const int slot = !active ? 0 : Paired ? x8_pair_slot(u, n_units) : u;
        split_int8::quantize_unit_quad(area, n_units, slot, v, q, active);
      }
    }
    return;
  }
  if (NT >= p.x_async_tokens) {
    // every token's words in flight at once (16-byte asynchronous copies through L1: every block of the
    // launch reads the same records), then one wait
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t >= r.count) break;
      const uint4* src = reinterpret_cast<const uint4*>(p.x_q + static_cast<int64_t>(r.x_row[t]) * p.x_q_stride);
      for (int i = static_cast<int>(threadIdx.x); i < words; i += threads) {
        mma::cp_async_16_l1(x_record + t * token_words + staged_word(i), src + i);
      }
    }
    mma::cp_async_commit();
    mma::cp_async_wait<0>();
    return;
  }
  constexpr int kBatch = 4;
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    if (t >= r.count) break;
    const uint4* src = reinterpret_cast<const uint4*>(p.x_q + static_cast<int64_t>(r.x_row[t]) * p.x_q_stride);
    for (int i0 = static_cast<int>(threadIdx.x); i0 < words; i0 += kBatch * threads) {
      uint4 v[kBatch];
#pragma unroll
      for (int c = 0; c < kBatch; ++c) {
        if (i0 + c * threads < words) v[c] = __ldg(src + i0 + c * threads);
      }
#pragma unroll
      for (int c = 0; c < kBatch; ++c) {
        const int i = i0 + c * threads;
        if (i >= words) break;
        x_record[t * token_words + staged_word(i)] = v[c];
      }
    }
  }
}

/// A sub-block's codes (32 bytes as 8 words) against a loaded x unit.
__device__ __forceinline__ float x8_unit(const uint32_t (&c)[8], const X8XUnit& x, float scale, float offset) {
  const int a = x8_dot16(c, 4, x.h1, x8_dot16(c, 0, x.h0, 0));
  const int b = x8_dot16(c, 4, x.l1, x8_dot16(c, 0, x.l0, 0));
  const int codes = 254 * a + b;
  return x.m.dx * (scale * static_cast<float>(codes) - offset * static_cast<float>(x.m.s0 + x.m.s1));
}

/// The scales d sc and offsets dmin m of sub-blocks 2j and 2j + 1 (item j, 0-3) of a Q4_K / Q5_K super-block
/// from its 16-byte header; sb carries `odd_scale` (the 1 / 16 of high nibbles kept in place).
__device__ __forceinline__ void x8_item_scales(uint4 head, int j, float odd_scale, float& sa, float& sb, float& oa,
                                               float& ob) {
  // 6-bit scales and mins of sub-blocks 0-3 (bytes of scales[0..3], [4..7]) or 4-7 (low nibbles of
  // scales[8..11] and the top bits of [0..3] / [4..7]), four per word; this item's two are bytes 2 (j % 2)
  // and 2 (j % 2) + 1 (k4_scale_min, four at a time)
  const uint32_t s03 = head.y, m03 = head.z, hi = head.w;
  const uint32_t scw = j < 2 ? (s03 & 0x3F3F3F3Fu) : ((hi & 0x0F0F0F0Fu) | ((s03 >> 2) & 0x30303030u));
  const uint32_t mw = j < 2 ? (m03 & 0x3F3F3F3Fu) : (((hi >> 4) & 0x0F0F0F0Fu) | ((m03 >> 2) & 0x30303030u));
  const int shift = 16 * (j & 1);
  const float d = quant::half_bits_to_float(head.x & 0xFFFFu);
  const float dmin = quant::half_bits_to_float(head.x >> 16);
  sa = d * static_cast<float>((scw >> shift) & 0xFFu);
  sb = d * static_cast<float>((scw >> (shift + 8)) & 0xFFu) * odd_scale;
  oa = dmin * static_cast<float>((mw >> shift) & 0xFFu);
  ob = dmin * static_cast<float>((mw >> (shift + 8)) & 0xFFu);
}

/// One item's weights, decoded once for all tokens: the codes of sub-blocks 2j and 2j + 1 and their
/// scales d sc and offsets dmin m.
struct X8ItemCodes {
  uint32_t ca[8], cb[8];
  float sa, sb, oa, ob;
};

template <GgmlType T>
__device__ __forceinline__ void x8_item_codes(const X8Item& w, int item, X8ItemCodes& o) {
  const int j = item & 3;
  const uint32_t q[8] = {w.qs[0].x, w.qs[0].y, w.qs[0].z, w.qs[0].w, w.qs[1].x, w.qs[1].y, w.qs[1].z, w.qs[1].w};
  // sub-blocks 2j (low nibbles) and 2j + 1 (high nibbles). Q4_K keeps the high nibbles in place, 16 times
  // their codes (a shift fewer per word): the sums come out 16 times larger, still exact in int32
  // (32 x 240 x 128 x 254 < 2^31), and the sub-block's scale carries the 1 / 16 (a power of two: the
  // products are the same floats)
  constexpr bool kInPlace = T == GgmlType::q4_k;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    o.ca[i] = q[i] & 0x0F0F0F0Fu;
    o.cb[i] = kInPlace ? q[i] & 0xF0F0F0F0u : (q[i] >> 4) & 0x0F0F0F0Fu;
  }
  if constexpr (T == GgmlType::q5_k) {
    const uint32_t h[8] = {w.qh[0].x, w.qh[0].y, w.qh[0].z, w.qh[0].w, w.qh[1].x, w.qh[1].y, w.qh[1].z, w.qh[1].w};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      o.ca[i] |= ((h[i] >> (2 * j)) & 0x01010101u) << 4;
      o.cb[i] |= ((h[i] >> (2 * j + 1)) & 0x01010101u) << 4;
    }
  }
  x8_item_scales(w.head, j, kInPlace ? 1.0f / 16.0f : 1.0f, o.sa, o.sb, o.oa, o.ob);
}

/// Sums each of the V values `v` (V a power of two, at most 32) over the warp's 32 lanes and returns the sum of
/// value lane / (32 / V), which every lane of that group of 32 / V lanes holds. Each exchange step halves the
/// values a lane keeps (the upper half of the lanes keeps the upper half of the values and sends the lower
/// half): V - 1 + 5 - log2 V shuffles in all instead of 5 V, and the V sums end up in different lanes, which
/// then write them side by side. Every lane calls it.
template <int V>
__device__ __forceinline__ float x8_warp_sums(float (&v)[V], int lane) {
  static_assert(V >= 1 && V <= 32 && (V & (V - 1)) == 0);
  int offset = 16;
#pragma unroll
  for (int half = V / 2; half >= 1; half /= 2, offset /= 2) {
    const bool upper = (lane & offset) != 0;
#pragma unroll
    for (int i = 0; i < half; ++i) {
      const float send = upper ? v[i] : v[i + half];
      const float keep = upper ? v[i + half] : v[i];
      v[i] = keep + __shfl_xor_sync(0xffffffffu, send, offset);
    }
  }
  float sum = v[0];
#pragma unroll
  for (; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  return sum;
}

/// Writes a warp's sums of two rows for each of the block's tokens, then clears them: gated silu(acc[0]) *
/// acc[1] at row r0, else rows r0 and r1; + residual or as bf16 as the launch asks. The 2 NT sums are reduced
/// together (x8_warp_sums) and each is written by the first lane of its group. Every lane calls it.
template <int NT>
__device__ __forceinline__ void x8_finish_tokens(const GemvParams& p, const X8Rows<NT>& r, int r0, int r1,
                                                 float (&acc)[2][NT], int lane) {
  constexpr int V = 2 * NT;
  constexpr int kGroup = 32 / V;  // lanes holding one sum
  float v[V];
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    v[2 * t] = acc[0][t];  // value 2 t + j: token t, row j
    v[2 * t + 1] = acc[1][t];
    acc[0][t] = acc[1][t] = 0.0f;
  }
  const float sum = x8_warp_sums(v, lane);
  // gated (the same for the whole launch): the same token's up sum, from the next group of lanes
  const bool gated = p.weight_up != nullptr;
  const float other = gated ? __shfl_xor_sync(0xffffffffu, sum, kGroup) : 0.0f;
  const int index = lane / kGroup, t = index / 2, j = index % 2;
  const int row = j == 0 ? r0 : r1;
  if (lane % kGroup != 0 || t >= r.count || (gated && j != 0) || row >= p.n_rows) return;
  int y_row = r.y_row[0];
#pragma unroll
  for (int tt = 1; tt < NT; ++tt) y_row = tt == t ? r.y_row[tt] : y_row;  // no dynamic index: registers
  const float value = gated ? sum / (1.0f + __expf(-sum)) * other : sum;
  const int64_t at = static_cast<int64_t>(y_row) * p.y_stride + row;
  if (p.y_bf16 != nullptr) {
    p.y_bf16[at] = __float2bfloat16_rn(value);
  } else {
    p.y[at] = p.residual ? value + p.residual[at] : value;
  }
}

/// The step after (tile, s) in a block's walk: steps 0 .. steps - 1 of each tile, tiles `stride` apart.
__device__ __forceinline__ void x8_next_step(int& tile, int& s, int steps, int stride) {
  if (++s == steps) {
    s = 0;
    tile += stride;
  }
}

/// Each lane loads its next step's item into registers while it multiplies the current one.
template <GgmlType T, int NT>
__global__ void __launch_bounds__(128, 4) gemv_x8_kernel(const GemvParams p, const int tiles) {
  static_assert(kGemvX8KQuant<T>);
  constexpr int kWarps = 4;
  constexpr int R = 2;  // rows per warp
  extern __shared__ __align__(16) uint4 x_record[];
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const bool gathered = p.groups != nullptr || p.choice_ids != nullptr;
  if (gathered) {  // the group table is another kernel's output
    wait_for_producers();
    allow_dependents();
  }
  X8Rows<NT> rows;
  if (!x8_group(p, rows, reinterpret_cast<uint8_t*>(x_record) + NT * x_int8_record_bytes(p.k))) return;

  const bool gated = p.weight_up != nullptr;
  const int64_t row_bytes = static_cast<int64_t>(p.k) / 256 * quant::BlockTraits<T>::bytes;
  const uint8_t* base[R];
#pragma unroll
  for (int j = 0; j < R; ++j) {
    base[j] = static_cast<const uint8_t*>(gated && j == 1 ? p.weight_up : p.weight) +
              static_cast<int64_t>(rows.matrix) * p.matrix_stride_bytes;
  }
  const int items = p.k / 64;
  const int steps = (items + 31) / 32;  // per row and lane
  const int n_units = p.k / 32;
  const int record = 80 * n_units;  // bytes of one token's staged record
  auto out_row = [&](int tile, int j) {
    const int pair = tile * kWarps + warp;
    return gated ? pair : R * pair + j;
  };
  // the loads of step (tile, s): item lane + 32 s of the warp's rows, where both exist
  auto load = [&](int tile, int s, X8Item(&w)[R]) {
    const int item = lane + 32 * s;
#pragma unroll
    for (int j = 0; j < R; ++j) {
      const int row = out_row(tile, j);
      if (row < p.n_rows && item < items) x8_load<T>(base[j] + row * row_bytes, item, w[j]);
    }
  };

  int tile = rows.first_tile, s = 0;
  X8Item cur[R], next[R];
  // weights are never written by a step: the first loads go out before the wait
  if (tile < tiles) load(tile, s, cur);
  if (!gathered) {
    wait_for_producers();
    allow_dependents();
  }
  x8_stage_records<NT, true>(p, rows, n_units, x_record);  // item i's units 2i, 2i + 1 at x8_pair_slot
  __syncthreads();
  const uint8_t* xs = reinterpret_cast<const uint8_t*>(x_record);

  float acc[R][NT] = {};
  while (tile < tiles) {
    int next_tile = tile, next_s = s;
    x8_next_step(next_tile, next_s, steps, rows.tile_stride);
    if (next_tile < tiles) load(next_tile, next_s, next);
    const int item = lane + 32 * s;
    if (item < items) {
      // both rows' codes once (a row past the end decodes registers never loaded; its sums are never
      // written), then each token's x units once for both rows
      X8ItemCodes c[R];
#pragma unroll
      for (int j = 0; j < R; ++j) x8_item_codes<T>(cur[j], item, c[j]);
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        if (t >= rows.count) continue;
        const X8XUnit xa = x8_x_unit(xs + t * record, n_units, x8_pair_slot(2 * item, n_units));
        const X8XUnit xb = x8_x_unit(xs + t * record, n_units, x8_pair_slot(2 * item + 1, n_units));
#pragma unroll
        for (int j = 0; j < R; ++j) {
          acc[j][t] += x8_unit(c[j].ca, xa, c[j].sa, c[j].oa) + x8_unit(c[j].cb, xb, c[j].sb, c[j].ob);
        }
      }
    }
    if (s == steps - 1) x8_finish_tokens(p, rows, out_row(tile, 0), out_row(tile, 1), acc, lane);
    tile = next_tile;
    s = next_s;
#pragma unroll
    for (int j = 0; j < R; ++j) cur[j] = next[j];
  }
}

/// `N` 32-bit words starting at the even byte offset `off` of shared memory `s` (N + 1 aligned loads and a
/// 16-bit funnel shift when off % 4 == 2).
template <int N>
__device__ __forceinline__ void x8_words(const uint8_t* s, int off, uint32_t (&w)[N]) {
  const uint32_t* a = reinterpret_cast<const uint32_t*>(s + (off & ~3));
  const int shift = 8 * (off & 2);
  uint32_t raw[N + 1];
#pragma unroll
  for (int i = 0; i <= N; ++i) raw[i] = a[i];
#pragma unroll
  for (int i = 0; i < N; ++i) w[i] = funnel_shift_right(raw[i], raw[i + 1], shift);
}

/// One 32-value unit of weights decoded once for all tokens: codes (8 words of 4), the scale of each 16-value
/// half and, for the types with a minimum, the offset m.
struct X8UnitCodes {
  uint32_t c[8];
  float s0, s1;  ///< scale of values 0-15 and 16-31
  float mn;      ///< Q4_1 / Q5_1: d m (value = d c + m)
};

/// Q6_K unit `sub` (0-7) of the super-block at the even offset `off` of the staged row: low 4 bits from ql,
/// high 2 from qh, an int8 scale per 16 values, codes offset by 32.
__device__ __forceinline__ void x8_q6k_codes(const uint8_t* st, int off, int sub, X8UnitCodes& o) {
  const int half = sub / 4, q = sub % 4;
  uint32_t lo[8], hi[8];
  x8_words<8>(st, off + 64 * half + 32 * (q % 2), lo);
  x8_words<8>(st, off + 128 + 32 * half, hi);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    o.c[i] = ((lo[i] >> (4 * (q / 2))) & 0x0F0F0F0Fu) | (((hi[i] >> (2 * q)) & 0x03030303u) << 4);
  }
  const uint32_t scales = *reinterpret_cast<const uint16_t*>(st + off + 192 + 8 * half + 2 * q);
  const float d = quant::half_bits_to_float(*reinterpret_cast<const uint16_t*>(st + off + 208));
  o.s0 = d * static_cast<float>(static_cast<int8_t>(scales & 0xFFu));
  o.s1 = d * static_cast<float>(static_cast<int8_t>(scales >> 8));
  o.mn = 0.0f;
}

/// IQ4_XS unit `sub` (0-7) of the super-block at the even offset `off` of the staged row: its 16 qs bytes as
/// IQ4_NL's, codes k_iq4_levels + 128, one scale d (ls - 32) for the 32 values (x8_block_dot takes it).
__device__ __forceinline__ void x8_iq4xs_codes(const uint8_t* st, int off, int sub, X8UnitCodes& o) {
  uint32_t w[4];
  x8_words<4>(st, off + 8 + 16 * sub, w);
  quant::iq4_unit_codes(w, o.c);
  const int factor =
      quant::iq4xs_scale_factor(*reinterpret_cast<const uint16_t*>(st + off + 2), st[off + 4 + sub / 2], sub);
  o.s0 = o.s1 = quant::half_bits_to_float(*reinterpret_cast<const uint16_t*>(st + off)) * static_cast<float>(factor);
  o.mn = 0.0f;
}

/// A decoded Q6_K unit against a loaded x unit.
__device__ __forceinline__ float x8_q6k_dot(const X8UnitCodes& w, const X8XUnit& x) {
  const int c0 = 254 * x8_dot16(w.c, 0, x.h0, 0) + x8_dot16(w.c, 0, x.l0, 0) - 32 * x.m.s0;
  const int c1 = 254 * x8_dot16(w.c, 4, x.h1, 0) + x8_dot16(w.c, 4, x.l1, 0) - 32 * x.m.s1;
  return x.m.dx * (w.s0 * static_cast<float>(c0) + w.s1 * static_cast<float>(c1));
}

/// One legacy block (32 values, at the even byte offset `off` of the staged row), decoded.
template <GgmlType T>
__device__ __forceinline__ void x8_block_codes(const uint8_t* st, int off, X8UnitCodes& o) {
  constexpr bool kMin = T == GgmlType::q4_1 || T == GgmlType::q5_1;  // {d, m, ...}: value = d c + m
  constexpr int kData = kMin ? 4 : 2;                                // bytes before qh / qs
  o.s0 = o.s1 = quant::half_bits_to_float(*reinterpret_cast<const uint16_t*>(st + off));
  o.mn = kMin ? quant::half_bits_to_float(*reinterpret_cast<const uint16_t*>(st + off + 2)) : 0.0f;
  if constexpr (T == GgmlType::q8_0) {
    uint32_t w[8];
    x8_words<8>(st, off + kData, w);
#pragma unroll
    for (int i = 0; i < 8; ++i) o.c[i] = w[i] ^ 0x80808080u;  // code = q + 128
  } else if constexpr (T == GgmlType::iq4_nl) {
    uint32_t w[4];
    x8_words<4>(st, off + kData, w);
    quant::iq4_unit_codes(w, o.c);  // code = level + 128
  } else {
    constexpr bool kFive = T == GgmlType::q5_0 || T == GgmlType::q5_1;
    uint32_t w[kFive ? 5 : 4];
    x8_words<kFive ? 5 : 4>(st, off + kData, w);
    const uint32_t* qs = kFive ? w + 1 : w;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      o.c[i] = qs[i] & 0x0F0F0F0Fu;             // values 4i .. 4i + 3
      o.c[4 + i] = (qs[i] >> 4) & 0x0F0F0F0Fu;  // values 16 + 4i ..
    }
    if constexpr (kFive) {
      // bit j of qh is the fifth bit of value j: four bits to bit 4 of four bytes by one multiply
#pragma unroll
      for (int i = 0; i < 8; ++i) o.c[i] |= (((w[0] >> (4 * i)) & 0xFu) * 0x02040810u) & 0x10101010u;
    }
  }
}

/// A decoded legacy block against a loaded x unit.
template <GgmlType T>
__device__ __forceinline__ float x8_block_dot(const X8UnitCodes& w, const X8XUnit& x) {
  constexpr bool kMin = T == GgmlType::q4_1 || T == GgmlType::q5_1;
  const int a = x8_dot16(w.c, 4, x.h1, x8_dot16(w.c, 0, x.h0, 0));
  const int b = x8_dot16(w.c, 4, x.l1, x8_dot16(w.c, 0, x.l0, 0));
  if constexpr (kMin) {
    return x.m.dx * (w.s0 * static_cast<float>(254 * a + b) + w.mn * static_cast<float>(x.m.s0 + x.m.s1));
  } else {
    constexpr int kOff = split_int8::kIntegerOffset<T>;
    return x.m.dx * (w.s0 * static_cast<float>(254 * a + b - kOff * (x.m.s0 + x.m.s1)));
  }
}

/// One step of a legacy-type GEMV warp (gemv_x8_legacy_kernel): blocks
/// [32 s, 32 s + 32) of its two rows (Q6_K / IQ4_XS: units), staged at st[j] + mis[j], decoded once and multiplied
/// with each of the block's tokens' records; the sums go to acc.
template <GgmlType T, int NT>
__device__ __forceinline__ void x8_legacy_step(const uint8_t* const (&st)[2], const int (&mis)[2], int s, int n_units,
                                               const X8Rows<NT>& rows, const uint8_t* xs, int record, int lane,
                                               float (&acc)[2][NT]) {
  constexpr int R = 2;
  constexpr int kBytes = quant::BlockTraits<T>::bytes;
  constexpr int kUnitsPerBlock = quant::BlockTraits<T>::values / 32;
  const int u = 32 * s + lane;
  const int left = n_units - 32 * s;  // blocks of each row in this step
  if (kUnitsPerBlock == 1 && left <= 16) {
    // a short last step (k = 1408: 12 of 44 blocks): the two rows' blocks side by side, lanes 0-15 on
    // row 0 and 16-31 on row 1, one decode per lane instead of two over 12 busy lanes
    const int j = lane / 16, b = lane % 16;
    if constexpr (kUnitsPerBlock == 1) {
      if (b < left) {
        X8UnitCodes c;
        x8_block_codes<T>(st[j], (j == 0 ? mis[0] : mis[1]) + b * kBytes, c);
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          if (t >= rows.count) continue;
          const float v = x8_block_dot<T>(c, x8_x_unit(xs + t * record, n_units, 32 * s + b));
          if (j == 0) {
            acc[0][t] += v;
          } else {
            acc[1][t] += v;
          }
        }
      }
    }
  } else if (u < n_units) {
    // both rows' codes once (a row past the end decodes its stale stage; its sums are never written),
    // then each token's x unit once for both rows
    X8UnitCodes c[R];
#pragma unroll
    for (int j = 0; j < R; ++j) {
      if constexpr (T == GgmlType::q6_k) {
        x8_q6k_codes(st[j], mis[j] + lane / 8 * kBytes, lane % 8, c[j]);
      } else if constexpr (T == GgmlType::iq4_xs) {
        x8_iq4xs_codes(st[j], mis[j] + lane / 8 * kBytes, lane % 8, c[j]);
      } else {
        x8_block_codes<T>(st[j], mis[j] + lane * kBytes, c[j]);
      }
    }
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t >= rows.count) continue;
      const X8XUnit x = x8_x_unit(xs + t * record, n_units, u);
#pragma unroll
      for (int j = 0; j < R; ++j) {
        if constexpr (T == GgmlType::q6_k) {
          acc[j][t] += x8_q6k_dot(c[j], x);
        } else {
          acc[j][t] += x8_block_dot<T>(c[j], x);
        }
      }
    }
  }
}

/// GEMV of a legacy 32-value block type (or Q6_K) on split-int8 x, 1 to NT tokens. A warp owns two rows as
/// in gemv_x8_kernel; a step is 32 blocks of each row (lane l: block 32 s + l; Q6_K: 32 units). The blocks
/// are 2-byte aligned at best, so the warp copies each step's bytes into shared memory with coalesced
/// aligned 16-byte chunks and each lane reads its block from there as aligned words, decodes it once and
/// multiplies it with every token's record. The chunks are loaded into registers one step ahead and stored
/// after the step.
template <GgmlType T, int NT>
__global__ void __launch_bounds__(128, 4) gemv_x8_legacy_kernel(const GemvParams p, const int tiles) {
  static_assert(kGemvX8Legacy<T>);
  constexpr int kWarps = 4;
  constexpr int R = 2;
  constexpr int kBytes = quant::BlockTraits<T>::bytes;
  constexpr int kUnitsPerBlock = quant::BlockTraits<T>::values / 32;      // 8 for Q6_K, else 1
  constexpr int kChunks = (32 / kUnitsPerBlock * kBytes + 15 + 15) / 16;  // one step of a row, misaligned
  constexpr int CPL = (kChunks + 31) / 32;                                // chunks per lane
  // + one spare chunk: x8_words reads one word past a block
  __shared__ __align__(16) uint4 stage[kWarps][R][32 * CPL + 1];
  extern __shared__ __align__(16) uint4 x_record[];
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const bool gathered = p.groups != nullptr || p.choice_ids != nullptr;
  if (gathered) {
    wait_for_producers();
    allow_dependents();
  }
  X8Rows<NT> rows;
  if (!x8_group(p, rows, reinterpret_cast<uint8_t*>(x_record) + NT * x_int8_record_bytes(p.k))) return;
  const bool gated = p.weight_up != nullptr;
  const int n_units = p.k / 32;
  const int record = 80 * n_units;
  const int64_t row_bytes = static_cast<int64_t>(n_units / kUnitsPerBlock) * kBytes;
  const int steps = (n_units + 31) / 32;
  const uint8_t* lo[R];
  const uint8_t* hi[R];
  const uint8_t* base[R];
#pragma unroll
  for (int j = 0; j < R; ++j) {
    lo[j] = static_cast<const uint8_t*>(gated && j == 1 ? p.weight_up : p.weight);
    hi[j] = lo[j] + p.weight_bytes;
    base[j] = lo[j] + static_cast<int64_t>(rows.matrix) * p.matrix_stride_bytes;
  }
  auto out_row = [&](int tile, int j) {
    const int pair = tile * kWarps + warp;
    return gated ? pair : R * pair + j;
  };
  // where step (tile, s) of row j starts: blocks [32 s, 32 s + 32); its misalignment (0-15) is the start's
  auto step_start = [&](int tile, int s, int j) {
    return base[j] + out_row(tile, j) * row_bytes + static_cast<int64_t>(32 / kUnitsPerBlock * s) * kBytes;
  };
  auto misalignment = [](const uint8_t* start) { return static_cast<int>(reinterpret_cast<uintptr_t>(start) & 15); };
  // the aligned chunks covering step (tile, s) of each row: chunk(j, c, source) for each of this lane's
  auto for_chunks = [&](int tile, int s, auto&& chunk) {
#pragma unroll
    for (int j = 0; j < R; ++j) {
      const uint8_t* start = step_start(tile, s, j);
      const int m = misalignment(start);
      const int bytes = min(32, n_units - 32 * s) / kUnitsPerBlock * kBytes;
      const int chunks = out_row(tile, j) < p.n_rows ? (m + bytes + 15) / 16 : 0;
#pragma unroll
      for (int c = 0; c < CPL; ++c) {
        if (32 * c + lane < chunks) chunk(j, c, start - m + 16 * (32 * c + lane));
      }
    }
  };
  // step (tile, s) into registers, stored into the stage after the step before is multiplied
  uint4 regs[R][CPL];
  auto load = [&](int tile, int s) {
    for_chunks(tile, s, [&](int j, int c, const uint8_t* src) { regs[j][c] = load_chunk_guarded(src, lo[j], hi[j]); });
  };
  auto store = [&]() {
#pragma unroll
    for (int j = 0; j < R; ++j)
#pragma unroll
      for (int c = 0; c < CPL; ++c) stage[warp][j][32 * c + lane] = regs[j][c];
  };
  int tile = rows.first_tile, s = 0;
  // weights are never written by a step: the first step's loads go out before the wait
  if (tile < tiles) load(tile, s);
  if (!gathered) {
    wait_for_producers();
    allow_dependents();
  }
  x8_stage_records(p, rows, n_units, x_record);
  store();
  __syncthreads();
  const uint8_t* xs = reinterpret_cast<const uint8_t*>(x_record);

  float acc[R][NT] = {};
  while (tile < tiles) {
    int next_tile = tile, next_s = s;
    x8_next_step(next_tile, next_s, steps, rows.tile_stride);
    const bool more = next_tile < tiles;
    if (more) load(next_tile, next_s);
    const uint8_t* st[R] = {reinterpret_cast<const uint8_t*>(stage[warp][0]),
                            reinterpret_cast<const uint8_t*>(stage[warp][1])};
    const int mis[R] = {misalignment(step_start(tile, s, 0)), misalignment(step_start(tile, s, 1))};
    x8_legacy_step<T, NT>(st, mis, s, n_units, rows, xs, record, lane, acc);
    if (s == steps - 1) x8_finish_tokens(p, rows, out_row(tile, 0), out_row(tile, 1), acc, lane);
    __syncwarp();  // every lane has read the step before it is overwritten
    if (more) store();
    __syncwarp();
    tile = next_tile;
    s = next_s;
  }
}

/// gemv_x8_legacy_kernel for short rows of G = 1, 2, 4, 8 or 16 blocks (not gated), e.g. the per-head
/// W_UK (k = 128): consecutive rows are consecutive blocks, so one staged step of 32 blocks covers 32 / G
/// rows; lane l takes block l % G of row l / G and the G lanes of a row sum through shuffles. A warp owns
/// two such steps (2 x 32 / G rows) per tile.
template <GgmlType T, int NT>
__global__ void __launch_bounds__(128, 4) gemv_x8_short_rows_kernel(const GemvParams p, const int tiles) {
  static_assert(kGemvX8Legacy<T>);
  constexpr int kWarps = 4;
  constexpr int R = 2;
  constexpr int kBytes = quant::BlockTraits<T>::bytes;
  constexpr int kChunks = (32 * kBytes + 15 + 15) / 16;
  constexpr int CPL = (kChunks + 31) / 32;
  __shared__ __align__(16) uint4 stage[kWarps][R][32 * CPL + 1];
  extern __shared__ __align__(16) uint4 x_record[];
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const bool gathered = p.groups != nullptr || p.choice_ids != nullptr;
  if (gathered) {
    wait_for_producers();
    allow_dependents();
  }
  X8Rows<NT> rows;
  if (!x8_group(p, rows, reinterpret_cast<uint8_t*>(x_record) + NT * x_int8_record_bytes(p.k))) return;
  const int G = p.k / 32;  // blocks per row (a power of two below 32)
  const int record = 80 * G;
  const int rows_per_step = 32 / G;
  const int64_t row_bytes = static_cast<int64_t>(G) * kBytes;
  const uint8_t* lo = static_cast<const uint8_t*>(p.weight);
  const uint8_t* hi = lo + p.weight_bytes;
  const uint8_t* base = lo + static_cast<int64_t>(rows.matrix) * p.matrix_stride_bytes;
  auto first_row = [&](int tile, int j) { return ((tile * kWarps + warp) * R + j) * rows_per_step; };
  uint4 regs[R][CPL];
  int mis[R], next_mis[R];
  auto load = [&](int tile, int(&m)[R]) {
#pragma unroll
    for (int j = 0; j < R; ++j) {
      const int r0 = first_row(tile, j);
      const uint8_t* start = base + r0 * row_bytes;
      const int bytes = static_cast<int>(max(0, min(rows_per_step, p.n_rows - r0)) * row_bytes);
      m[j] = static_cast<int>(reinterpret_cast<uintptr_t>(start) & 15);
      const int chunks = bytes > 0 ? (m[j] + bytes + 15) / 16 : 0;
#pragma unroll
      for (int c = 0; c < CPL; ++c) {
        const int chunk = 32 * c + lane;
        if (chunk < chunks) regs[j][c] = load_chunk_guarded(start - m[j] + 16 * chunk, lo, hi);
      }
    }
  };
  auto store = [&]() {
#pragma unroll
    for (int j = 0; j < R; ++j)
#pragma unroll
      for (int c = 0; c < CPL; ++c) stage[warp][j][32 * c + lane] = regs[j][c];
  };

  int tile = rows.first_tile;
  if (tile < tiles) load(tile, mis);
  if (!gathered) {
    wait_for_producers();
    allow_dependents();
  }
  x8_stage_records(p, rows, G, x_record);
  store();
  __syncthreads();
  const uint8_t* xs = reinterpret_cast<const uint8_t*>(x_record);

  while (tile < tiles) {
    const int next_tile = tile + rows.tile_stride;
    const bool more = next_tile < tiles;
    if (more) load(next_tile, next_mis);
#pragma unroll
    for (int j = 0; j < R; ++j) {
      const int row = first_row(tile, j) + lane / G;
      X8UnitCodes c{};
      if (row < p.n_rows)
        x8_block_codes<T>(reinterpret_cast<const uint8_t*>(stage[warp][j]), mis[j] + lane * kBytes, c);
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        if (t >= rows.count) break;
        float v = row < p.n_rows ? x8_block_dot<T>(c, x8_x_unit(xs + t * record, G, lane % G)) : 0.0f;
        for (int o = 1; o < G; o *= 2) v += __shfl_xor_sync(0xffffffffu, v, o);  // the row's G lanes
        if (lane % G == 0 && row < p.n_rows) {
          const int64_t y0 = static_cast<int64_t>(rows.y_row[t]) * p.y_stride;
          if (p.y_bf16 != nullptr) {
            p.y_bf16[y0 + row] = __float2bfloat16_rn(v);
          } else {
            p.y[y0 + row] = p.residual ? v + p.residual[y0 + row] : v;
          }
        }
      }
    }
    __syncwarp();  // every lane has read the step before it is overwritten
    if (more) store();
    __syncwarp();
    tile = next_tile;
#pragma unroll
    for (int j = 0; j < R; ++j) mis[j] = next_mis[j];
  }
}

int gemv_resident_blocks(const void* kernel, int smem);

/// Shared memory the records of x may take (one token: k up to 26214; 8 tokens: k up to 3276).
inline constexpr int kGemvX8MaxRecordBytes = 64 * 1024;

/// Tokens per block a launch of `tokens` (1-8) is compiled for: 1, 2, 4 or 8.
inline constexpr int gemv_x8_tokens(int tokens) { return tokens <= 1 ? 1 : tokens <= 2 ? 2 : tokens <= 4 ? 4 : 8; }

/// Most tokens one block of the launch multiplies: a choice's one, a group's bound, or the dense count.
inline int gemv_x8_block_tokens(const GemvParams& p) {
  return p.choice_ids ? 1 : p.groups ? p.max_tokens_per_group : p.n_tokens;
}

/// Whether launch_gemv_x8 takes this launch (see GemvParams::x_q and x_quantize). The tensor-core GEMV asks
/// with a record limit of its own (`max_record_bytes`: it checks the device's shared memory itself).
template <GgmlType T>
inline bool gemv_x8_applies(const GemvParams& p, int64_t max_record_bytes = kGemvX8MaxRecordBytes) {
  if constexpr (!kGemvX8Type<T>) {
    return false;
  } else {
    const int tokens = gemv_x8_block_tokens(p);
    // the K-quant kernel loads super-blocks as 16-byte words: rows and matrices 16-byte aligned
    const bool aligned =
        kGemvX8Legacy<T> || (reinterpret_cast<uintptr_t>(p.weight) % 16 == 0 &&
                             (p.weight_up == nullptr || reinterpret_cast<uintptr_t>(p.weight_up) % 16 == 0) &&
                             p.matrix_stride_bytes % 16 == 0);
    return (p.x_q != nullptr || p.x_quantize) && tokens >= 1 && tokens <= gemv_max_tokens &&
           p.k % kGemvX8BlockValues<T> == 0 && gemv_x8_tokens(tokens) * x_int8_record_bytes(p.k) <= max_record_bytes &&
           aligned && gemv_int8_enabled();
  }
}

template <GgmlType T, int NT>
void launch_gemv_x8_as(const GemvParams& p, cudaStream_t stream) {
  void (*kernel)(const GemvParams, const int) = nullptr;
  const int units = p.k / 32;
  // rows of 1-16 blocks (a power of two), not gated: several rows per staged step
  const bool short_rows =
      kGemvX8Legacy<T> && !kGemvX8SuperBlocks<T> && units < 32 && (units & (units - 1)) == 0 && p.weight_up == nullptr;
  if constexpr (kGemvX8KQuant<T>) {
    kernel = gemv_x8_kernel<T, NT>;
  } else if constexpr (kGemvX8SuperBlocks<T>) {
    kernel = gemv_x8_legacy_kernel<T, NT>;
  } else {
    kernel = short_rows ? gemv_x8_short_rows_kernel<T, NT> : gemv_x8_legacy_kernel<T, NT>;
  }
  const int smem = static_cast<int>(NT * x_int8_record_bytes(p.k)) + (p.route.logits ? kX8RouteSmemBytes : 0);
  LATTE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const int64_t rows_per_warp = short_rows ? 2 * (32 / units) : p.weight_up ? 1 : 2;
  const int64_t pairs = (p.n_rows + rows_per_warp - 1) / rows_per_warp;  // warps' row groups
  const int tiles = static_cast<int>((pairs + 3) / 4);
  const int groups = p.groups || p.choice_ids ? p.max_groups : 1;
  int device = 0;
  LATTE_CUDA_CHECK(cudaGetDevice(&device));
  // one wave of resident blocks over all groups; each walks an equal share of its group's tiles
  const int64_t resident = static_cast<int64_t>(device_caps(device).sm_count) *
                           gemv_resident_blocks(reinterpret_cast<const void*>(kernel), smem);
  const int64_t cap = std::max<int64_t>(1, resident / groups);
  const int64_t per_block = (tiles + cap - 1) / cap;
  const dim3 grid(static_cast<unsigned>((tiles + per_block - 1) / per_block), static_cast<unsigned>(groups));
  launch_kernel(kernel, grid, dim3(128), static_cast<size_t>(smem), stream, p, tiles);
}

template <GgmlType T>
void launch_gemv_x8(const GemvParams& p, cudaStream_t stream) {
  if constexpr (kGemvX8Type<T>) {
    const int tokens = gemv_x8_block_tokens(p);
    switch (gemv_x8_tokens(tokens)) {
      case 1:
        return launch_gemv_x8_as<T, 1>(p, stream);
      case 2:
        return launch_gemv_x8_as<T, 2>(p, stream);
      case 4:
        return launch_gemv_x8_as<T, 4>(p, stream);
      default:
        return launch_gemv_x8_as<T, 8>(p, stream);
    }
  }
}

}  // namespace latte::cuda
