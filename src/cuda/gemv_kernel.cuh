// The GEMV kernel template behind gemv_quant() (see gemv_quant.hpp). Included by the per-type-family
// translation units gemv_quant_*.cu, which instantiate launch_gemv<T> for their types.
//
// Work split: a row group is R rows (dense: rows R p .. R p + R - 1; gated: R / 2 rows of W_gate each
// with its row of W_up), owned by `split` warps of the block (1, 2 or 4: the launcher picks more when the
// matrix is too small to give every SM several warps). K is walked in steps of 1024 values; warp j of a
// group takes steps j, j + split, ...; lane l decodes values [32 l, 32 l + 32) of a step. Quantized rows
// are staged into shared memory with coalesced 16-byte loads (all rows' loads issued before any is
// used) and realigned there (row_staging), then decoded into byte codes (quant_decode). For 1-2 tokens
// a lane loads its 32 x values once per step into registers and reuses them for all R = 4-8 rows: the
// L1 traffic of x, not DRAM, limited the 2-row version (an H200 profile showed its L1 97% busy at 25%
// of DRAM bandwidth). Sums are fp32; the warp reduces, then the group's warps through shared memory.
//
// Cost per weight value at 1 token: ~1 byte-permute + 1 add (exact code->float) + 1 FMA, so Q4_K
// needs ~29 values/SM-clock at 4.3 TB/s: close to the issue limit, see BENCHMARKS.md.
#pragma once

#include <cstdint>
#include "cuda/check.hpp"
#include "cuda/gemv_quant.hpp"
#include "cuda/quant_decode.cuh"
#include "cuda/row_staging.cuh"

namespace latte::cuda {

/// Compile-time shape of the GEMV for type T and NT tokens.
template <GgmlType T, int NT = 1>
struct GemvTraits {
  using Block = quant::BlockTraits<T>;
  static constexpr int warps = 4;              ///< warps per block (128 threads)
  static constexpr int step_values = 32 * 32;  ///< values per warp step: 32 lanes x 32 values
  static constexpr int step_bytes = step_values / Block::values * Block::bytes;
  /// 16-byte chunks each lane loads per row and step (room for a misaligned start).
  static constexpr int chunks_per_lane = ((step_bytes + 15 + 15) / 16 + 31) / 32;
  static constexpr int stage_bytes = 16 * 32 * chunks_per_lane;  ///< shared bytes per row
  /// x values held in registers across the rows of a warp (1-2 tokens): each x load then serves every
  /// row, which is what keeps the L1 (x loads + staged weights) from being the bottleneck.
  static constexpr bool x_in_registers = !Block::is_float && NT <= 2;
  /// Rows each warp owns (dense) or 2 x the gate/up pairs (gated): as many as the staging memory allows.
  static constexpr int rows_per_warp = Block::is_float || !x_in_registers ? 2
                                       : warps * 8 * stage_bytes <= 40 * 1024 ? 8
                                                                              : 4;
};

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float silu(float g) { return g / (1.0f + __expf(-g)); }

/// Blocks per SM the register budget is set for: 1-token GEMVs need occupancy for their loads in flight.
template <int NT>
inline constexpr int gemv_min_blocks = NT == 1 ? 4 : NT <= 4 ? 3 : 2;

template <GgmlType T, int NT>
__global__ void __launch_bounds__(128, gemv_min_blocks<NT>) gemv_kernel(const GemvParams p, const int split) {
  using Tr = GemvTraits<T, NT>;
  using Block = quant::BlockTraits<T>;
  constexpr int R = Tr::rows_per_warp;
  constexpr int CPL = Tr::chunks_per_lane;
  __shared__ __align__(16) uint8_t stage[Block::is_float ? 1 : Tr::warps][R][Block::is_float ? 16 : Tr::stage_bytes];
  __shared__ float partial[Tr::warps][R][NT];  // split > 1: each warp's sums, reduced by the group's first warp

  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int part = warp % split;  // which of the group's warps: takes steps part, part + split, ...

  // ---- which tokens and which matrix ----
  int matrix = 0;
  int count = p.n_tokens;
  int x_row[NT], y_row[NT];
  if (p.groups != nullptr) {
    if (static_cast<int>(blockIdx.y) >= *p.n_groups) return;
    const GemvGroup& g = p.groups[blockIdx.y];
    matrix = g.matrix;
    count = min(g.count, NT);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      x_row[t] = t < count ? (p.x_row_is_y_row ? g.y_row[t] : g.x_row[t]) : 0;
      y_row[t] = t < count ? g.y_row[t] : 0;
    }
  } else {
#pragma unroll
    for (int t = 0; t < NT; ++t) x_row[t] = y_row[t] = t;
  }
  if (count <= 0) return;

  // ---- which rows ----
  const bool gated = p.weight_up != nullptr;
  const int64_t row_bytes = static_cast<int64_t>(p.k) / Block::values * Block::bytes;
  const int pair = static_cast<int>(blockIdx.x) * (Tr::warps / split) + warp / split;
  // Row j of the group: its output row, whether it exists, and where its bytes are (computed on demand:
  // arrays of per-row pointers cost more registers than the arithmetic).
  const uint8_t* const gate_base = static_cast<const uint8_t*>(p.weight);
  const uint8_t* const up_base = static_cast<const uint8_t*>(gated ? p.weight_up : p.weight);
  const int64_t matrix_offset = static_cast<int64_t>(matrix) * p.matrix_stride_bytes;
  auto out_row_of = [&](int j) { return gated ? (R / 2) * pair + j / 2 : R * pair + j; };
  auto valid_row = [&](int j) { return out_row_of(j) < p.n_rows; };
  auto lo_of = [&](int j) { return gated && j % 2 == 1 ? up_base : gate_base; };
  auto row_of = [&](int j) { return lo_of(j) + matrix_offset + static_cast<int64_t>(out_row_of(j)) * row_bytes; };
  // valid_row(0) is uniform over the group's warps; with split > 1 every warp must reach the barrier below.
  const bool group_valid = valid_row(0);
  if (!group_valid && split == 1) return;

  float acc[R][NT];
#pragma unroll
  for (int j = 0; j < R; ++j)
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[j][t] = 0.0f;

  const int stride = split * Tr::step_values;
  const int k_first = group_valid ? part * Tr::step_values : p.k;
  // Stages the step at k0 of rows [0, R) into shared memory, SB rows' loads in flight at a time.
  constexpr int SB = R < 4 ? R : 4;
  [[maybe_unused]] auto stage_step = [&](int k0) {
    const int bytes = min(Tr::step_values, p.k - k0) / Block::values * Block::bytes;
    const int64_t offset = static_cast<int64_t>(k0) / Block::values * Block::bytes;
#pragma unroll
    for (int b0 = 0; b0 < R; b0 += SB) {
      uint4 regs[SB][CPL];
      StagedRange range[SB];
#pragma unroll
      for (int j = 0; j < SB; ++j) {
        if (valid_row(b0 + j)) {
          const uint8_t* lo = lo_of(b0 + j);
          range[j] = stage_begin<CPL>(row_of(b0 + j) + offset, bytes, lo, lo + p.weight_bytes, lane, regs[j]);
        }
      }
#pragma unroll
      for (int j = 0; j < SB; ++j) {
        if (valid_row(b0 + j)) stage_finish<CPL>(range[j], regs[j], stage[warp][b0 + j], lane);
      }
    }
  };

  for (int k0 = k_first; k0 < p.k; k0 += stride) {
    const int step_values = min(Tr::step_values, p.k - k0);
    if constexpr (Block::is_float) {
      // lane l takes the float4 groups l, l + 32, ... of the step: fully coalesced 16-byte loads
#pragma unroll 2
      for (int c = lane; 4 * c < step_values; c += 32) {
        const int k = k0 + 4 * c;
        float w[R][4];
#pragma unroll
        for (int j = 0; j < R; ++j) {
          if (!valid_row(j)) {
            w[j][0] = w[j][1] = w[j][2] = w[j][3] = 0.0f;
          } else if constexpr (T == GgmlType::f32) {
            const float4 f = __ldg(reinterpret_cast<const float4*>(row_of(j)) + k / 4);
            w[j][0] = f.x, w[j][1] = f.y, w[j][2] = f.z, w[j][3] = f.w;
          } else {
            const uint2 h = __ldg(reinterpret_cast<const uint2*>(row_of(j)) + k / 4);
            const uint32_t hw[2] = {h.x, h.y};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const uint32_t bits = (hw[i / 2] >> (16 * (i % 2))) & 0xFFFFu;
              w[j][i] = T == GgmlType::f16 ? quant::half_bits_to_float(bits) : quant::bf16_bits_to_float(bits);
            }
          }
        }
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          if (t < count) {
            const float4 xv = __ldg(reinterpret_cast<const float4*>(p.x + x_row[t] * p.x_stride + k));
#pragma unroll
            for (int j = 0; j < R; ++j) acc[j][t] += w[j][0] * xv.x + w[j][1] * xv.y + w[j][2] * xv.z + w[j][3] * xv.w;
          }
        }
      }
    } else {
      // ---- this step of the warp's rows into shared memory, realigned (all loads issued first) ----
      stage_step(k0);
      __syncwarp();

      if (32 * lane < step_values) {
        const int kx = k0 + 32 * lane;
        // x of this lane's 32 values (kept when x_in_registers) and its sums per half of 16
        [[maybe_unused]] float4 xr[Tr::x_in_registers ? NT : 1][8];
        float xs[NT][2];
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          xs[t][0] = xs[t][1] = 0.0f;
          if (t < count) {
#pragma unroll
            for (int i = 0; i < 8; ++i) {
              const float4 xv = __ldg(reinterpret_cast<const float4*>(p.x + x_row[t] * p.x_stride + kx) + i);
              xs[t][i / 4] += (xv.x + xv.y) + (xv.z + xv.w);
              if constexpr (Tr::x_in_registers) xr[t][i] = xv;
            }
          } else if constexpr (Tr::x_in_registers) {
#pragma unroll
            for (int i = 0; i < 8; ++i) xr[t][i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          }
        }
#pragma unroll
        for (int j = 0; j < R; ++j) {
          if (!valid_row(j)) continue;
          const quant::Unit32 u = quant::decode_codes<T>(stage[warp][j], lane);
#pragma unroll
          for (int h = 0; h < 2; ++h) {  // two halves of 16 values, each with its own scale/offset
            float sum[NT];
#pragma unroll
            for (int t = 0; t < NT; ++t) sum[t] = 0.0f;
#pragma unroll
            for (int i = 4 * h; i < 4 * h + 4; ++i) {
              float q[4];
#pragma unroll
              for (int b = 0; b < 4; ++b) q[b] = quant::code_value(u.codes[i], b);
#pragma unroll
              for (int t = 0; t < NT; ++t) {
                if (t < count) {
                  float4 xv;
                  if constexpr (Tr::x_in_registers) {
                    xv = xr[t][i];
                  } else {
                    xv = __ldg(reinterpret_cast<const float4*>(p.x + x_row[t] * p.x_stride + kx) + i);
                  }
                  sum[t] += q[0] * xv.x + q[1] * xv.y + q[2] * xv.z + q[3] * xv.w;
                }
              }
            }
#pragma unroll
            for (int t = 0; t < NT; ++t) acc[j][t] += u.scale[h] * sum[t] - u.offset[h] * xs[t][h];
          }
        }
      }
      __syncwarp();
    }
  }

  // ---- reduce over the warp, then over the group's warps, and write ----
#pragma unroll
  for (int t = 0; t < NT; ++t) {
#pragma unroll
    for (int j = 0; j < R; ++j) acc[j][t] = warp_sum(acc[j][t]);
  }
  if (split > 1) {
    if (lane == 0) {
#pragma unroll
      for (int j = 0; j < R; ++j)
#pragma unroll
        for (int t = 0; t < NT; ++t) partial[warp][j][t] = acc[j][t];
    }
    __syncthreads();
    if (part != 0 || !group_valid) return;
    for (int w = warp + 1; w < warp + split; ++w) {
#pragma unroll
      for (int j = 0; j < R; ++j)
#pragma unroll
        for (int t = 0; t < NT; ++t) acc[j][t] += partial[w][j][t];
    }
  }
  if (lane == 0) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t >= count) continue;
      float* yrow = p.y + y_row[t] * p.y_stride;
      const float* rrow = p.residual ? p.residual + y_row[t] * p.y_stride : nullptr;
      if (gated) {
#pragma unroll
        for (int j = 0; j < R; j += 2) {
          if (!valid_row(j)) continue;
          const float v = silu(acc[j][t]) * acc[j + 1][t];
          yrow[out_row_of(j)] = rrow ? v + rrow[out_row_of(j)] : v;
        }
      } else {
#pragma unroll
        for (int j = 0; j < R; ++j) {
          if (valid_row(j)) yrow[out_row_of(j)] = rrow ? acc[j][t] + rrow[out_row_of(j)] : acc[j][t];
        }
      }
    }
  }
}

/// Warps per row group (1, 2 or 4): more when the launch would give the GPU too few warps to keep
/// enough loads in flight, never more than the row has steps. `row_groups` counts all groups of the
/// launch (over the gathered matrices too).
inline int gemv_split(int64_t row_groups, int k, int step_values, int warps_per_block) {
  constexpr int64_t kWantedWarps = 132 * 24;  // ~24 resident warps on each SM of a 132-SM GPU
  const int steps = (k + step_values - 1) / step_values;
  int split = 1;
  while (2 * split <= warps_per_block && 2 * split <= steps && row_groups * split < kWantedWarps) split *= 2;
  return split;
}

template <GgmlType T, int NT>
void launch_gemv_tokens(const GemvParams& p, cudaStream_t stream) {
  using Tr = GemvTraits<T, NT>;
  const int rows_per_group = p.weight_up ? Tr::rows_per_warp / 2 : Tr::rows_per_warp;
  const int64_t row_groups = (p.n_rows + rows_per_group - 1) / rows_per_group;
  const int split = gemv_split(row_groups * (p.groups ? p.max_groups : 1), p.k, Tr::step_values, Tr::warps);
  const int groups_per_block = Tr::warps / split;
  const dim3 grid(static_cast<unsigned>((row_groups + groups_per_block - 1) / groups_per_block),
                  static_cast<unsigned>(p.groups ? p.max_groups : 1));
  gemv_kernel<T, NT><<<grid, dim3(32 * Tr::warps), 0, stream>>>(p, split);
  LATTE_CUDA_CHECK_LAUNCH();
}

template <GgmlType T>
void launch_gemv(const GemvParams& p, cudaStream_t stream) {
  const int tokens = p.groups ? p.max_tokens_per_group : p.n_tokens;
  if (tokens <= 1) {
    launch_gemv_tokens<T, 1>(p, stream);
  } else if (tokens <= 2) {
    launch_gemv_tokens<T, 2>(p, stream);
  } else if (tokens <= 4) {
    launch_gemv_tokens<T, 4>(p, stream);
  } else {
    launch_gemv_tokens<T, 8>(p, stream);
  }
}

}  // namespace latte::cuda
