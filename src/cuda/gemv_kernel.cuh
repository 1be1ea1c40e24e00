// The GEMV kernel template behind gemv_quant() (see gemv_quant.hpp). Included by the per-type-family
// translation units gemv_quant_*.cu, which instantiate launch_gemv<T> for their types.
//
// Work split: a row group is 2 rows (dense: rows 2p and 2p+1; gated: row p of W_gate and of W_up), owned
// by `split` warps of the block (1, 2 or 4: the launcher picks more when the matrix is too small to give
// every SM several warps); a block's warps own a tile of row groups. K is walked in steps of 1024
// values; warp j of a group takes steps j, j+split, ...; lane l decodes values [32 l, 32 l + 32) of a
// step. Quantized rows are staged into shared memory with coalesced 16-byte loads and realigned there
// (row_staging), then decoded into byte codes (quant_decode). x (GemvXMode below): by default each
// block stages its tokens' whole x rows into shared memory once and walks several tiles (a grid of
// one wave of resident blocks); per-warp step staging and direct float4 loads remain for comparison and
// for rows too long for shared memory. Each x value read serves both rows. Sums are fp32; the warp
// reduces, then the group's warps through shared memory. Launched overlapped with the previous kernel
// (launch.cuh): dense launches request their first weights before waiting for x.
//
// Measured on an H200 (BENCHMARKS.md): with direct x loads the kernel was bound by the L1 (97% busy at
// ~25% of DRAM bandwidth on the output head); per-warp x staging made single-sequence decode 13-15%
// faster, whole rows per block another 9%. Variants measured slower and dropped: issuing the next
// step's loads before decoding the current one (twice), 8 rows per warp with x held in registers
// (fewer warps, each working serially), a grid of 2 or 8 waves instead of one.
//
// Cost per weight value at 1 token: ~1 byte-permute + 1 add (exact code->float) + 1 FMA, so Q4_K
// needs ~29 values/SM-clock at 4.3 TB/s: close to the issue limit, see BENCHMARKS.md.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/environment.hpp"
#include "cuda/check.hpp"
#include "cuda/device_caps.hpp"
#include "cuda/gemv_f16_kernel.cuh"
#include "cuda/gemv_mma_kernel.cuh"
#include "cuda/gemv_quant.hpp"
#include "cuda/gemv_x8_kernel.cuh"
#include "cuda/launch.cuh"
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

/// How the kernel reads x (XMode).
///  - kXDirect: lane l reads its 32 consecutive values x[32 l .. 32 l + 31] of a step as float4 loads
///    from global/L1 (floats, and the comparison path). The 32 lanes of one load touch 32 cache lines.
///  - kXWarp: each warp stages its step's values with coalesced loads into shared memory (1-2 tokens).
///    Each warp reads 4 KB of x per token from L2 for ~1.2 KB of Q4_K weights.
///  - kXRows: the block stages its tokens' whole x rows into shared memory once, then walks several row
///    groups (a tile of 4 warps' rows each) over them: x comes from L2 once per block.
/// Staged values are stored rotated so that each lane reads its 32 consecutive values without bank
/// conflicts: float4 g of a 1024-value step (lane g / 8's j = g % 8) lives at 8 (g / 8) + (g + g / 8) % 8.
enum GemvXMode : int { kXDirect = 0, kXWarp = 1, kXRows = 2 };

__device__ __forceinline__ int staged_x_slot(int g) { return (g & ~7) | ((g + (g >> 3)) & 7); }

/// Launch-time shape beyond GemvParams: the group's warps (split), the row-group tiles of one matrix
/// (each block walks tiles blockIdx.x, blockIdx.x + gridDim.x, ...) and kXRows' floats per staged row.
struct GemvShape {
  int split = 1;
  int tiles = 1;
  int x_row_floats = 0;
};

template <GgmlType T, int NT, int XMode, int MinBlocks = 4>
__global__ void __launch_bounds__(128, MinBlocks) gemv_kernel(const GemvParams p, const GemvShape shape) {
  using Tr = GemvTraits<T>;
  using Block = quant::BlockTraits<T>;
  constexpr int R = Tr::rows_per_warp;
  constexpr int CPL = Tr::chunks_per_lane;
  static_assert(XMode == kXDirect || !Block::is_float, "x staging: quantized types");
  static_assert(XMode != kXWarp || NT <= 2, "x staging per warp: at most 2 tokens (shared memory)");
  __shared__ __align__(16) uint8_t stage[Block::is_float ? 1 : Tr::warps][R][Block::is_float ? 16 : Tr::stage_bytes];
  __shared__ __align__(16) float4 x_stage[XMode == kXWarp ? Tr::warps : 1][XMode == kXWarp ? NT : 1]
                                         [XMode == kXWarp ? Tr::step_values / 4 : 1];
  extern __shared__ __align__(16) float4 x_rows[];  // kXRows: [NT][shape.x_row_floats / 4]
  __shared__ float partial[Tr::warps][R][NT];       // split > 1: each warp's sums, reduced by the group's first warp

  const int split = shape.split;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int part = warp % split;  // which of the group's warps: takes steps part, part + split, ...
  const bool gathered = p.groups != nullptr;
  // Gathered launches read the group table another kernel wrote: wait for it first. Dense launches
  // only read their weights before the wait (below).
  if (gathered) {
    wait_for_producers();
    allow_dependents();
  }

  // ---- which tokens and which matrix ----
  int matrix = 0;
  int count = p.n_tokens;
  int x_row[NT], y_row[NT];
  if (gathered) {
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
  if (count <= 0) {
    if (!gathered) wait_for_producers();  // every block waits before it ends (launch.cuh)
    return;
  }

  // ---- which rows (per tile) ----
  const bool gated = p.weight_up != nullptr;
  const int64_t row_bytes = static_cast<int64_t>(p.k) / Block::values * Block::bytes;
  const uint8_t* lo[R];
  const uint8_t* hi[R];
  const uint8_t* wrow[R];
  int out_row[R];
  bool valid[R];
#pragma unroll
  for (int j = 0; j < R; ++j) {
    lo[j] = static_cast<const uint8_t*>(gated && j == 1 ? p.weight_up : p.weight);
    hi[j] = lo[j] + p.weight_bytes;
  }
  auto select_rows = [&](int tile) {
    const int pair = tile * (Tr::warps / split) + warp / split;
#pragma unroll
    for (int j = 0; j < R; ++j) {
      out_row[j] = gated ? pair : R * pair + j;
      valid[j] = out_row[j] < p.n_rows;
      wrow[j] = lo[j] + static_cast<int64_t>(matrix) * p.matrix_stride_bytes + out_row[j] * row_bytes;
    }
  };

  const int stride = split * Tr::step_values;
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

  // Dense launches: the first tile's first weights are requested before waiting for x (weights are
  // never written by a step's kernels), so their latency overlaps the previous kernel's tail.
  select_rows(static_cast<int>(blockIdx.x));
  [[maybe_unused]] bool prefetched = false;
  if (!gathered) {
    if constexpr (!Block::is_float) {
      if (valid[0] && part * Tr::step_values < p.k) {
        issue(part * Tr::step_values);
        prefetched = true;
      }
    }
    wait_for_producers();
    allow_dependents();
  }

  if constexpr (XMode == kXRows) {
    // the block's tokens' x rows, once: coalesced float4 loads, rotated within each 1024-value step
    const int row4 = shape.x_row_floats / 4;
    for (int t = 0; t < count; ++t) {
      const float4* src = reinterpret_cast<const float4*>(p.x + x_row[t] * p.x_stride);
      for (int g = static_cast<int>(threadIdx.x); 4 * g < p.k; g += 32 * Tr::warps) {
        x_rows[t * row4 + (g & ~255) + staged_x_slot(g & 255)] = __ldg(src + g);
      }
    }
    __syncthreads();
  }

  for (int tile = static_cast<int>(blockIdx.x); tile < shape.tiles; tile += static_cast<int>(gridDim.x)) {
    if (tile != static_cast<int>(blockIdx.x)) select_rows(tile);
    float acc[R][NT];
#pragma unroll
    for (int j = 0; j < R; ++j)
#pragma unroll
      for (int t = 0; t < NT; ++t) acc[j][t] = 0.0f;

    const int k_first = valid[0] ? part * Tr::step_values : p.k;
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
              for (int j = 0; j < R; ++j)
                acc[j][t] += w[j][0] * xv.x + w[j][1] * xv.y + w[j][2] * xv.z + w[j][3] * xv.w;
            }
          }
        }
      } else {
        // ---- this step of both rows into shared memory, realigned ----
        if (!prefetched) issue(k0);
        prefetched = false;
        if constexpr (XMode == kXWarp) {
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
          [[maybe_unused]] const int row_slot = XMode == kXRows ? (k0 >> 2) + 8 * lane : 0;
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
                  if constexpr (XMode == kXRows) {
                    xv = x_rows[t * (shape.x_row_floats / 4) + row_slot + ((i + lane) & 7)];
                  } else if constexpr (XMode == kXWarp) {
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
    bool writes = valid[0];
    if (split > 1) {
      // valid[0] is uniform over the group's warps, and every warp of the block reaches both barriers
      if (lane == 0) {
#pragma unroll
        for (int j = 0; j < R; ++j)
#pragma unroll
          for (int t = 0; t < NT; ++t) partial[warp][j][t] = acc[j][t];
      }
      __syncthreads();
      writes = writes && part == 0;
      if (writes) {
        for (int w = warp + 1; w < warp + split; ++w) {
#pragma unroll
          for (int j = 0; j < R; ++j)
#pragma unroll
            for (int t = 0; t < NT; ++t) acc[j][t] += partial[w][j][t];
        }
      }
      __syncthreads();  // partial is free for the next tile
    }
    if (writes && lane == 0 && p.y_bf16 != nullptr) {
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        if (t >= count) continue;
        __nv_bfloat16* yrow = p.y_bf16 + y_row[t] * p.y_stride;
        if (gated) {
          yrow[out_row[0]] = __float2bfloat16_rn(silu(acc[0][t]) * acc[1][t]);
        } else {
#pragma unroll
          for (int j = 0; j < R; ++j) {
            if (valid[j]) yrow[out_row[j]] = __float2bfloat16_rn(acc[j][t]);
          }
        }
      }
    } else if (writes && lane == 0) {
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

/// How GEMVs of quantized types read x (LATTE_GEMV_X = rows | warp | direct; default rows, which falls
/// back to warp for 1-2 tokens and direct for more when the rows do not fit the shared-memory budget).
/// LATTE_GEMV_STAGE_X=0 is the same as direct.
inline GemvXMode gemv_x_mode() {
  static const GemvXMode mode = [] {
    if (!latte::detail::env_flag("LATTE_GEMV_STAGE_X", true)) return kXDirect;
    const std::string s = latte::detail::env_choice("LATTE_GEMV_X", "rows");
    return s == "direct" ? kXDirect : s == "warp" ? kXWarp : kXRows;
  }();
  return mode;
}

/// Resident blocks of the GEMV per SM wave cap for kXRows (LATTE_GEMV_WAVES, default 1): the grid has at
/// most waves x SMs x resident blocks per SM, and each block walks tiles/grid tiles.
inline double gemv_waves() {
  static const double waves = latte::detail::env_real("LATTE_GEMV_WAVES", 1.0);
  return waves;
}

/// 1-token GEMVs of the K-quants (whose decode fits 80 registers without real spills) are compiled for 6
/// resident blocks per SM instead of 4: 24 warps to hide the latency of each warp's load -> decode -> FMA
/// chain instead of 16 (the 4-block build measured 287.6 t/s at tg128 against 293.4, BENCHMARKS.md,
/// second decode round).
template <GgmlType T>
inline constexpr bool kGemvSixBlocks = T == GgmlType::q4_k || T == GgmlType::q5_k || T == GgmlType::q6_k;

/// Shared memory kXRows may take for x (NT rows of k floats).
inline constexpr int kGemvRowsMaxBytes = 64 * 1024;

/// Blocks of `kernel` (128 threads, `smem` dynamic bytes) resident on one SM of the current device.
int gemv_resident_blocks(const void* kernel, int smem);

template <GgmlType T, int NT, int XMode, int MinBlocks = 4>
void launch_gemv_as(const GemvParams& p, GemvShape shape, dim3 grid, cudaStream_t stream) {
  auto* kernel = gemv_kernel<T, NT, XMode, MinBlocks>;
  size_t smem = 0;
  if constexpr (XMode == kXRows) {
    smem = static_cast<size_t>(NT) * shape.x_row_floats * sizeof(float);
    // static + dynamic shared memory may pass the 48 KB a launch gets without asking
    LATTE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    // At most `waves` waves of resident blocks; each walks an equal number of tiles.
    int device = 0;
    LATTE_CUDA_CHECK(cudaGetDevice(&device));
    const double resident = static_cast<double>(device_caps(device).sm_count) *
                            gemv_resident_blocks(reinterpret_cast<const void*>(kernel), static_cast<int>(smem));
    const int64_t cap = std::max<int64_t>(1, static_cast<int64_t>(gemv_waves() * resident / grid.y));
    const int64_t per_block = (shape.tiles + cap - 1) / cap;
    grid.x = static_cast<unsigned>((shape.tiles + per_block - 1) / per_block);
  }
  launch_kernel(kernel, grid, dim3(32 * GemvTraits<T>::warps), smem, stream, p, shape);
}

template <GgmlType T>
void launch_gemv(const GemvParams& p, cudaStream_t stream) {
  using Tr = GemvTraits<T>;
  if (gemv_mma_applies<T>(p)) {
    if (gemv_f16_applies<T>(p)) return launch_gemv_f16<T>(p, stream);
    return launch_gemv_mma<T>(p, stream);
  }
  if (gemv_x8_applies<T>(p)) return launch_gemv_x8<T>(p, stream);
  const int tokens = p.groups ? p.max_tokens_per_group : p.n_tokens;
  const int64_t warps_needed = p.weight_up ? p.n_rows : (p.n_rows + Tr::rows_per_warp - 1) / Tr::rows_per_warp;
  GemvShape shape;
  shape.split = gemv_split(warps_needed * (p.groups ? p.max_groups : 1), p.k, Tr::step_values, Tr::warps);
  const int groups_per_block = Tr::warps / shape.split;
  shape.tiles = static_cast<int>((warps_needed + groups_per_block - 1) / groups_per_block);
  shape.x_row_floats = p.k;
  const dim3 grid(static_cast<unsigned>(shape.tiles), static_cast<unsigned>(p.groups ? p.max_groups : 1));
  const int nt = tokens <= 1 ? 1 : tokens <= 2 ? 2 : tokens <= 4 ? 4 : 8;
  GemvXMode mode = quant::BlockTraits<T>::is_float ? kXDirect : gemv_x_mode();
  if (mode == kXRows && static_cast<int64_t>(nt) * p.k * 4 > kGemvRowsMaxBytes) mode = kXWarp;
  if (mode == kXWarp && nt > 2) mode = kXDirect;
  if constexpr (quant::BlockTraits<T>::is_float) {
    switch (nt) {
      case 1:
        return launch_gemv_as<T, 1, kXDirect>(p, shape, grid, stream);
      case 2:
        return launch_gemv_as<T, 2, kXDirect>(p, shape, grid, stream);
      case 4:
        return launch_gemv_as<T, 4, kXDirect>(p, shape, grid, stream);
      default:
        return launch_gemv_as<T, 8, kXDirect>(p, shape, grid, stream);
    }
  } else {
    switch (nt) {
      case 1:
        if (mode == kXRows) {
          if constexpr (kGemvSixBlocks<T>) {
            return launch_gemv_as<T, 1, kXRows, 6>(p, shape, grid, stream);
          } else {
            return launch_gemv_as<T, 1, kXRows>(p, shape, grid, stream);
          }
        }
        if (mode == kXWarp) return launch_gemv_as<T, 1, kXWarp>(p, shape, grid, stream);
        return launch_gemv_as<T, 1, kXDirect>(p, shape, grid, stream);
      case 2:
        if (mode == kXRows) return launch_gemv_as<T, 2, kXRows>(p, shape, grid, stream);
        if (mode == kXWarp) return launch_gemv_as<T, 2, kXWarp>(p, shape, grid, stream);
        return launch_gemv_as<T, 2, kXDirect>(p, shape, grid, stream);
      case 4:
        if (mode == kXRows) return launch_gemv_as<T, 4, kXRows>(p, shape, grid, stream);
        return launch_gemv_as<T, 4, kXDirect>(p, shape, grid, stream);
      default:
        if (mode == kXRows) return launch_gemv_as<T, 8, kXRows>(p, shape, grid, stream);
        return launch_gemv_as<T, 8, kXDirect>(p, shape, grid, stream);
    }
  }
}

}  // namespace latte::cuda
