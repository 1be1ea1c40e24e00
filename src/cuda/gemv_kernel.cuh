// The GEMV kernel template behind gemv_quant() (see gemv_quant.hpp). Included by the per-type-family
// translation units gemv_quant_*.cu, which instantiate launch_gemv<T> for their types.
//
// Work split: a row group is 2 rows (dense: rows 2p and 2p+1; gated: row p of W_gate and of W_up), owned
// by `split` warps of the block (1, 2 or 4: the launcher picks more when the matrix is too small to give
// every SM several warps). K is walked in steps of 1024 values; warp j of a group takes steps j, j+split,
// ...; lane l decodes values [32 l, 32 l + 32) of a step. Quantized rows are staged into shared memory
// with coalesced 16-byte loads and realigned there (row_staging), then decoded into byte codes
// (quant_decode). x: for 1 and 2 tokens the step's values are staged in shared memory by coalesced
// loads (StageX below); for more tokens each lane reads its values as float4 straight from global/L1.
// Each x value read serves both rows. Sums are fp32; the warp reduces, then the group's warps through
// shared memory.
//
// Measured on an H200 (BENCHMARKS.md): with direct x loads the kernel was bound by the L1 (97% busy at
// ~25% of DRAM bandwidth on the output head); staging x made single-sequence decode 13-15% faster. Two
// variants measured slower and were dropped: issuing the next step's loads before decoding the current
// one (more registers, less occupancy) and 8 rows per warp with x held in registers (fewer warps, each
// working serially).
//
// Cost per weight value at 1 token: ~1 byte-permute + 1 add (exact code->float) + 1 FMA, so Q4_K
// needs ~29 values/SM-clock at 4.3 TB/s: close to the issue limit, see BENCHMARKS.md.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string_view>
#include "cuda/check.hpp"
#include "cuda/gemv_quant.hpp"
#include "cuda/quant_decode.cuh"
#include "cuda/row_staging.cuh"

namespace latte::cuda {

/// Compile-time shape of the GEMV for type T.
template <GgmlType T>
struct GemvTraits {
  using Block = quant::BlockTraits<T>;
  static constexpr int warps = 4;              ///< warps per block (128 threads)
  static constexpr int rows_per_warp = 2;      ///< rows (or gate/up row pairs) each warp owns
  static constexpr int step_values = 32 * 32;  ///< values per warp step: 32 lanes x 32 values
  static constexpr int step_bytes = step_values / Block::values * Block::bytes;
  /// 16-byte chunks each lane loads per row and step (room for a misaligned start).
  static constexpr int chunks_per_lane = ((step_bytes + 15 + 15) / 16 + 31) / 32;
  static constexpr int stage_bytes = 16 * 32 * chunks_per_lane;  ///< shared bytes per row
};

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float silu(float g) { return g / (1.0f + __expf(-g)); }

/// x staged through shared memory (StageX): the step's x values are loaded with coalesced float4 loads
/// and stored rotated so that each lane reads its 32 consecutive values without bank conflicts. Direct
/// loads (lane l reads x[32 l .. 32 l + 31]) put the 32 lanes of one float4 load on 32 cache lines, which
/// is what kept the L1 busy; staging costs a store and a load of 4 wavefronts each instead.
/// Float4 g of a step (lane g / 8's j = g % 8) lives at 8 (g / 8) + (g + g / 8) % 8.
__device__ __forceinline__ int staged_x_slot(int g) { return (g & ~7) | ((g + (g >> 3)) & 7); }

template <GgmlType T, int NT, bool StageX>
__global__ void __launch_bounds__(128) gemv_kernel(const GemvParams p, const int split) {
  using Tr = GemvTraits<T>;
  using Block = quant::BlockTraits<T>;
  constexpr int R = Tr::rows_per_warp;
  constexpr int CPL = Tr::chunks_per_lane;
  static_assert(!StageX || (!Block::is_float && NT <= 2), "x staging: quantized types, at most 2 tokens");
  __shared__ __align__(16) uint8_t stage[Block::is_float ? 1 : Tr::warps][R][Block::is_float ? 16 : Tr::stage_bytes];
  __shared__ __align__(16) float4 x_stage[StageX ? Tr::warps : 1][StageX ? NT : 1][StageX ? Tr::step_values / 4 : 1];
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
  const uint8_t* lo[R];
  const uint8_t* wrow[R];
  int out_row[R];
  bool valid[R];
#pragma unroll
  for (int j = 0; j < R; ++j) {
    const uint8_t* base = static_cast<const uint8_t*>(gated && j == 1 ? p.weight_up : p.weight);
    out_row[j] = gated ? pair : R * pair + j;
    valid[j] = out_row[j] < p.n_rows;
    lo[j] = base;
    wrow[j] = base + static_cast<int64_t>(matrix) * p.matrix_stride_bytes + out_row[j] * row_bytes;
  }
  // valid[0] is uniform over the group's warps; with split > 1 every warp must reach the barrier below.
  if (!valid[0] && split == 1) return;
  const uint8_t* hi[R] = {lo[0] + p.weight_bytes, lo[1] + p.weight_bytes};

  float acc[R][NT];
#pragma unroll
  for (int j = 0; j < R; ++j)
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[j][t] = 0.0f;

  const int stride = split * Tr::step_values;
  const int k_first = valid[0] ? part * Tr::step_values : p.k;
  [[maybe_unused]] uint4 regs[R][CPL];
  [[maybe_unused]] StagedRange range[R];
  // Issues the global loads of the step at k0 into regs (quantized types).
  [[maybe_unused]] auto issue = [&](int k0) {
    const int bytes = min(Tr::step_values, p.k - k0) / Block::values * Block::bytes;
    const int64_t offset = static_cast<int64_t>(k0) / Block::values * Block::bytes;
#pragma unroll
    for (int j = 0; j < R; ++j) {
      if (valid[j]) range[j] = stage_begin<CPL>(wrow[j] + offset, bytes, lo[j], hi[j], lane, regs[j]);
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
          if (!valid[j]) {
            w[j][0] = w[j][1] = w[j][2] = w[j][3] = 0.0f;
          } else if constexpr (T == GgmlType::f32) {
            const float4 f = __ldg(reinterpret_cast<const float4*>(wrow[j]) + k / 4);
            w[j][0] = f.x, w[j][1] = f.y, w[j][2] = f.z, w[j][3] = f.w;
          } else {
            const uint2 h = __ldg(reinterpret_cast<const uint2*>(wrow[j]) + k / 4);
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
      // ---- this step of both rows into shared memory, realigned ----
      issue(k0);
      if constexpr (StageX) {
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          if (t < count) {
            const float4* src = reinterpret_cast<const float4*>(p.x + x_row[t] * p.x_stride + k0);
#pragma unroll
            for (int c = 0; c < Tr::step_values / 128; ++c) {
              const int g = 32 * c + lane;
              if (4 * g < step_values) x_stage[warp][t][staged_x_slot(g)] = __ldg(src + g);
            }
          }
        }
      }
#pragma unroll
      for (int j = 0; j < R; ++j) {
        if (valid[j]) stage_finish<CPL>(range[j], regs[j], stage[warp][j], lane);
      }
      __syncwarp();

      if (32 * lane < step_values) {
        quant::Unit32 u[R];
#pragma unroll
        for (int j = 0; j < R; ++j) {
          if (valid[j]) {
            u[j] = quant::decode_codes<T>(stage[warp][j], lane);
          } else {
            u[j] = quant::Unit32{};
          }
        }
        const int kx = k0 + 32 * lane;
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // two halves of 16 values, each with its own scale/offset
          float s[R][NT], xs[NT];
#pragma unroll
          for (int t = 0; t < NT; ++t) {
            xs[t] = 0.0f;
#pragma unroll
            for (int j = 0; j < R; ++j) s[j][t] = 0.0f;
          }
#pragma unroll
          for (int i = 4 * h; i < 4 * h + 4; ++i) {
            float q[R][4];
#pragma unroll
            for (int j = 0; j < R; ++j)
#pragma unroll
              for (int b = 0; b < 4; ++b) q[j][b] = quant::code_value(u[j].codes[i], b);
#pragma unroll
            for (int t = 0; t < NT; ++t) {
              if (t < count) {
                float4 xv;
                if constexpr (StageX) {
                  xv = x_stage[warp][t][8 * lane + ((i + lane) & 7)];
                } else {
                  xv = __ldg(reinterpret_cast<const float4*>(p.x + x_row[t] * p.x_stride + kx) + i);
                }
                xs[t] += (xv.x + xv.y) + (xv.z + xv.w);
#pragma unroll
                for (int j = 0; j < R; ++j)
                  s[j][t] += q[j][0] * xv.x + q[j][1] * xv.y + q[j][2] * xv.z + q[j][3] * xv.w;
              }
            }
          }
#pragma unroll
          for (int j = 0; j < R; ++j)
#pragma unroll
            for (int t = 0; t < NT; ++t) acc[j][t] += u[j].scale[h] * s[j][t] - u[j].offset[h] * xs[t];
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
    if (part != 0 || !valid[0]) return;
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
        const float v = silu(acc[0][t]) * acc[1][t];
        yrow[out_row[0]] = rrow ? v + rrow[out_row[0]] : v;
      } else {
#pragma unroll
        for (int j = 0; j < R; ++j) {
          if (valid[j]) yrow[out_row[j]] = rrow ? acc[j][t] + rrow[out_row[j]] : acc[j][t];
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

/// Whether 1- and 2-token GEMVs of quantized types stage x through shared memory (default; set
/// LATTE_GEMV_STAGE_X=0 for the direct loads, to compare).
inline bool gemv_stage_x() {
  static const bool on = [] {
    const char* v = std::getenv("LATTE_GEMV_STAGE_X");
    return v == nullptr || std::string_view(v) != "0";
  }();
  return on;
}

template <GgmlType T>
void launch_gemv(const GemvParams& p, cudaStream_t stream) {
  using Tr = GemvTraits<T>;
  const int tokens = p.groups ? p.max_tokens_per_group : p.n_tokens;
  const int64_t warps_needed = p.weight_up ? p.n_rows : (p.n_rows + Tr::rows_per_warp - 1) / Tr::rows_per_warp;
  const int split = gemv_split(warps_needed * (p.groups ? p.max_groups : 1), p.k, Tr::step_values, Tr::warps);
  const int groups_per_block = Tr::warps / split;
  const dim3 grid(static_cast<unsigned>((warps_needed + groups_per_block - 1) / groups_per_block),
                  static_cast<unsigned>(p.groups ? p.max_groups : 1));
  const dim3 block(32 * Tr::warps);
  constexpr bool kCanStage = !quant::BlockTraits<T>::is_float;
  if (tokens <= 1) {
    if (kCanStage && gemv_stage_x()) {
      gemv_kernel<T, 1, kCanStage><<<grid, block, 0, stream>>>(p, split);
    } else {
      gemv_kernel<T, 1, false><<<grid, block, 0, stream>>>(p, split);
    }
  } else if (tokens <= 2) {
    if (kCanStage && gemv_stage_x()) {
      gemv_kernel<T, 2, kCanStage><<<grid, block, 0, stream>>>(p, split);
    } else {
      gemv_kernel<T, 2, false><<<grid, block, 0, stream>>>(p, split);
    }
  } else if (tokens <= 4) {
    gemv_kernel<T, 4, false><<<grid, block, 0, stream>>>(p, split);
  } else {
    gemv_kernel<T, 8, false><<<grid, block, 0, stream>>>(p, split);
  }
  LATTE_CUDA_CHECK_LAUNCH();
}

}  // namespace latte::cuda
