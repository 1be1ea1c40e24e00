// Split-int8 GEMV of Q4_K / Q5_K weights (gemv_mma_kernel) and of the legacy 32-value types and Q6_K
// (gemv_mma_staged_kernel) with 3-8 tokens per block on the int8 tensor cores (mma.m16n8k32, unsigned weight
// codes x signed x bytes): the path launch_gemv takes for gathered groups of several tokens (the MoE experts
// of a batched decode step) and for dense launches of up to 64 rows with records (the projections of a batched
// step, one row of blocks per 8 rows, the weights read from L2 after the first) instead of the gemv_x8
// kernels, whose dp4a chains
// cost ~50 instructions per token and 64 weights (BENCHMARKS.md: 32-token steps issue-bound at ~1.1 TB/s).
// Here a warp's 16x8 tile of (rows x tokens) per 32-value sub-block is four tensor-core instructions (the
// two x planes of two sub-blocks per item) and ~20 scalar ones to scale and add the integer sums, whatever
// the group's token count.
//
// Work split: a warp owns a 16-row tile of W_gate and the same rows of W_up (gated) or two 16-row tiles
// (dense), four warps a block tile; the block stages its group's x records (x_int8.hpp) in shared memory
// once and walks tiles blockIdx.x, + gridDim.x, ... (x8_group). A warp walks K one super-block at a time,
// loading the next step's weights before it computes the current one.
//
// Fragments (g = lane / 4, t = lane % 4, bf16_mma.cuh): the tensor core's k index is any bijection of a
// sub-block's 32 positions, as long as A and B use the same one. Lane t takes positions 8t .. 8t + 7 of
// each sub-block: k 4t..4t+3 <- positions 8t..8t+3 and k 4t+16.. <- 8t+4..8t+7. For rows g and g + 8 those
// are the 8 qs bytes at 32 i + 8 t of item i (low nibbles: sub-block 2i, high: 2i + 1), one 8-byte load per
// row and item; for token g the 8 bytes at 8t of the unit in each x plane, one 8-byte shared load.
//
// Arithmetic, per element (row r, token n) and sub-block s with x unit u (split_int8_dot.cuh):
//     y += dx_u / 254 [ d sc_s (254 A + B) - dmin m_s S_u ],   A, B the tensor core's exact int32 sums.
// Q4_K keeps the high nibbles in place (16 times the codes: 32 x 240 x 127 x 254 < 2^31), sc carrying 1/16.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/environment.hpp"
#include "cuda/bf16_mma.cuh"
#include "cuda/gemv_x8_kernel.cuh"

namespace latte::cuda {

/// Whether the tensor-core GEMV may take gathered launches of several tokens (LATTE_GEMV_MMA=0: never).
inline bool gemv_mma_enabled() {
  static const bool on = latte::detail::env_flag("LATTE_GEMV_MMA", true);
  return on;
}

/// Fewest tokens per block (the launch's bound, 1-8) for which it does (LATTE_GEMV_MMA_MIN_TOKENS, default 3:
/// the 4- and 8-token builds). Measured on an H200 (BENCHMARKS.md): with groups of 2 (8 sequences x 6 of 64
/// experts) the dp4a kernel is faster (x8 1,148 against 1,060 t/s); with groups of 8, 2x faster per launch.
inline int gemv_mma_min_tokens() {
  static const int n = latte::detail::env_int("LATTE_GEMV_MMA_MIN_TOKENS", 3);
  return n;
}

/// One lane's loads of `Items` items (4: a whole super-block, 2: half of one) for rows g and g + 8 of a tile:
/// the headers (d, dmin, scales), the 8 qs bytes of each item at 32 i + 8 t and, for Q5_K, the 8 qh bytes at 8 t.
template <int Items = 4>
struct MmaRows {
  uint4 head[2];
  uint2 qs[2][Items];
  uint2 qh[2];
};

/// Items first_item .. first_item + Items - 1 of super-block sb of rows g and g + 8.
template <GgmlType T, int Items>
__device__ __forceinline__ void mma_load(const uint8_t* row_g, const uint8_t* row_g8, int sb, int first_item, int t,
                                         MmaRows<Items>& w) {
  constexpr int kBlock = quant::BlockTraits<T>::bytes;
  constexpr int kQs = T == GgmlType::q4_k ? 16 : 48;
  const uint8_t* rows[2] = {row_g + static_cast<int64_t>(sb) * kBlock, row_g8 + static_cast<int64_t>(sb) * kBlock};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    w.head[h] = __ldg(reinterpret_cast<const uint4*>(rows[h]));
#pragma unroll
    for (int i = 0; i < Items; ++i) {
      w.qs[h][i] = __ldg(reinterpret_cast<const uint2*>(rows[h] + kQs + 32 * (first_item + i) + 8 * t));
    }
    if constexpr (T == GgmlType::q5_k) w.qh[h] = __ldg(reinterpret_cast<const uint2*>(rows[h] + 16 + 8 * t));
  }
}

/// The A fragments of item `item` of the super-block, loaded in w's slot i: sub-block 2 item (lo) and
/// 2 item + 1 (hi), rows g and g + 8.
template <GgmlType T, int Items>
__device__ __forceinline__ void mma_item_codes(const MmaRows<Items>& w, int slot, int i, uint32_t (&lo)[4],
                                               uint32_t (&hi)[4]) {
  const uint32_t q[4] = {w.qs[0][slot].x, w.qs[1][slot].x, w.qs[0][slot].y, w.qs[1][slot].y};
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    lo[r] = q[r] & 0x0F0F0F0Fu;
    if constexpr (T == GgmlType::q4_k) {
      hi[r] = q[r] & 0xF0F0F0F0u;  // 16 times the codes
    } else {
      const uint32_t h = r < 2 ? (r == 0 ? w.qh[0].x : w.qh[1].x) : (r == 2 ? w.qh[0].y : w.qh[1].y);
      lo[r] |= ((h >> (2 * i)) & 0x01010101u) << 4;
      hi[r] = ((q[r] >> 4) & 0x0F0F0F0Fu) | (((h >> (2 * i + 1)) & 0x01010101u) << 4);
    }
  }
}

/// y (fp32, + residual, or bf16) at token row y_row, feature r.
__device__ __forceinline__ void mma_store(const GemvParams& p, int y_row, int r, float v) {
  const int64_t at = static_cast<int64_t>(y_row) * p.y_stride + r;
  if (p.y_bf16 != nullptr) {
    p.y_bf16[at] = __float2bfloat16_rn(v);
  } else {
    p.y[at] = p.residual ? v + p.residual[at] : v;
  }
}

/// 8-token tiles (the tensor core's n) of a block built for NT tokens: one for 4 and 8, two for 16. A block of 16
/// decodes each weight fragment once for both tiles.
template <int NT>
inline constexpr int kMmaTokenTiles = (NT + 7) / 8;

/// A lane's view of token tile q (tokens 8q .. 8q + 7) of the block's staged tokens: B fragments of token 8q + g
/// (hi plane at xb + 16 u, lo plane at xb + 32 n + 16 u), the meta records of tokens 8q + 2t and 8q + 2t + 1
/// (xm[c] + 16 u) and where their sums go. Slots past the group's count read token 0; their sums are never
/// written (live false).
struct MmaTokens {
  const uint8_t* xb;
  const uint8_t* xm[2];
  int y_row[2];
  bool live[2];
};

template <int NT>
__device__ __forceinline__ MmaTokens mma_tokens(const X8Rows<NT>& rows, const uint8_t* xs, int token_bytes, int n,
                                                int g, int t, int q = 0) {
  const int first = 8 * q;
  auto slot = [&](int token) { return token < rows.count ? token : 0; };
  MmaTokens o;
  o.xb = xs + slot(first + g) * token_bytes + 16 * (t >> 1) * n + 8 * (t & 1);
  o.xm[0] = xs + slot(first + 2 * t) * token_bytes + 64 * n;
  o.xm[1] = xs + slot(first + 2 * t + 1) * token_bytes + 64 * n;
  o.y_row[0] = o.y_row[1] = 0;
  o.live[0] = o.live[1] = false;
  // fixed indices into rows.y_row (a computed one would put the array in local memory)
#pragma unroll
  for (int tt = 0; tt < NT; ++tt) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      if (tt == first + 2 * t + c && tt < rows.count) {
        o.y_row[c] = rows.y_row[tt];
        o.live[c] = true;
      }
    }
  }
  return o;
}

/// The block's token tiles (mma_tokens of each) and how many of them hold at least one of its tokens (the same for
/// all its threads): a 16-token build given a group of 8 or fewer skips its second tile's products.
template <int NT>
struct MmaTokenTiles {
  MmaTokens x[kMmaTokenTiles<NT>];
  int live;
  /// Whether tile q holds a token: tile 0 always (a block has at least one), so its products need no test.
  __device__ __forceinline__ bool has(int q) const { return q == 0 || q < live; }
};

template <int NT>
__device__ __forceinline__ MmaTokenTiles<NT> mma_token_tiles(const X8Rows<NT>& rows, const uint8_t* xs, int token_bytes,
                                                             int n, int g, int t) {
  MmaTokenTiles<NT> o;
#pragma unroll
  for (int q = 0; q < kMmaTokenTiles<NT>; ++q) o.x[q] = mma_tokens(rows, xs, token_bytes, n, g, t, q);
  o.live = min(kMmaTokenTiles<NT>, (rows.count + 7) / 8);
  return o;
}

/// Writes a warp's finished tiles (rows first_row[j] + g, + 8; tokens 2t, 2t + 1): gated silu(tile 0) *
/// tile 1, else both tiles; then clears the sums.
__device__ __forceinline__ void mma_finish(const GemvParams& p, const MmaTokens& x, const int (&first_row)[2], int g,
                                           float (&acc)[2][4]) {
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int h = e / 2, c = e % 2;
    if (!x.live[c]) continue;
    if (p.weight_up != nullptr) {
      const int r = first_row[0] + g + 8 * h;
      if (r < p.n_rows) mma_store(p, x.y_row[c], r, acc[0][e] / (1.0f + __expf(-acc[0][e])) * acc[1][e]);
    } else {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int r = first_row[j] + g + 8 * h;
        if (r < p.n_rows) mma_store(p, x.y_row[c], r, acc[j][e]);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;
}

/// mma_finish for each of the block's token tiles (tile q's sums in acc[q]).
template <int NT>
__device__ __forceinline__ void mma_finish_tiles(const GemvParams& p, const MmaTokenTiles<NT>& tokens,
                                                 const int (&first_row)[2], int g,
                                                 float (&acc)[kMmaTokenTiles<NT>][2][4]) {
#pragma unroll
  for (int q = 0; q < kMmaTokenTiles<NT>; ++q) mma_finish(p, tokens.x[q], first_row, g, acc[q]);
}

/// Shared memory after a block's records that the split-K reduction of gemv_mma_kernel takes: each warp's
/// accumulators, 4 warps x 32 lanes x 8 floats.
inline constexpr int kMmaSplitSmemBytes = 4 * 32 * 8 * 4;

/// The end of a tile whose K the block's four warps shared (Split): every warp leaves its accumulators in `red`
/// (kMmaSplitSmemBytes), warp 0 adds warps 1-3's in warp order and writes the tile; every warp's sums are zero
/// after it. All the block's threads call it, once per tile.
__device__ __forceinline__ void mma_split_finish(const GemvParams& p, const MmaTokens& x, const int (&first_row)[2],
                                                 int g, int warp, int lane, float* red, float (&acc)[2][4]) {
  constexpr int kWarps = 4;
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) red[(warp * 32 + lane) * 8 + 4 * j + e] = acc[j][e];
  __syncthreads();
  if (warp == 0) {
#pragma unroll
    for (int w = 1; w < kWarps; ++w)
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[j][e] += red[(w * 32 + lane) * 8 + 4 * j + e];
    mma_finish(p, x, first_row, g, acc);  // zeroes acc
  } else {
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;
  }
  __syncthreads();  // warp 0 has read every partial before the next tile's are stored
}

/// Without Split each warp owns its tiles (32 rows, or 16 gated) and walks all of K. With Split (dense
/// launches with too few tiles to fill the GPU: an 8-token step's projections) the block's four warps share
/// each tile, warp w taking super-blocks w, w + 4, ..., and warp 0 sums their accumulators (in warp order,
/// through shared memory) before it writes the tile. A step is `Items` items of a super-block: 4 (all of it)
/// or 2 (half: the loads in flight take 32 registers fewer, for more blocks per SM).
template <GgmlType T, int NT, bool Split, int MinBlocks = 3, int Items = 4>
__global__ void __launch_bounds__(128, MinBlocks) gemv_mma_kernel(const GemvParams p, const int tiles) {
  static_assert(kGemvX8KQuant<T>);
  static_assert(Items == 4 || (Items == 2 && !Split));
  static_assert(!Split || NT <= 8, "the split's sums hold one token tile");
  constexpr int kParts = 4 / Items;  // steps per super-block
  constexpr int kWarps = 4;
  extern __shared__ __align__(16) uint4 x_record[];
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;
  const bool gathered = p.groups != nullptr || p.choice_ids != nullptr;
  if (gathered) {  // the group table is another kernel's output
    wait_for_producers();
    allow_dependents();
  }
  const int n = p.k / 32;             // x units
  const int token_words = 5 * n + 1;  // a 16-byte pad: token g's words 16 g bytes further in the banks
  const int token_bytes = 16 * token_words;
  X8Rows<NT> rows;
  if (!x8_group(p, rows, reinterpret_cast<uint8_t*>(x_record) + NT * token_bytes)) return;

  const bool gated = p.weight_up != nullptr;
  const int64_t row_bytes = static_cast<int64_t>(p.k) / 256 * quant::BlockTraits<T>::bytes;
  const uint8_t* base[2];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    base[j] = static_cast<const uint8_t*>(gated && j == 1 ? p.weight_up : p.weight) +
              static_cast<int64_t>(rows.matrix) * p.matrix_stride_bytes;
  }
  // tile j's first row: gated, the same 16 rows of W_gate and W_up; dense, rows 32 w .. 32 w + 31 (w: the
  // warp's tile, or with Split the block's)
  auto first_row = [&](int tile, int j) {
    const int w = Split ? tile : tile * kWarps + warp;
    return gated ? 16 * w : 32 * w + 16 * j;
  };
  const int steps = p.k / 256 * kParts;  // per row (Split: super-blocks)
  const int sb_first = Split ? warp : 0, sb_step = Split ? kWarps : 1;
  // the loads of step sb (super-block sb / kParts, its items from (sb % kParts) Items)
  auto load = [&](int tile, int sb, MmaRows<Items>(&w)[2]) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int r0 = first_row(tile, j) + g;
      // rows past the end load the last row (their sums are never written)
      const int64_t a = min(r0, p.n_rows - 1), b = min(r0 + 8, p.n_rows - 1);
      mma_load<T>(base[j] + a * row_bytes, base[j] + b * row_bytes, sb / kParts, sb % kParts * Items, t, w[j]);
    }
  };

  int tile = rows.first_tile, sb = sb_first;
  MmaRows<Items> cur[2], next[2];
  if (tile < tiles && sb < steps) load(tile, sb, cur);  // weights are never written by a step: before the wait
  if (!gathered) {
    wait_for_producers();
    allow_dependents();
  }
  x8_stage_records<NT>(p, rows, n, x_record, token_words);
  __syncthreads();

  constexpr int kTiles = kMmaTokenTiles<NT>;
  const MmaTokenTiles<NT> tokens =
      mma_token_tiles(rows, reinterpret_cast<const uint8_t*>(x_record), token_bytes, n, g, t);
  const MmaTokens(&x)[kTiles] = tokens.x;

  float acc[kTiles][2][4] = {};
  // acc += step sb of the rows in w
  auto multiply = [&](const MmaRows<Items>(&w)[2], int sb) {
#pragma unroll
    for (int slot = 0; slot < Items; ++slot) {
      const int i = sb % kParts * Items + slot;  // the item of the super-block
      const int u = 8 * (sb / kParts) + 2 * i;   // x units of sub-blocks 2i and 2i + 1
      uint2 xh[kTiles][2], xl[kTiles][2];
      float dx[kTiles][2][2], xsum[kTiles][2][2];  // [token tile][sub-block][token]
#pragma unroll
      for (int q = 0; q < kTiles; ++q) {
        if (!tokens.has(q)) break;
#pragma unroll
        for (int s = 0; s < 2; ++s) {
          xh[q][s] = *reinterpret_cast<const uint2*>(x[q].xb + 16 * (u + s));
          xl[q][s] = *reinterpret_cast<const uint2*>(x[q].xb + 16 * (2 * n + u + s));
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const split_int8::Meta m = *reinterpret_cast<const split_int8::Meta*>(x[q].xm[c] + 16 * (u + s));
            dx[q][s][c] = m.dx;
            xsum[q][s][c] = static_cast<float>(m.s0 + m.s1);
          }
        }
      }
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        uint32_t a[2][4];
        mma_item_codes<T>(w[j], slot, i, a[0], a[1]);
        float sc[2][2], mn[2][2];  // [sub-block][row g, g + 8]
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          x8_item_scales(w[j].head[h], i, T == GgmlType::q4_k ? 1.0f / 16.0f : 1.0f, sc[0][h], sc[1][h], mn[0][h],
                         mn[1][h]);
        }
#pragma unroll
        for (int q = 0; q < kTiles; ++q) {
          if (!tokens.has(q)) break;
#pragma unroll
          for (int s = 0; s < 2; ++s) {
            int ch[4], cl[4];
            mma::mma_u8s8_16832(ch, a[s], xh[q][s].x, xh[q][s].y);
            mma::mma_u8s8_16832(cl, a[s], xl[q][s].x, xl[q][s].y);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int h = e / 2, c = e % 2;
              const float codes = static_cast<float>(254 * ch[e] + cl[e]);
              acc[q][j][e] = fmaf(dx[q][s][c], fmaf(sc[s][h], codes, -mn[s][h] * xsum[q][s][c]), acc[q][j][e]);
            }
          }
        }
      }
    }
  };
  // a warp's finished tile (rows first_row(tile, 0 / 1)) for each token tile
  auto finish = [&](int tile) {
    const int first[2] = {first_row(tile, 0), first_row(tile, 1)};
    mma_finish_tiles(p, tokens, first, g, acc);
  };

  if constexpr (!Split) {
    while (tile < tiles) {
      int next_tile = tile, next_sb = sb + 1;
      if (next_sb == steps) {
        next_sb = 0;
        next_tile += rows.tile_stride;
      }
      if (next_tile < tiles) load(next_tile, next_sb, next);
      multiply(cur, sb);
      if (sb == steps - 1) finish(tile);
      tile = next_tile;
      sb = next_sb;
#pragma unroll
      for (int j = 0; j < 2; ++j) cur[j] = next[j];
    }
  } else {
    float* red = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(x_record) + NT * token_bytes);
    for (; tile < tiles; tile += rows.tile_stride) {  // the same tiles for the block's four warps
      while (sb < steps) {  // this warp's super-blocks of the tile, the next one's loads in flight
        int next_tile = tile, next_sb = sb + sb_step;
        if (next_sb >= steps) {
          next_sb = sb_first;
          next_tile += rows.tile_stride;
        }
        if (next_tile < tiles) load(next_tile, next_sb, next);
        multiply(cur, sb);
#pragma unroll
        for (int j = 0; j < 2; ++j) cur[j] = next[j];
        if (next_tile != tile) break;
        sb = next_sb;
      }
      sb = sb_first;
      const int first[2] = {first_row(tile, 0), first_row(tile, 1)};
      mma_split_finish(p, x[0], first, g, warp, lane, red, acc[0]);
    }
  }
}

/// Legacy 32-value block types the tensor-core GEMV reads (staged through shared memory: 2-byte aligned), IQ4_NL
/// among them.
template <GgmlType T>
inline constexpr bool kGemvMmaLegacy = T == GgmlType::q8_0 || T == GgmlType::q4_0 || T == GgmlType::q5_0 ||
                                       T == GgmlType::q4_1 || T == GgmlType::q5_1 || T == GgmlType::iq4_nl;

/// Whether Q6_K launches take the tensor-core GEMV (LATTE_GEMV_MMA_Q6K=0: never, the dp4a kernel as before).
inline bool gemv_mma_q6k_enabled() {
  static const bool on = latte::detail::env_flag("LATTE_GEMV_MMA_Q6K", true);
  return on;
}

/// Every type gemv_mma_staged_kernel reads: the legacy blocks and the super-blocks of Q6_K (210 bytes, 2-byte
/// aligned rows too) and IQ4_XS (136 bytes, one scale per 32 values: walked unit by unit as the legacy blocks).
template <GgmlType T>
inline constexpr bool kGemvMmaStaged = kGemvMmaLegacy<T> || T == GgmlType::q6_k || T == GgmlType::iq4_xs;

/// The copy ring of gemv_mma_staged_kernel: per warp two slots of 32 rows, each row one step of `blocks`
/// blocks (4 legacy blocks, or one Q6_K or IQ4_XS super-block) in 16-byte chunks, with up to 15 bytes of misalignment
/// before it and the word x8_words reads past its end. Q6_K's ring (60 KB) is past the 48 KB a kernel may
/// declare statically: it lives in the dynamic shared memory after the records.
template <GgmlType T>
struct MmaStaging {
  static constexpr int bytes = quant::BlockTraits<T>::bytes;
  static constexpr int blocks = quant::BlockTraits<T>::values == 256 ? 1 : 4;  // per row and step
  static constexpr int units = quant::BlockTraits<T>::values / 32;             // x units per block
  static constexpr int chunks = (15 + blocks * bytes + 4 + 15) / 16;
  static constexpr int ring_bytes = 4 * 2 * 32 * chunks * 16;
  static constexpr bool dynamic = T == GgmlType::q6_k;
  static constexpr int min_blocks = dynamic ? 2 : 3;  // per SM (Q6_K: the shared memory allows no more)
};

/// Lane t's codes of unit `unit` of a staged block at the even offset `off` (legacy blocks: unit 0; IQ4_XS: 0-7):
/// positions 8t .. 8t + 3 in w[0] and 8t + 4 .. 8t + 7 in w[1] (unsigned: Q8_0's q + 128, the IQ4 levels + 128),
/// its scale d (IQ4_XS: d (ls - 32)) and, for Q4_1 / Q5_1, its minimum m.
template <GgmlType T>
__device__ __forceinline__ void mma_block_codes(const uint8_t* st, int off, int unit, int t, uint32_t (&w)[2], float& d,
                                                float& m) {
  constexpr bool kMin = T == GgmlType::q4_1 || T == GgmlType::q5_1;
  constexpr bool kFive = T == GgmlType::q5_0 || T == GgmlType::q5_1;
  constexpr int kData = kMin ? 4 : 2;  // bytes before qh / qs
  d = quant::half_bits_to_float(*reinterpret_cast<const uint16_t*>(st + off));
  m = kMin ? quant::half_bits_to_float(*reinterpret_cast<const uint16_t*>(st + off + 2)) : 0.0f;
  if constexpr (T == GgmlType::iq4_nl || T == GgmlType::iq4_xs) {
    // IQ4_NL {d, qs[16]}; IQ4_XS {d, scales_h, scales_l[4], qs[128]}, unit u's qs at 8 + 16 u: nibbles as Q4_0's
    const int qs = T == GgmlType::iq4_nl ? 2 : 8 + 16 * unit;
    x8_words<2>(st, off + qs + 8 * (t & 1), w);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      uint32_t low, high;
      quant::iq4_word_codes(w[i], low, high);
      w[i] = t >> 1 ? high : low;
    }
    if constexpr (T == GgmlType::iq4_xs) {
      d *= static_cast<float>(
          quant::iq4xs_scale_factor(*reinterpret_cast<const uint16_t*>(st + off + 2), st[off + 4 + unit / 2], unit));
    }
  } else if constexpr (T == GgmlType::q8_0) {
    x8_words<2>(st, off + kData + 8 * t, w);
    w[0] ^= 0x80808080u;
    w[1] ^= 0x80808080u;
  } else {
    // values 0-15 are the low nibbles of qs[0..15], 16-31 the high ones: positions 8t.. are qs[8 (t % 2) ..]
    constexpr int kQs = kData + (kFive ? 4 : 0);
    x8_words<2>(st, off + kQs + 8 * (t & 1), w);
    const int shift = 4 * (t >> 1);
#pragma unroll
    for (int i = 0; i < 2; ++i) w[i] = (w[i] >> shift) & 0x0F0F0F0Fu;
    if constexpr (kFive) {
      uint32_t qh[1];
      x8_words<1>(st, off + kData, qh);
      // bit j of qh is the fifth bit of value j: four bits to bit 4 of four bytes by one multiply
#pragma unroll
      for (int i = 0; i < 2; ++i) w[i] |= (((qh[0] >> (8 * t + 4 * i)) & 0xFu) * 0x02040810u) & 0x10101010u;
    }
  }
}

/// Lane t's codes of half `half` (units 4 half .. 4 half + 3) of a staged Q6_K super-block at the even offset
/// `off`: for each unit q, positions 8t .. 8t + 3 in w[q][0] and 8t + 4 .. 8t + 7 in w[q][1] (code = 16 x the 2 high
/// bits + low nibble, 0-63, value d sc (code - 32)), its 8 int8 scales (two per unit: values 0-15, 16-31) and d.
__device__ __forceinline__ void mma_q6k_half_codes(const uint8_t* st, int off, int half, int t, uint32_t (&w)[4][2],
                                                   uint32_t (&scales)[2], float& d) {
  uint32_t ql[2][2], qh[2];
  x8_words<2>(st, off + 64 * half + 8 * t, ql[0]);       // units 0 (low nibbles) and 2 (high)
  x8_words<2>(st, off + 64 * half + 32 + 8 * t, ql[1]);  // units 1 and 3
  x8_words<2>(st, off + 128 + 32 * half + 8 * t, qh);    // 2 bits of each unit
  x8_words<2>(st, off + 192 + 8 * half, scales);
  d = quant::half_bits_to_float(*reinterpret_cast<const uint16_t*>(st + off + 208));
#pragma unroll
  for (int q = 0; q < 4; ++q)
#pragma unroll
    for (int i = 0; i < 2; ++i)
      w[q][i] = ((ql[q % 2][i] >> (4 * (q / 2))) & 0x0F0F0F0Fu) | (((qh[i] >> (2 * q)) & 0x03030303u) << 4);
}

/// The int8 scale j (0-7) of a half's scales, as a float.
__device__ __forceinline__ float mma_q6k_scale(const uint32_t (&scales)[2], int j) {
  return static_cast<float>(static_cast<int8_t>(scales[j / 4] >> (8 * (j % 4))));
}

/// GemvParams::deal_pairs: the next group of a block's range [at, end) of (group, tile) pairs (pair i: group
/// i / tiles, tile i % tiles): its rows, and its tiles [rows.first_tile, last) walked one by one; groups without
/// tokens are skipped. False when the range is done.
template <int NT>
__device__ __forceinline__ bool mma_pair_segment(const GemvParams& p, int tiles, int64_t& at, int64_t end,
                                                 X8Rows<NT>& rows, int& last) {
  while (at < end) {
    const int group = static_cast<int>(at / tiles);
    const int64_t group_start = static_cast<int64_t>(group) * tiles;
    rows.first_tile = static_cast<int>(at - group_start);
    rows.tile_stride = 1;
    last = static_cast<int>(min(static_cast<int64_t>(tiles), end - group_start));
    at = group_start + last;
    const GemvGroup& gr = p.groups[group];
    if (gr.count <= 0) continue;
    x8_take_group(p, gr, rows);
    return true;
  }
  return false;
}

/// The tensor-core GEMV for the types staged through shared memory (kGemvMmaStaged), gemv_mma_kernel's tiles
/// and tokens: a warp copies each step's blocks of its 32 rows (lane l: row l) into shared memory with 16-byte
/// cp.async copies (a two-step ring, the next step's copies in flight while it computes the current one) and
/// each lane reads its 8 bytes of a unit from there as aligned words. With Split (dense launches with too few
/// tiles to fill the GPU, as gemv_mma_kernel's) the block's four warps share each 32-row tile, warp w taking
/// steps w, w + 4, ..., and warp 0 sums their accumulators in warp order before it writes the tile.
///
/// Q6_K has a scale per 16 values: lane t's positions 8t .. 8t + 7 of a unit are in half t / 2 of it, so each
/// x plane goes to the tensor cores twice, once with lanes 2-3's bytes zeroed (values 0-15) and once with lanes
/// 0-1's (16-31), and the two integer sums take their own scales:
///     y += dx_u / 254 d [ sc_0 (254 A_0 + B_0 - 32 S_0) + sc_1 (254 A_1 + B_1 - 32 S_1) ].
template <GgmlType T, int NT, bool Split>
__global__ void __launch_bounds__(128, NT > 8 ? 2 : MmaStaging<T>::min_blocks)
    gemv_mma_staged_kernel(const GemvParams p, const int tiles) {
  static_assert(kGemvMmaStaged<T>);
  static_assert(!Split || NT <= 8, "the split's sums hold one token tile");
  using S = MmaStaging<T>;
  constexpr int kWarps = 4;
  constexpr int kBytes = S::bytes;
  constexpr int kBlocks = S::blocks;
  constexpr int kChunks = S::chunks;
  constexpr bool kMin = T == GgmlType::q4_1 || T == GgmlType::q5_1;
  constexpr int kOff = split_int8::kIntegerOffset<T>;
  __shared__ __align__(16) uint4 static_ring[S::dynamic ? 1 : kWarps * 2 * 32 * kChunks];
  extern __shared__ __align__(16) uint4 x_record[];
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;
  const bool gathered = p.groups != nullptr || p.choice_ids != nullptr;
  if (gathered) {
    wait_for_producers();
    allow_dependents();
  }
  const int n = p.k / 32;
  const int token_words = 5 * n + 1;
  const int token_bytes = 16 * token_words;
  X8Rows<NT> rows;
  // the block's tiles: [rows.first_tile, last) by rows.tile_stride of one group (x8_group), or with deal_pairs (the
  // 16-token builds only: the others compile without the walk) the groups of its range of (group, tile) pairs one
  // after the other
  constexpr bool kPairs = NT > gemv_max_tokens;
  int64_t pair_at = 0, pair_end = 0;
  int last = tiles;
  if (kPairs && p.deal_pairs) {
    const int64_t total = static_cast<int64_t>(*p.n_groups) * tiles;
    pair_at = static_cast<int64_t>(blockIdx.x) * total / gridDim.x;
    pair_end = (static_cast<int64_t>(blockIdx.x) + 1) * total / gridDim.x;
    if (!mma_pair_segment(p, tiles, pair_at, pair_end, rows, last)) return;
  } else if (!x8_group(p, rows, reinterpret_cast<uint8_t*>(x_record) + NT * token_bytes)) {
    return;
  }
  // the ring: [warp][slot][row][chunk]; Split's partial sums after the records and a dynamic ring
  uint4* const after_records = x_record + NT * token_words;
  uint4(*stage)[2][32][kChunks] = reinterpret_cast<uint4(*)[2][32][kChunks]>(S::dynamic ? after_records : static_ring);
  float* const red = reinterpret_cast<float*>(after_records + (S::dynamic ? S::ring_bytes / 16 : 0));

  const bool gated = p.weight_up != nullptr;
  const int blocks_per_row = n / S::units;
  const int64_t row_bytes = static_cast<int64_t>(blocks_per_row) * kBytes;
  const uint8_t* lo[2];
  const uint8_t* hi[2];
  const uint8_t* base[2];
  auto set_matrix = [&] {
#pragma unroll
    for (int j = 0; j < 2; ++j) base[j] = lo[j] + static_cast<int64_t>(rows.matrix) * p.matrix_stride_bytes;
  };
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    lo[j] = static_cast<const uint8_t*>(gated && j == 1 ? p.weight_up : p.weight);
    hi[j] = lo[j] + p.weight_bytes;
  }
  set_matrix();
  auto first_row = [&](int tile, int j) {
    const int w = Split ? tile : tile * kWarps + warp;
    return gated ? 16 * w : 32 * w + 16 * j;
  };
  const int steps = (blocks_per_row + kBlocks - 1) / kBlocks;
  const int s_first = Split ? warp : 0, s_step = Split ? kWarps : 1;
  // the start of row rr (0-31: tile rr / 16, row rr % 16) at step s; rows past the end read the last row
  auto row_start = [&](int tile, int s, int rr) {
    const int j = rr / 16;
    const int64_t r = min(first_row(tile, j) + rr % 16, p.n_rows - 1);
    return (j == 0 ? base[0] : base[1]) + r * row_bytes + static_cast<int64_t>(kBlocks * s) * kBytes;
  };
  // copies of step (tile, s) into ring slot b: lane l copies row l's aligned chunks, from its start rounded
  // down to 16 bytes (the row's pointer once per step, then one copy per chunk)
  const uint8_t* my_lo = lane < 16 ? lo[0] : lo[1];
  const uint8_t* my_hi = lane < 16 ? hi[0] : hi[1];
  auto copy = [&](int tile, int s, int b) {
    const uint8_t* start = row_start(tile, s, lane);
    const uint8_t* src = start - (reinterpret_cast<uintptr_t>(start) & 15);
#pragma unroll
    for (int ch = 0; ch < kChunks; ++ch, src += 16) {
      if (src >= my_lo && src + 16 <= my_hi) {
        mma::cp_async_16(&stage[warp][b][lane][ch], src, true);
      } else {
        stage[warp][b][lane][ch] = load_chunk_guarded(src, my_lo, my_hi);
      }
    }
    mma::cp_async_commit();
  };

  int tile = rows.first_tile, s = s_first, b = 0;
  if (tile < last) copy(tile, s, 0);  // weights are never written by a step: before the wait
  if (!gathered) {
    wait_for_producers();
    allow_dependents();
  }
  for (;;) {  // once, or per group of a deal_pairs range
    x8_stage_records<NT>(p, rows, n, x_record, token_words);
    __syncthreads();
    constexpr int kTiles = kMmaTokenTiles<NT>;
    const MmaTokenTiles<NT> tokens =
        mma_token_tiles(rows, reinterpret_cast<const uint8_t*>(x_record), token_bytes, n, g, t);
    const MmaTokens(&x)[kTiles] = tokens.x;

    float acc[kTiles][2][4] = {};
    while (tile < last) {
      int next_tile = tile, next_s = s + s_step;
      if (next_s >= steps) {
        next_s = s_first;
        next_tile += rows.tile_stride;
      }
      if (next_tile < last) {
        copy(next_tile, next_s, b ^ 1);
      } else {
        mma::cp_async_commit();  // an empty group: the wait below still means "this step's copies"
      }
      mma::cp_async_wait<1>();
      __syncwarp();  // every lane's copies of this step have landed
      // lane's rows: tile j, h = 0 / 1 -> ring row 16 j + g + 8 h, its misalignment within the staged chunks
      int mis[2][2];
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          mis[j][h] = static_cast<int>(reinterpret_cast<uintptr_t>(row_start(tile, s, 16 * j + g + 8 * h)) & 15);
      if constexpr (T == GgmlType::q6_k) {
        const bool first_half = t < 2;  // lane t's positions 8t .. 8t + 7 are values 0-15 of a unit for t < 2
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          uint32_t w[2][2][4][2], sc[2][2][2];  // [tile][row g, g + 8][unit][word]; scales [tile][row][word]
          float d[2][2];
#pragma unroll
          for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const uint8_t* st = reinterpret_cast<const uint8_t*>(stage[warp][b][16 * j + g + 8 * h]);
              mma_q6k_half_codes(st, mis[j][h], half, t, w[j][h], sc[j][h], d[j][h]);
            }
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            const int u = 8 * s + 4 * half + q;
#pragma unroll
            for (int z = 0; z < kTiles; ++z) {  // token tile
              if (!tokens.has(z)) break;
              const uint2 xh = *reinterpret_cast<const uint2*>(x[z].xb + 16 * u);
              const uint2 xl = *reinterpret_cast<const uint2*>(x[z].xb + 16 * (2 * n + u));
              // x with the other half's positions zeroed: [values 0-15, 16-31]
              const uint2 xh_half[2] = {first_half ? xh : make_uint2(0, 0), first_half ? make_uint2(0, 0) : xh};
              const uint2 xl_half[2] = {first_half ? xl : make_uint2(0, 0), first_half ? make_uint2(0, 0) : xl};
              float dx[2];
              int off[2][2];  // [token][half]: 32 S
#pragma unroll
              for (int c = 0; c < 2; ++c) {
                const split_int8::Meta m = *reinterpret_cast<const split_int8::Meta*>(x[z].xm[c] + 16 * u);
                dx[c] = m.dx;
                off[c][0] = 32 * m.s0;
                off[c][1] = 32 * m.s1;
              }
#pragma unroll
              for (int j = 0; j < 2; ++j) {
                const uint32_t a[4] = {w[j][0][q][0], w[j][1][q][0], w[j][0][q][1], w[j][1][q][1]};
                int ch[2][4], cl[2][4];
#pragma unroll
                for (int v = 0; v < 2; ++v) {
                  mma::mma_u8s8_16832(ch[v], a, xh_half[v].x, xh_half[v].y);
                  mma::mma_u8s8_16832(cl[v], a, xl_half[v].x, xl_half[v].y);
                }
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                  const int h = e / 2, c = e % 2;
                  const float v0 = static_cast<float>(254 * ch[0][e] + cl[0][e] - off[c][0]);
                  const float v1 = static_cast<float>(254 * ch[1][e] + cl[1][e] - off[c][1]);
                  const float sum = fmaf(mma_q6k_scale(sc[j][h], 2 * q), v0, mma_q6k_scale(sc[j][h], 2 * q + 1) * v1);
                  acc[z][j][e] = fmaf(dx[c] * d[j][h], sum, acc[z][j][e]);
                }
              }
            }
          }
        }
      } else {
        // the step's units: kBlocks legacy blocks of one unit, or the 8 units of one IQ4_XS super-block
        constexpr int kUnits = kBlocks * S::units;
#pragma unroll
        for (int i = 0; i < kUnits; ++i) {
          const int u = kUnits * s + i;
          if (u >= n) break;
          uint2 xh[kTiles], xl[kTiles];
          float dx[kTiles][2];
          int xsum[kTiles][2];
#pragma unroll
          for (int z = 0; z < kTiles; ++z) {  // token tile
            if (!tokens.has(z)) break;
            xh[z] = *reinterpret_cast<const uint2*>(x[z].xb + 16 * u);
            xl[z] = *reinterpret_cast<const uint2*>(x[z].xb + 16 * (2 * n + u));
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              const split_int8::Meta m = *reinterpret_cast<const split_int8::Meta*>(x[z].xm[c] + 16 * u);
              dx[z][c] = m.dx;
              xsum[z][c] = m.s0 + m.s1;
            }
          }
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            uint32_t w[2][2], a[4];
            float d[2], mn[2];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const uint8_t* st = reinterpret_cast<const uint8_t*>(stage[warp][b][16 * j + g + 8 * h]);
              mma_block_codes<T>(st, mis[j][h] + i / S::units * kBytes, i % S::units, t, w[h], d[h], mn[h]);
            }
            a[0] = w[0][0], a[1] = w[1][0], a[2] = w[0][1], a[3] = w[1][1];
#pragma unroll
            for (int z = 0; z < kTiles; ++z) {
              if (!tokens.has(z)) break;
              int ch[4], cl[4];
              mma::mma_u8s8_16832(ch, a, xh[z].x, xh[z].y);
              mma::mma_u8s8_16832(cl, a, xl[z].x, xl[z].y);
#pragma unroll
              for (int e = 0; e < 4; ++e) {
                const int h = e / 2, c = e % 2;
                if constexpr (kMin) {
                  acc[z][j][e] =
                      fmaf(dx[z][c],
                           fmaf(d[h], static_cast<float>(254 * ch[e] + cl[e]), mn[h] * static_cast<float>(xsum[z][c])),
                           acc[z][j][e]);
                } else {
                  acc[z][j][e] =
                      fmaf(dx[z][c] * d[h], static_cast<float>(254 * ch[e] + cl[e] - kOff * xsum[z][c]), acc[z][j][e]);
                }
              }
            }
          }
        }
      }
      if (next_tile != tile) {  // this warp's last step of the tile
        const int first[2] = {first_row(tile, 0), first_row(tile, 1)};
        if constexpr (Split) {
          mma_split_finish(p, x[0], first, g, warp, lane, red, acc[0]);
        } else {
          mma_finish_tiles(p, tokens, first, g, acc);
        }
      }
      __syncwarp();  // every lane has read slot b before the step after next copies into it
      tile = next_tile;
      s = next_s;
      b ^= 1;
    }
    if (!kPairs || !p.deal_pairs || !mma_pair_segment(p, tiles, pair_at, pair_end, rows, last)) break;
    // the next group: its first step's copies into the free slot, then its records once every warp is done
    // with this group's
    set_matrix();
    tile = rows.first_tile;
    s = s_first;
    copy(tile, s, b);
    __syncthreads();
  }
  mma::cp_async_wait<0>();
}

/// Whether dense launches with records take the tensor-core GEMV, in rows of up to 8 per blockIdx.y
/// (LATTE_GEMV_MMA_ROWS=0: never; beyond 8 rows they then take GEMV passes or a GEMM, Linear).
inline bool gemv_mma_rows_enabled() {
  static const bool on = latte::detail::env_flag("LATTE_GEMV_MMA_ROWS", true);
  return on;
}

/// Fewest rows of a dense launch that takes it (LATTE_GEMV_MMA_DENSE_MIN, 3-65, default 5: the 8-token build).
/// Measured on an H200 (BENCHMARKS.md, tenth round), with K split over a block's warps where the launch has
/// few tiles: x8 1,168 -> 1,233 t/s (an 8-sequence step's projections), x4 unchanged (943-947 either way).
inline int gemv_mma_dense_min_rows() {
  static const int n = latte::detail::env_int("LATTE_GEMV_MMA_DENSE_MIN", 5);
  return n;
}

/// A dense launch (no groups, no choices): rows of up to 8 tokens per blockIdx.y.
inline bool gemv_mma_dense(const GemvParams& p) { return p.groups == nullptr && p.choice_ids == nullptr; }

/// Shared memory bytes of `tokens` tokens' padded x records of k values (the kernels' token_words per token).
inline int64_t gemv_mma_record_bytes(int tokens, int64_t k) { return tokens * 16 * (5 * (k / 32) + 1); }
/// Most bytes of 8 tokens' records a dense launch stages (more: 4-token groups, gemv_mma_tokens): with Q6_K's 60 KB
/// copy ring and the split's sums within the 227 KB of an sm_90 / sm_100 block (k = 7168: 143 KB, 8 tokens).
inline constexpr int64_t kMmaDenseMaxRecordBytes = 160 * 1024;

/// Whether gathered groups of 9-16 tokens may take the 16-token builds (LATTE_GEMV_MMA_WIDE_GROUPS=0: never, and the
/// MoE decode keeps its groups at 8 tokens).
inline bool gemv_mma_wide_groups_enabled() {
  static const bool on = latte::detail::env_flag("LATTE_GEMV_MMA_WIDE_GROUPS", true);
  return on;
}

/// Tokens a launch's blocks are built for (4, 8, or 16 for gathered groups of more than 8) and the shared memory a
/// block takes: the padded x records, and for the staged types the copy ring (static, or dynamic after the records
/// for Q6_K).
inline int gemv_mma_tokens(const GemvParams& p) {
  if (!gemv_mma_dense(p)) return p.max_tokens_per_group <= 4 ? 4 : p.max_tokens_per_group <= gemv_max_tokens ? 8 : 16;
  if (p.n_tokens <= 4) return 4;
  // 5-8 dense rows whose 8 records would not leave room for a copy ring (a dense FFN's down, k = 10,944 or
  // 18,432: 219 / 368 KB): two 4-token groups, the weights read from L2 the second time
  if (p.n_tokens <= gemv_max_tokens && gemv_mma_record_bytes(8, p.k) > kMmaDenseMaxRecordBytes) return 4;
  return 8;
}
template <GgmlType T>
inline int64_t gemv_mma_smem_bytes(const GemvParams& p) {
  const int64_t records = gemv_mma_record_bytes(gemv_mma_tokens(p), p.k);
  if constexpr (kGemvMmaStaged<T>) {
    return records + MmaStaging<T>::ring_bytes;
  } else {
    return records;
  }
}

/// Whether launch_gemv_mma takes this launch: a launch gemv_x8 would take, over gathered groups built for at
/// least gemv_mma_min_tokens tokens; or a dense one of gemv_mma_dense_min_rows to gemv_max_dense_rows rows with
/// records, as blocks of up to 8 rows (each block a launch of its rows that gemv_x8 would take).
template <GgmlType T>
inline bool gemv_mma_applies(const GemvParams& p) {
  if constexpr (!kGemvX8KQuant<T> && !kGemvMmaStaged<T>) {
    return false;
  } else {
    if (!gemv_mma_enabled() || p.route.logits != nullptr || p.choice_ids != nullptr) return false;
    if (T == GgmlType::q6_k && !gemv_mma_q6k_enabled()) return false;
    // legacy rows of under 32 blocks (the per-head W_UK / W_UV) stay on gemv_x8's short-row kernel
    if (!kGemvX8KQuant<T> && p.k < 1024) return false;
    // records of any size the block's shared memory holds (below): the dp4a kernels' 64 KB bound
    // (kGemvX8MaxRecordBytes, for 3-4 blocks per SM) kept 3-8 tokens of DeepSeek-V3's k = 7168 on the fp32 GEMV
    constexpr int64_t kAnyRecords = int64_t{1} << 40;
    if (gemv_mma_dense(p)) {
      GemvParams block = p;
      block.n_tokens = std::min(p.n_tokens, gemv_max_tokens);
      // from 3 rows where the dp4a kernel cannot take the records either (the alternative is the fp32 GEMV)
      const int min_rows = gemv_x8_applies<T>(block) ? gemv_mma_dense_min_rows() : 3;
      if (!(gemv_mma_rows_enabled() && p.n_tokens >= min_rows && p.n_tokens <= gemv_max_dense_rows &&
            p.x_q != nullptr && gemv_x8_applies<T>(block, kAnyRecords))) {
        return false;
      }
    } else {
      // a gathered launch the dp4a kernel would take with groups of up to 8 (the same types, alignment and x);
      // groups of 9-16 only as the 16-token build
      GemvParams block = p;
      block.max_tokens_per_group = std::min(p.max_tokens_per_group, gemv_max_tokens);
      if (!(p.groups != nullptr && gemv_x8_tokens(block.max_tokens_per_group) >= gemv_mma_min_tokens() &&
            gemv_x8_applies<T>(block, kAnyRecords))) {
        return false;
      }
      if (p.max_tokens_per_group > gemv_max_tokens &&
          (!gemv_mma_wide_groups_enabled() || p.max_tokens_per_group > gemv_group_max_tokens)) {
        return false;
      }
    }
    // the block's shared memory within the device's (sm_120: 99 KB; 1 KB for the kernel's other statics); the
    // 16-token build only where two of its blocks fit a multiprocessor (one block of 4 warps would leave the
    // weights' loads too few warps to hide their latency)
    int device = 0;
    LATTE_CUDA_CHECK(cudaGetDevice(&device));
    const int split_bytes = gemv_mma_dense(p) ? kMmaSplitSmemBytes : 0;  // launch_gemv_mma_as
    const int64_t block_bytes = gemv_mma_smem_bytes<T>(p) + split_bytes + 1024;
    const int64_t optin = device_caps(device).smem_per_block_optin;
    return gemv_mma_tokens(p) > gemv_max_tokens ? 2 * block_bytes <= optin + 1024 : block_bytes <= optin;
  }
}

/// Whether gathered launches deal their groups over exactly one wave of resident blocks (GemvParams::deal_blocks;
/// LATTE_GEMV_MMA_DEAL=0: over the grid of whole blocks per group slot, as before).
inline bool gemv_mma_deal_enabled() {
  static const bool on = latte::detail::env_flag("LATTE_GEMV_MMA_DEAL", true);
  return on;
}

/// Whether the staged types' gathered 16-token launches deal (group, tile) pairs over one wave of blocks
/// (GemvParams::deal_pairs; LATTE_GEMV_MMA_PAIRS=0: whole blocks per group, LATTE_GEMV_MMA_DEAL's deal). At 128
/// sequences the ~70 groups of a V2-Lite down (16 tiles each) over 264 block slots get 3 or 4 blocks, so the
/// launch lasts the 6 tiles of a block of a 3-block group where the pairs give every block 4 or 5. Measured on an
/// H100 (BENCHMARKS.md, thirty-first round): the MoE of a 128-row step 364-367 -> 339-342 us, x128 +2.8%.
inline bool gemv_mma_pairs_enabled() {
  static const bool on = latte::detail::env_flag("LATTE_GEMV_MMA_PAIRS", true);
  return on;
}

/// Whether a dense K-quant launch whose blocks would not fill the GPU once splits K over each block's four
/// warps (gemv_mma_kernel's Split; LATTE_GEMV_MMA_SPLIT=0: never).
inline bool gemv_mma_split_enabled() {
  static const bool on = latte::detail::env_flag("LATTE_GEMV_MMA_SPLIT", true);
  return on;
}

template <GgmlType T, int NT>
void launch_gemv_mma_as(const GemvParams& p, cudaStream_t stream) {
  int device = 0;
  LATTE_CUDA_CHECK(cudaGetDevice(&device));
  const int sm_count = device_caps(device).sm_count;
  const int rows_per_warp = p.weight_up ? 16 : 32;
  const int64_t warps = (p.n_rows + rows_per_warp - 1) / rows_per_warp;
  const int groups = gemv_mma_dense(p) ? (p.n_tokens + NT - 1) / NT : p.max_groups;
  // split K over a block's warps where a tile per warp leaves most SMs idle and each warp keeps 2+ steps (a
  // super-block; the staged legacy types' steps are 4 blocks: 128 values)
  int steps = p.k / 256;
  if constexpr (kGemvMmaStaged<T>) steps = p.k / 32 / MmaStaging<T>::units / MmaStaging<T>::blocks;
  const bool split = gemv_mma_dense(p) && gemv_mma_split_enabled() && (warps + 3) / 4 * groups < sm_count && steps >= 8;
  void (*kernel)(const GemvParams, const int) = nullptr;
  if constexpr (NT > gemv_max_tokens) {
    // gathered groups only (never split), two blocks per SM: the registers of two token tiles' sums and x, and
    // K-quant steps of half a super-block (whole ones spill)
    if constexpr (kGemvX8KQuant<T>) {
      kernel = gemv_mma_kernel<T, NT, false, 2, 2>;
    } else {
      kernel = gemv_mma_staged_kernel<T, NT, false>;
    }
  } else if constexpr (kGemvX8KQuant<T>) {
    // 3 blocks per SM (168 registers): builds for 4 blocks (128 registers, 160-300 bytes spilled, or half
    // super-blocks per step) measured x32 -5% and x64 -4% on an H200 (BENCHMARKS.md, thirteenth round)
    kernel = split ? gemv_mma_kernel<T, NT, true> : gemv_mma_kernel<T, NT, false>;
  } else {
    kernel = split ? gemv_mma_staged_kernel<T, NT, true> : gemv_mma_staged_kernel<T, NT, false>;
  }
  const int tiles = static_cast<int>(split ? warps : (warps + 3) / 4);
  // the records (the legacy ring is static, Q6_K's after them), and the split's partial sums
  int smem = static_cast<int>(gemv_mma_record_bytes(NT, p.k)) + (split ? kMmaSplitSmemBytes : 0);
  if constexpr (kGemvMmaStaged<T>) smem += MmaStaging<T>::dynamic ? MmaStaging<T>::ring_bytes : 0;
  LATTE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  // one wave of resident blocks over all groups; each walks an equal share of its group's tiles
  const int64_t resident =
      static_cast<int64_t>(sm_count) * gemv_resident_blocks(reinterpret_cast<const void*>(kernel), smem);
  GemvParams q = p;
  int64_t per_group = std::max<int64_t>(1, resident / groups);
  if (!gemv_mma_dense(p) && gemv_mma_deal_enabled()) {
    // a gathered launch deals the groups the sort made over exactly one wave: rounding the blocks per group
    // down left SMs with fewer blocks than others (320 of 396 slots at 128 sequences, a third of the SMs idle
    // for half the launch)
    per_group = std::min<int64_t>((resident + groups - 1) / groups, tiles);
    q.deal_blocks = static_cast<int>(std::min<int64_t>(resident, per_group * groups));
  }
  const int64_t per_block = (tiles + per_group - 1) / per_group;
  dim3 grid(static_cast<unsigned>((tiles + per_block - 1) / per_block), static_cast<unsigned>(groups));
  if (kGemvMmaStaged<T> && NT > gemv_max_tokens && gemv_mma_pairs_enabled()) {
    q.deal_pairs = true;
    q.deal_blocks = 0;
    grid = dim3(static_cast<unsigned>(std::min<int64_t>(resident, static_cast<int64_t>(tiles) * groups)), 1);
  }
  launch_kernel(kernel, grid, dim3(128), static_cast<size_t>(smem), stream, q, tiles);
}

template <GgmlType T>
void launch_gemv_mma(const GemvParams& p, cudaStream_t stream) {
  if constexpr (kGemvX8KQuant<T> || kGemvMmaStaged<T>) {
    // built for 4 and 8 tokens (groups of 1-2 take the 4-token build where LATTE_GEMV_MMA_MIN_TOKENS asks), and
    // for gathered groups of 9-16
    switch (gemv_mma_tokens(p)) {
      case 4:
        return launch_gemv_mma_as<T, 4>(p, stream);
      case 8:
        return launch_gemv_mma_as<T, 8>(p, stream);
      default:
        return launch_gemv_mma_as<T, gemv_group_max_tokens>(p, stream);
    }
  }
}

}  // namespace latte::cuda
