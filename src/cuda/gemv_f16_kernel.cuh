// Gathered groups of 9-16 tokens of Q4_K weights (the MoE experts of a batched decode step of ~100 sequences,
// where an expert gets ~12 tokens) on the fp16 tensor cores: gemv_f16_kernel, in place of gemv_mma_kernel's
// 16-token build. The int8 kernel pays ~5 scalar instructions per output, token and 32-value unit to scale its
// integer sums (x's scale changes every 32 values); here the only scaling left is two per output and super-block.
//
// Arithmetic, per row r, token n and super-block (d, dmin, 6-bit sc_s and m_s per sub-block s of 32 values):
//     sum_i w_i x_i = d sum_i (sc_s q_i) x_i  -  dmin sum_s m_s X_s,   X_s = sum over sub-block s of x_i.
// The A operand is sc_s q_i (an integer up to 63 x 15 = 945, exact in fp16), made from the packed nibbles with
// one fma.f16x2 per two values; the min term is one m16n8k8 product over the 8 sub-blocks per super-block. x
// (the block's tokens' split-int8 records, decoded) is staged once per group in fp16 as two planes, hi = fp16(x s)
// and lo = fp16(x s - hi), with one power of two s per token that puts its largest value in [2^14, 2^15): x is
// kept to ~2^-22 of each value, beyond the records' own rounding (dx / 508). The products are exact and the sums
// fp32; each token's outputs are multiplied by 1 / s at the end. Within a super-block the sums are ~2^-24 of their
// magnitudes, so the results are the int8 kernel's up to fp32 rounding.
//
// Fragments (g = lane / 4, t = lane % 4): the loads are gemv_mma_kernel's (lane t: bytes 8t .. 8t + 7 of each
// 32-byte item of rows g and g + 8; low nibbles are sub-block 2i, high ones 2i + 1). A word of 4 bytes gives
// the pairs (8t, 8t + 2) and (8t + 1, 8t + 3) of both sub-blocks by masks 0x000F000F / 0x00F000F0 on it and on
// it >> 8; k-step 0 of a sub-block takes positions 8t + 0..3 as k = {2t: 8t, 2t + 1: 8t + 2, 2t + 8: 8t + 1,
// 2t + 9: 8t + 3}, k-step 1 positions 8t + 4..7 likewise. The staged x holds each token's 8 values of (sub-block,
// t) in that order, so one 16-byte shared load gives a plane's B fragments of both k-steps.
//
// Work split: 8 warps, one block per SM (16 tokens' planes at k = 2048 are 136 KB); a warp owns a 16-row tile of
// W_gate and the same rows of W_up (gated) or 32 rows. The launch deals the (group, warp tile) pairs of all groups
// evenly over one wave of blocks: a block takes a contiguous range of them, which spans a group boundary at most
// a few times (it stages the next group's x there). Whole blocks per group (gemv_mma_kernel's deal) would leave
// ~60 of ~70 equal groups with two of this kernel's 132 blocks and the rest with one, the launch as long as the
// groups that got one.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/environment.hpp"
#include "cuda/bf16_mma.cuh"
#include "cuda/check.hpp"
#include "cuda/device_caps.hpp"
#include "cuda/gemv_mma_kernel.cuh"
#include "cuda/launch.cuh"

namespace latte::cuda {

/// Whether gathered Q4_K launches with groups of 9-16 tokens take the fp16 tensor-core GEMV (LATTE_GEMV_F16=0: never,
/// the int8 kernel's 16-token build as before). Measured on an H100 (BENCHMARKS.md, thirtieth round): the MoE of a
/// 128-row step 370 -> 342 us, x128 +3.8%.
inline bool gemv_f16_enabled() {
  static const bool on = latte::detail::env_flag("LATTE_GEMV_F16", true);
  return on;
}

inline constexpr int kF16Tokens = gemv_group_max_tokens;  // 16
inline constexpr int kF16Warps = 8;
/// The block's group in shared memory: x rows, y rows, each token's scale and its inverse (16 each), matrix, count.
inline constexpr int kF16HeaderBytes = 4 * kF16Tokens * 4 + 16;

/// Bytes of one token's staged x of k values (k % 256 == 0): per 32-value sub-block the hi and lo planes (64 bytes
/// each), then per super-block its 8 sub-block sums / 32 (hi and lo, 32 bytes); padded to 64 modulo 128 bytes, so
/// that tokens g and g + 1 of a quarter warp's 16-byte loads fall in different banks.
__host__ __device__ constexpr int gemv_f16_token_bytes(int k) {
  const int raw = k / 32 * 128 + k / 256 * 32;
  return (raw + 63) / 128 * 128 + 64;
}

inline int64_t gemv_f16_smem_bytes(int k) {
  return kF16HeaderBytes + static_cast<int64_t>(kF16Tokens) * gemv_f16_token_bytes(k);
}

namespace f16 {

constexpr uint32_t kBias = 0x64006400u;  // fp16 1024 in both halves: 0x6400 | m is 1024 + m for m < 1024

/// (v, v) in fp16 for an integer 0 <= v < 1024.
__device__ __forceinline__ uint32_t small_int_x2(uint32_t v) { return mma::sub_f16x2(v * 0x00010001u | kBias, kBias); }

/// The 6-bit scales (sc) and mins (m) of a Q4_K super-block's header, four per word: [0] sub-blocks 0-3, [1] 4-7.
struct Scales {
  uint32_t sc[2], m[2];
};
__device__ __forceinline__ Scales scales_of(uint4 head) {
  Scales s;
  s.sc[0] = head.y & 0x3F3F3F3Fu;
  s.m[0] = head.z & 0x3F3F3F3Fu;
  s.sc[1] = (head.w & 0x0F0F0F0Fu) | ((head.y >> 2) & 0x30303030u);
  s.m[1] = ((head.w >> 4) & 0x0F0F0F0Fu) | ((head.z >> 2) & 0x30303030u);
  return s;
}
__device__ __forceinline__ uint32_t byte_of(const uint32_t (&w)[2], int j) {
  return (w[j / 4] >> (8 * (j % 4))) & 0xFFu;
}

/// A fragments of one k-step for rows g (q[0]) and g + 8 (q[1]) from their words of 8 nibble positions: `high`
/// takes the high nibbles (sub-block 2i + 1: 1024 + 16 q, scaled by sc / 16 - 64 sc), else the low ones (1024 + q,
/// by sc - 1024 sc); mul[h] / add[h] are row h's constants. a = {(g: 8t, 8t+2), (g+8: ..), (g: 8t+1, 8t+3), (g+8: ..)}.
__device__ __forceinline__ void a_step(const uint32_t (&q)[2], bool high, const uint32_t (&mul)[2],
                                       const uint32_t (&add)[2], uint32_t (&a)[4]) {
  const uint32_t mask = high ? 0x00F000F0u : 0x000F000Fu;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    a[h] = mma::fma_f16x2((q[h] & mask) | kBias, mul[h], add[h]);
    a[2 + h] = mma::fma_f16x2(((q[h] >> 8) & mask) | kBias, mul[h], add[h]);
  }
}

}  // namespace f16

template <GgmlType T>
__global__ void __launch_bounds__(32 * kF16Warps, 1) gemv_f16_kernel(const GemvParams p, const int warp_tiles) {
  static_assert(T == GgmlType::q4_k);
  constexpr int NT = kF16Tokens;
  constexpr int kBlockBytes = quant::BlockTraits<T>::bytes;  // 144
  extern __shared__ __align__(16) uint4 f16_smem[];
  int* s_x_row = reinterpret_cast<int*>(f16_smem);
  int* s_y_row = s_x_row + NT;
  float* s_inv = reinterpret_cast<float*>(s_y_row + NT);  // x's scale s per token
  float* s_out = s_inv + NT;                              // 1 / s
  int* s_group = reinterpret_cast<int*>(s_out + NT);      // matrix, count
  uint8_t* xs = reinterpret_cast<uint8_t*>(f16_smem) + kF16HeaderBytes;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;
  wait_for_producers();  // the group table is another kernel's output
  allow_dependents();

  const int n = p.k / 32;  // sub-blocks (x units)
  const int steps = p.k / 256;
  const int token_bytes = gemv_f16_token_bytes(p.k);
  const int sums_at = n * 128;
  const bool gated = p.weight_up != nullptr;
  const int64_t row_bytes = static_cast<int64_t>(steps) * kBlockBytes;
  const int64_t n_groups = *p.n_groups;
  const int64_t total = n_groups * warp_tiles;
  const int64_t end = (static_cast<int64_t>(blockIdx.x) + 1) * total / gridDim.x;
  int64_t at = static_cast<int64_t>(blockIdx.x) * total / gridDim.x;

  auto first_row = [&](int tile, int j) { return gated ? 16 * tile : 32 * tile + 16 * j; };
  float acc[2][2][4] = {};  // [token tile][j][element]

  while (at < end) {
    const int group = static_cast<int>(at / warp_tiles);
    const int first = static_cast<int>(at - static_cast<int64_t>(group) * warp_tiles);
    const int64_t left = end - static_cast<int64_t>(group) * warp_tiles;
    const int last = left < warp_tiles ? static_cast<int>(left) : warp_tiles;
    at = static_cast<int64_t>(group) * warp_tiles + last;
    __syncthreads();  // every warp is done with the previous group's x
    const GemvGroup& gr = p.groups[group];
    if (threadIdx.x < NT) {
      const int i = static_cast<int>(threadIdx.x);
      s_y_row[i] = gr.y_row[i];
      s_x_row[i] = p.x_row_is_y_row ? gr.y_row[i] : gr.x_row[i];
    } else if (threadIdx.x == NT) {
      s_group[0] = gr.matrix;
      s_group[1] = min(gr.count, NT);
    }
    __syncthreads();
    const int count = s_group[1];
    if (count <= 0) continue;
    const uint8_t* base[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      base[j] = static_cast<const uint8_t*>(gated && j == 1 ? p.weight_up : p.weight) +
                static_cast<int64_t>(s_group[0]) * p.matrix_stride_bytes;
    }
    auto load = [&](int tile, int sb, MmaRows<4>(&w)[2]) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int r0 = first_row(tile, j) + g;
        // rows past the end load the last row (their sums are never written)
        const int64_t a = min(r0, p.n_rows - 1), b = min(r0 + 8, p.n_rows - 1);
        mma_load<T, 4>(base[j] + a * row_bytes, base[j] + b * row_bytes, sb, 0, t, w[j]);
      }
    };
    int tile = first + warp, sb = 0;
    MmaRows<4> cur[2], next[2];
    if (tile < last) load(tile, 0, cur);  // in flight while x is staged

    // each token's scale: |x| <= 32385 dx over its units (x = dx (254 hi + lo)), a power of two below 2^15 / that
    for (int tok = warp; tok < count; tok += kF16Warps) {
      const uint8_t* meta = p.x_q + static_cast<int64_t>(s_x_row[tok]) * p.x_q_stride + 64 * n;
      float m = 0.0f;
      for (int u = lane; u < n; u += 32) m = fmaxf(m, fabsf(*reinterpret_cast<const float*>(meta + 16 * u)));
#pragma unroll
      for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
      if (lane == 0) {
        const float bound = 32385.0f * m;
        int shift = 0;
        if (bound > 0.0f && bound <= 3.0e38f) {
          int e = 0;
          frexpf(bound, &e);  // bound < 2^e
          shift = max(-120, min(120, 15 - e));
        }
        s_inv[tok] = ldexpf(1.0f, shift);
        s_out[tok] = ldexpf(1.0f, -shift);
      }
    }
    __syncthreads();
    // the planes: thread per (token, unit, quarter q of the unit: positions 8q .. 8q + 7)
    const int chunks = count * n * 4;
    for (int c = static_cast<int>(threadIdx.x); c < chunks; c += 32 * kF16Warps) {
      const int tok = c / (4 * n), rem = c - tok * 4 * n, u = rem >> 2, q = rem & 3;
      const uint8_t* rec = p.x_q + static_cast<int64_t>(s_x_row[tok]) * p.x_q_stride;
      const uint2 h = *reinterpret_cast<const uint2*>(rec + 16 * ((q >> 1) * n + u) + 8 * (q & 1));
      const uint2 l = *reinterpret_cast<const uint2*>(rec + 16 * ((2 + (q >> 1)) * n + u) + 8 * (q & 1));
      const split_int8::Meta meta = *reinterpret_cast<const split_int8::Meta*>(rec + 64 * n + 16 * u);
      const float f = meta.dx * s_inv[tok];
      float v[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int hb = static_cast<int8_t>(((j < 4 ? h.x : h.y) >> (8 * (j % 4))) & 0xFFu);
        const int lb = static_cast<int8_t>(((j < 4 ? l.x : l.y) >> (8 * (j % 4))) & 0xFFu);
        v[j] = f * static_cast<float>(254 * hb + lb);
      }
      constexpr int kOrder[8] = {0, 2, 1, 3, 4, 6, 5, 7};
      uint32_t hi[4], lo[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float a = v[kOrder[2 * i]], b = v[kOrder[2 * i + 1]];
        hi[i] = mma::pack_f16x2(a, b);
        lo[i] = mma::pack_f16x2(a - mma::f16_half(hi[i], 0), b - mma::f16_half(hi[i], 1));
      }
      uint8_t* dst = xs + tok * token_bytes + 128 * u + 16 * q;
      *reinterpret_cast<uint4*>(dst) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
      *reinterpret_cast<uint4*>(dst + 64) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
      if (q == 0) {
        // X_u / 32 <= 2^15 (as hi + lo), at the super-block's pair u % 8 / 2 (k 2t, 2t + 1 of the m16n8k8 product)
        const float x = f * static_cast<float>(meta.s0 + meta.s1) * (1.0f / 32.0f);
        const uint32_t xh = mma::pack_f16x2(x, 0.0f);
        const uint32_t xl = mma::pack_f16x2(x - mma::f16_half(xh, 0), 0.0f);
        uint16_t* sums = reinterpret_cast<uint16_t*>(xs + tok * token_bytes + sums_at + 32 * (u / 8) + 8 * (u % 8 / 2));
        sums[u % 2] = static_cast<uint16_t>(xh);
        sums[2 + u % 2] = static_cast<uint16_t>(xl);
      }
    }
    __syncthreads();

    const bool two = count > 8;  // the second token tile holds a token
    const uint8_t* xg[2] = {xs + g * token_bytes, xs + (8 + g) * token_bytes};
    // acc += super-block sb of the rows in w
    auto multiply = [&](const MmaRows<4>(&w)[2], int sb) {
      float part[2][2][4] = {};  // [j][token tile]: d-scaled sums of this super-block
      f16::Scales sc[2][2];      // [j][row h]
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) sc[j][h] = f16::scales_of(w[j].head[h]);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int s = 2 * i + half;  // sub-block of the super-block
          uint4 bh[2], bl[2];
#pragma unroll
          for (int q = 0; q < 2; ++q) {
            if (q == 1 && !two) break;
            const uint8_t* at_q = xg[q] + 128 * (8 * sb + s) + 16 * t;
            bh[q] = *reinterpret_cast<const uint4*>(at_q);
            bl[q] = *reinterpret_cast<const uint4*>(at_q + 64);
          }
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            uint32_t mul[2], add[2];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const uint32_t c = f16::small_int_x2(f16::byte_of(sc[j][h].sc, s));
              mul[h] = half ? mma::mul_f16x2(c, 0x2C002C00u) : c;            // sc / 16, or sc
              add[h] = mma::mul_f16x2(c, half ? 0xD400D400u : 0xE400E400u);  // -64 sc, or -1024 sc
            }
            uint32_t a0[4], a1[4];
            const uint32_t q0[2] = {w[j].qs[0][i].x, w[j].qs[1][i].x}, q1[2] = {w[j].qs[0][i].y, w[j].qs[1][i].y};
            f16::a_step(q0, half, mul, add, a0);
            f16::a_step(q1, half, mul, add, a1);
#pragma unroll
            for (int q = 0; q < 2; ++q) {
              if (q == 1 && !two) break;
              mma::mma_f16_16816(part[j][q], a0, bh[q].x, bh[q].y);
              mma::mma_f16_16816(part[j][q], a0, bl[q].x, bl[q].y);
              mma::mma_f16_16816(part[j][q], a1, bh[q].z, bh[q].w);
              mma::mma_f16_16816(part[j][q], a1, bl[q].z, bl[q].w);
            }
          }
        }
      }
      // the mins: sum_s m_s X_s / 32 for sub-blocks 2t, 2t + 1 of rows g, g + 8, then the super-block's scales
      uint2 xsum[2];
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        if (q == 1 && !two) break;
        xsum[q] = *reinterpret_cast<const uint2*>(xg[q] + sums_at + 32 * sb + 8 * t);
      }
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        uint32_t am[2];
        float d[2], dmin[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          // mins 2t, 2t + 1: bytes 2 (t % 2), + 1 of word t / 2 (a select, not an index: t is a lane's)
          const uint32_t mw = (t < 2 ? sc[j][h].m[0] : sc[j][h].m[1]) >> (16 * (t & 1));
          am[h] = mma::sub_f16x2(((mw & 0xFFu) | ((mw & 0xFF00u) << 8)) | f16::kBias, f16::kBias);
          d[h] = quant::half_bits_to_float(w[j].head[h].x & 0xFFFFu);
          dmin[h] = 32.0f * quant::half_bits_to_float(w[j].head[h].x >> 16);
        }
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          if (q == 1 && !two) break;
          float mins[4] = {};
          mma::mma_f16_1688(mins, am, xsum[q].x);
          mma::mma_f16_1688(mins, am, xsum[q].y);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            acc[q][j][e] = fmaf(d[e / 2], part[j][q][e], fmaf(-dmin[e / 2], mins[e], acc[q][j][e]));
          }
        }
      }
    };
    // a warp's finished tile: tokens 8q + 2t, 8q + 2t + 1 of rows g, g + 8 (gated: silu(gate) * up)
    auto finish = [&](int tile) {
#pragma unroll
      for (int q = 0; q < 2; ++q) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int tok = 8 * q + 2 * t + e % 2;
          if (tok < count) {
            const float out = s_out[tok];
            const int y_row = s_y_row[tok];
            if (gated) {
              const int r = first_row(tile, 0) + g + 8 * (e / 2);
              const float gv = acc[q][0][e] * out, uv = acc[q][1][e] * out;
              if (r < p.n_rows) mma_store(p, y_row, r, gv / (1.0f + __expf(-gv)) * uv);
            } else {
#pragma unroll
              for (int j = 0; j < 2; ++j) {
                const int r = first_row(tile, j) + g + 8 * (e / 2);
                if (r < p.n_rows) mma_store(p, y_row, r, acc[q][j][e] * out);
              }
            }
          }
#pragma unroll
          for (int j = 0; j < 2; ++j) acc[q][j][e] = 0.0f;
        }
      }
    };

    while (tile < last) {
      int next_tile = tile, next_sb = sb + 1;
      if (next_sb == steps) {
        next_sb = 0;
        next_tile += kF16Warps;
      }
      if (next_tile < last) load(next_tile, next_sb, next);
      multiply(cur, sb);
      if (sb == steps - 1) finish(tile);
      tile = next_tile;
      sb = next_sb;
#pragma unroll
      for (int j = 0; j < 2; ++j) cur[j] = next[j];
    }
  }
}

/// Whether launch_gemv_f16 takes a launch gemv_mma_applies<T> took: gathered Q4_K groups of 9-16 tokens on records,
/// whose 16 tokens' planes fit the block's shared memory (k up to ~3,400).
template <GgmlType T>
inline bool gemv_f16_applies(const GemvParams& p) {
  if constexpr (T != GgmlType::q4_k) {
    return false;
  } else {
    if (!gemv_f16_enabled() || p.groups == nullptr || p.choice_ids != nullptr || p.x_q == nullptr ||
        p.route.logits != nullptr || p.max_tokens_per_group <= gemv_max_tokens || p.max_tokens_per_group > kF16Tokens ||
        p.k % 256 != 0) {
      return false;
    }
    int device = 0;
    LATTE_CUDA_CHECK(cudaGetDevice(&device));
    return gemv_f16_smem_bytes(p.k) + 1024 <= device_caps(device).smem_per_block_optin;
  }
}

template <GgmlType T>
void launch_gemv_f16(const GemvParams& p, cudaStream_t stream) {
  if constexpr (T == GgmlType::q4_k) {
    auto* kernel = gemv_f16_kernel<T>;
    const int smem = static_cast<int>(gemv_f16_smem_bytes(p.k));
    LATTE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    int device = 0;
    LATTE_CUDA_CHECK(cudaGetDevice(&device));
    const int64_t resident = static_cast<int64_t>(device_caps(device).sm_count) *
                             gemv_resident_blocks(reinterpret_cast<const void*>(kernel), smem);
    const int warp_tiles = (p.n_rows + (p.weight_up ? 15 : 31)) / (p.weight_up ? 16 : 32);
    const int64_t most = static_cast<int64_t>(p.max_groups) * warp_tiles;
    const int blocks = static_cast<int>(std::max<int64_t>(1, std::min(resident, most)));
    launch_kernel(kernel, dim3(static_cast<unsigned>(blocks)), dim3(32 * kF16Warps), static_cast<size_t>(smem), stream,
                  p, warp_tiles);
  }
}

}  // namespace latte::cuda
