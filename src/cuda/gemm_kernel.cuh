// The fused dequantize + mma.sync GEMM behind gemm_quant() (see gemm_quant.hpp). Instantiated per type
// family in gemm_quant_*.cu.
//
// CTA tile 64 (rows of A) x 64 (weight rows) x 128 (k), 4 warps in 2 x 2, each warp 32 x 32 with
// m16n8k16 bf16 MMAs fed by ldmatrix.x4. Per k-tile: A (bf16) and the raw weight bytes of the tile
// (the blocks covering its 128 values: a K-quant super-block, or four 32-value blocks) are copied with
// cp.async, two stages deep; the raw bytes keep their global misalignment (rows are only 2-byte
// aligned in GGUF), each thread decodes two 32-value units into the bf16 B tile, then the warps multiply.
// bf16 weights skip the decode: cp.async straight into a double-buffered B tile.
//
// Per k-tile: 2 * 64 * 64 * 128 = 1 MFLOP of MMA against 8192 dequantized values: the decode costs
// about as many issue slots as the MMAs at 64 rows, so the kernel reaches roughly half of the
// mma.sync rate; see BENCHMARKS.md.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <mutex>
#include <set>

#include "cuda/check.hpp"
#include "cuda/gemm_quant.hpp"
#include "cuda/launch.cuh"
#include "cuda/quant_decode.cuh"

namespace latte::cuda {

/// Compile-time shape of the fused GEMM for weight type T.
template <GgmlType T>
struct GemmTraits {
  using Block = quant::BlockTraits<T>;
  static constexpr bool direct_bf16 = T == GgmlType::bf16;  ///< weights already bf16: no decode
  static constexpr int bm = gemm_tile_rows;                 ///< rows of A per CTA
  static constexpr int bn = 64;                             ///< weight rows per CTA
  static constexpr int bk = 128;                            ///< k per tile
  static constexpr int threads = 128;
  static constexpr int lds = bk + 8;  ///< bf16 elements per smem row (16-byte pad: no bank conflicts)
  /// Raw bytes of one weight row per k-tile: the blocks overlapping 128 values.
  static constexpr int segment_bytes = Block::values >= bk ? Block::bytes : bk / Block::values * Block::bytes;
  /// Room for a misaligned start, in whole 16-byte chunks.
  static constexpr int raw_stride = direct_bf16 ? 0 : (segment_bytes + 15 + 15) / 16 * 16;
  static constexpr int a_stage_bytes = bm * lds * 2;
  static constexpr int b_tile_bytes = bn * lds * 2;
  static constexpr int raw_stage_bytes = bn * raw_stride;
  static constexpr int smem_bytes =
      2 * a_stage_bytes + (direct_bf16 ? 2 * b_tile_bytes : b_tile_bytes + 2 * raw_stage_bytes);
};

__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, int src_bytes) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

template <GgmlType T>
__global__ void __launch_bounds__(128) gemm_kernel(const QuantGemmParams p) {
  wait_for_producers();  // see launch.cuh
  allow_dependents();
  using Tr = GemmTraits<T>;
  using Block = quant::BlockTraits<T>;
  extern __shared__ __align__(16) uint8_t smem[];
  auto* a_smem = reinterpret_cast<__nv_bfloat16*>(smem);                          // [2][bm][lds]
  auto* b_smem = reinterpret_cast<__nv_bfloat16*>(smem + 2 * Tr::a_stage_bytes);  // [1 or 2][bn][lds]
  uint8_t* raw_smem = smem + 2 * Tr::a_stage_bytes + Tr::b_tile_bytes;            // [2][bn][raw_stride]

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32, lane = tid % 32;

  // ---- which rows (of A / C) and which weight rows ----
  int group = 0, row_begin, row_end;
  if (p.tiles != nullptr) {
    if (static_cast<int>(blockIdx.x) >= *p.n_tiles) return;
    const GemmTile tile = p.tiles[blockIdx.x];
    group = tile.group;
    row_begin = tile.row_begin;
    row_end = min(tile.row_end, tile.row_begin + Tr::bm);
  } else {
    row_begin = static_cast<int>(blockIdx.x) * Tr::bm;
    row_end = min(row_begin + Tr::bm, p.m);
  }
  const int n_begin = static_cast<int>(blockIdx.y) * Tr::bn;
  const int64_t row_bytes = static_cast<int64_t>(p.k) / Block::values * Block::bytes;
  const uint8_t* w_lo = static_cast<const uint8_t*>(p.weight);
  const uint8_t* w_hi = w_lo + p.weight_bytes;
  const uint8_t* w_matrix = w_lo + static_cast<int64_t>(group) * p.matrix_stride_bytes;
  const int n_ktiles = (p.k + Tr::bk - 1) / Tr::bk;

  // ---- async copies of k-tile kt into stage s ----
  auto issue_tile = [&](int kt, int s) {
    const int k0 = kt * Tr::bk;
    // A: bm rows x bk bf16 = bm * 16 chunks of 16 bytes
    __nv_bfloat16* a_dst = a_smem + s * Tr::bm * Tr::lds;
    for (int c = tid; c < Tr::bm * (Tr::bk / 8); c += Tr::threads) {
      const int r = c / (Tr::bk / 8), kc = c % (Tr::bk / 8);
      const int m = row_begin + r;
      const int k = k0 + 8 * kc;
      const bool ok = m < row_end && k < p.k;
      const int64_t a_row = ok ? (p.a_rows ? p.a_rows[m] : m) : 0;
      cp_async_16(a_dst + r * Tr::lds + 8 * kc, p.a + a_row * p.lda + (ok ? k : 0), ok ? 16 : 0);
    }
    if constexpr (Tr::direct_bf16) {
      __nv_bfloat16* b_dst = b_smem + s * Tr::bn * Tr::lds;
      for (int c = tid; c < Tr::bn * (Tr::bk / 8); c += Tr::threads) {
        const int r = c / (Tr::bk / 8), kc = c % (Tr::bk / 8);
        const int n = n_begin + r;
        const int k = k0 + 8 * kc;
        const bool ok = n < p.n_rows && k < p.k;
        const uint8_t* src = ok ? w_matrix + n * row_bytes + 2 * k : w_lo;
        cp_async_16(b_dst + r * Tr::lds + 8 * kc, src, ok ? 16 : 0);
      }
    } else {
      // raw blocks covering values [k0, k0 + bk) of each weight row, at their global misalignment
      const int first_block = k0 / Block::values;
      const int last_block = (min(k0 + Tr::bk, p.k) + Block::values - 1) / Block::values;
      const int seg_bytes = (last_block - first_block) * Block::bytes;
      uint8_t* raw_dst = raw_smem + s * Tr::raw_stage_bytes;
      constexpr int chunks_per_row = Tr::raw_stride / 16;
      for (int c = tid; c < Tr::bn * chunks_per_row; c += Tr::threads) {
        const int r = c / chunks_per_row, j = c % chunks_per_row;
        const int n = n_begin + r;
        const uint8_t* seg = w_matrix + n * row_bytes + static_cast<int64_t>(first_block) * Block::bytes;
        const uint8_t* base = seg - (reinterpret_cast<uintptr_t>(seg) & 15);
        const uint8_t* src = base + 16 * j;
        const int misalign = static_cast<int>(seg - base);
        const bool ok = n < p.n_rows && 16 * j < misalign + seg_bytes;
        const int64_t room = w_hi - src;  // the stack's last chunk may be partial
        const int bytes = ok ? static_cast<int>(room < 16 ? room : 16) : 0;
        cp_async_16(raw_dst + r * Tr::raw_stride + 16 * j, bytes > 0 ? src : w_lo, bytes > 0 ? bytes : 0);
      }
    }
  };

  // ---- dequantize stage s of k-tile kt into the bf16 B tile ----
  auto decode_tile = [&](int kt, int s) {
    const int k0 = kt * Tr::bk;
    const int first_block = k0 / Block::values;
    const int unit0 = (k0 - first_block * Block::values) / 32;  // unit of the segment where the tile starts
    const uint8_t* raw = raw_smem + s * Tr::raw_stage_bytes;
#pragma unroll
    for (int i = 0; i < Tr::bn * (Tr::bk / 32) / Tr::threads; ++i) {
      const int idx = tid + i * Tr::threads;
      const int r = idx / (Tr::bk / 32), u = idx % (Tr::bk / 32);
      const int n = n_begin + r;
      uint4* dst = reinterpret_cast<uint4*>(b_smem + r * Tr::lds + 32 * u);
      if (n < p.n_rows && k0 + 32 * u < p.k) {
        const uint8_t* seg = w_matrix + n * row_bytes + static_cast<int64_t>(first_block) * Block::bytes;
        const int misalign = static_cast<int>(reinterpret_cast<uintptr_t>(seg) & 15);
        float v[32];
        quant::decode_values<T, 2>(raw + r * Tr::raw_stride + misalign, unit0 + u, v);
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          dst[c] = make_uint4(pack_bf16x2(v[8 * c], v[8 * c + 1]), pack_bf16x2(v[8 * c + 2], v[8 * c + 3]),
                              pack_bf16x2(v[8 * c + 4], v[8 * c + 5]), pack_bf16x2(v[8 * c + 6], v[8 * c + 7]));
        }
      } else {
#pragma unroll
        for (int c = 0; c < 4; ++c) dst[c] = make_uint4(0, 0, 0, 0);
      }
    }
  };

  float acc[2][4][4];
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int nj = 0; nj < 4; ++nj)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][nj][e] = 0.0f;

  const int wm = warp / 2, wn = warp % 2;  // warp tile: rows 32 wm.., weight rows 32 wn..
  // m16 blocks of this warp holding a row of the tile: a MoE tile of a decode-sized batch has a few rows
  // of its expert (128 tokens x 6 of 64 experts: ~12), so most blocks multiply only zero rows; theirs are
  // skipped (warp-uniform: the ldmatrix and mma of a warp run together). Zero rows' results are never stored.
  const int tile_rows = row_end - row_begin;
  const bool live[2] = {32 * wm < tile_rows, 32 * wm + 16 < tile_rows};

  issue_tile(0, 0);
  cp_async_commit();
  for (int kt = 0; kt < n_ktiles; ++kt) {
    const int s = kt % 2;
    if (kt + 1 < n_ktiles) {
      issue_tile(kt + 1, s ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if constexpr (!Tr::direct_bf16) {
      decode_tile(kt, s);
      __syncthreads();
    }
    const __nv_bfloat16* a_tile = a_smem + s * Tr::bm * Tr::lds;
    const __nv_bfloat16* b_tile = b_smem + (Tr::direct_bf16 ? s * Tr::bn * Tr::lds : 0);
#pragma unroll
    for (int kk = 0; kk < Tr::bk; kk += 16) {
      if (!live[0]) break;  // no row of the tile in this warp's 32
      uint32_t a_frag[2][4], b_frag[2][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        const int row = 32 * wm + 16 * mi + (lane % 8) + 8 * ((lane / 8) % 2);
        if (live[mi]) ldmatrix_x4(a_frag[mi], a_tile + row * Tr::lds + kk + 8 * (lane / 16));
      }
#pragma unroll
      for (int nb = 0; nb < 2; ++nb) {  // 16 weight rows each: n-fragments 2 nb and 2 nb + 1
        const int row = 32 * wn + 16 * nb + (lane % 8) + 8 * (lane / 16);
        ldmatrix_x4(b_frag[nb], b_tile + row * Tr::lds + kk + 8 * ((lane / 8) % 2));
      }
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        if (!live[mi]) continue;
#pragma unroll
        for (int nj = 0; nj < 4; ++nj)
          mma_bf16_16816(acc[mi][nj], a_frag[mi], b_frag[nj / 2][2 * (nj % 2)], b_frag[nj / 2][2 * (nj % 2) + 1]);
      }
    }
    __syncthreads();
  }

  // ---- epilogue: c0,c1 at (row g, cols 2t, 2t+1), c2,c3 at (row g+8, ...) ----
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int m = row_begin + 32 * wm + 16 * mi + g + 8 * half;
      if (m >= row_end) continue;
      float* c_row = p.c + static_cast<int64_t>(m) * p.ldc;
      const float* r_row = p.residual ? p.residual + static_cast<int64_t>(m) * p.ldc : nullptr;
#pragma unroll
      for (int nj = 0; nj < 4; ++nj) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int n = n_begin + 32 * wn + 8 * nj + 2 * t + e;
          if (n < p.n_rows) {
            const float v = acc[mi][nj][2 * half + e];
            c_row[n] = r_row ? v + r_row[n] : v;
          }
        }
      }
    }
  }
}

/// Raises gemm_kernel<T>'s dynamic shared memory limit once per device, so that later launches make
/// no runtime call besides the launch itself (CUDA-graph capture friendly).
template <GgmlType T>
void allow_gemm_shared_memory() {
  static std::mutex mutex;
  static std::set<int> devices;
  int device = 0;
  LATTE_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard lock(mutex);
  if (devices.count(device)) return;
  LATTE_CUDA_CHECK(
      cudaFuncSetAttribute(gemm_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, GemmTraits<T>::smem_bytes));
  devices.insert(device);
}

template <GgmlType T>
void launch_gemm(const QuantGemmParams& p, cudaStream_t stream) {
  using Tr = GemmTraits<T>;
  allow_gemm_shared_memory<T>();
  const int m_tiles = p.tiles ? p.max_tiles : (p.m + Tr::bm - 1) / Tr::bm;
  const dim3 grid(static_cast<unsigned>(m_tiles), static_cast<unsigned>((p.n_rows + Tr::bn - 1) / Tr::bn));
  launch_kernel(gemm_kernel<T>, grid, Tr::threads, Tr::smem_bytes, stream, p);
}

}  // namespace latte::cuda
