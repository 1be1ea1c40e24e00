// The 64-row MLA decode kernel, for many heads (V3: 128, a GLM-5 shard: 64). Same contract and plan
// as the 16-row kernel in mla_decode.cu; the work is laid out to read shared memory less, because at
// 64 rows per CTA the kernel is bound by ldmatrix traffic and the tensor pipe, not by HBM.
//
// One CTA (8 warps) per (64-row group, KV split, sequence); tiles of 32 positions, 2 cp.async stages.
//   1. Partial scores: warp w takes rows 32 * (w / 4) .. +31 (two 16-row blocks) x all 32 positions
//      over k-steps 9 * (w % 4) .. +8 of the 576 dims: every Q and K fragment it loads feeds 4 and 2
//      mma instead of 2 and 1. The four k-quarters go to shared memory as fp32 partial sums.
//   2. Softmax: 4 threads per row add the partials, scale, mask, update the row's running max / sum
//      (kept in shared memory) and write P (bf16) and the rescale factor.
//   3. O += P V: warp w owns output columns 64w .. 64w+63 of all 64 rows (128 fp32 registers), so each
//      V fragment is read from shared memory once per tile and feeds 4 mma.
// Per 32-position tile: ~315 KB of shared-memory traffic (36 KB copy-in, Q 74 KB, K 37 KB, partials
// 64 KB, P 36 KB, V 32 KB) for 4.5 MFLOP; the 16-row layout at 64 rows would move ~460 KB.
#include <cstdint>
#include "cuda/launch.cuh"
#include "cuda/mla_decode_tiles.cuh"

namespace latte::cuda::mla_decode_detail {
namespace {

constexpr int kRows = 64;
constexpr int kTileTokens = 32;
constexpr int kStages = 2;
constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kKGroups = 4;                                   // k-quarters of the 576 dims (warps per row half)
constexpr int kStepsPerGroup = kMlaCacheRow / 16 / kKGroups;  // 9 k-steps of 16 dims
constexpr int kPartialStride = kTileTokens + 8;               // floats per partial-score row (= 8 mod 32)
constexpr int kPStride = kTileTokens + 8;                     // bf16 per P row: 80 B, conflict-free ldmatrix
constexpr int kColsPerWarp = kMlaLatentDim / kWarps;          // 64 output columns per warp
constexpr int kOutTiles = kColsPerWarp / 8;                   // 8 n8 tiles per 16-row block
using Ring = TileRowRing<kTileTokens, kStages>;

constexpr size_t kQBytes = size_t{kRows} * kSmemRowElems * sizeof(bf16);
constexpr size_t kKvBytes = size_t{kStages} * kTileTokens * kSmemRowElems * sizeof(bf16);
constexpr size_t kPartialBytes = size_t{kKGroups} * kRows * kPartialStride * sizeof(float);
constexpr size_t kPBytes = size_t{kRows} * kPStride * sizeof(bf16);
constexpr size_t kRowStateBytes = 3 * kRows * sizeof(float);  // running max, running sum, rescale
constexpr size_t kSmemBytes = kQBytes + kKvBytes + kPartialBytes + kPBytes + kRowStateBytes + Ring::kBytes;
static_assert(kStepsPerGroup * kKGroups * 16 == kMlaCacheRow && kPartialStride % 32 == 8);
static_assert(kThreads == 4 * kRows, "the softmax step gives each row 4 threads");
static_assert((kQBytes + kKvBytes + kPartialBytes + kPBytes + kRowStateBytes) % 16 == 0);

__global__ void __launch_bounds__(kThreads, 1) mla_decode_wide_kernel(const Launch L) {
  if (!L.p.earlier_rows_ready) {
    wait_for_producers();  // see launch.cuh
    allow_dependents();
  }
  constexpr int T = kTileTokens;
  extern __shared__ __align__(16) unsigned char smem[];
  unsigned char* cursor = smem;
  bf16* q_s = reinterpret_cast<bf16*>(cursor);  // [64][kSmemRowElems]
  cursor += kQBytes;
  bf16* kv_s = reinterpret_cast<bf16*>(cursor);  // [kStages][32][kSmemRowElems]
  cursor += kKvBytes;
  float* partial_s = reinterpret_cast<float*>(cursor);  // [kKGroups][64][kPartialStride]
  cursor += kPartialBytes;
  bf16* p_s = reinterpret_cast<bf16*>(cursor);  // [64][kPStride]
  cursor += kPBytes;
  float* row_max = reinterpret_cast<float*>(cursor);  // [64] running max, log2 domain
  float* row_sum = row_max + kRows;                   // [64] running sum of bf16-rounded P
  float* row_rescale = row_sum + kRows;               // [64] this tile's exp2(old max - new max)
  cursor += kRowStateBytes;
  Ring ring(cursor);

  const int row_group = blockIdx.x;
  const int split = blockIdx.y;
  const CtaRange range(L, split, blockIdx.z, T);
  const int b = range.b;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int tq = lane % 4;
  const int row0 = row_group * kRows;

  // Softmax role: row `srow` of the CTA, positions 8 * spart .. +7 of each tile.
  const int srow = threadIdx.x / 4;
  const int spart = threadIdx.x % 4;
  const int srow_limit = range.visible_limit(L, row0 + srow);
  if (threadIdx.x < kRows) {
    row_max[threadIdx.x] = -INFINITY;
    row_sum[threadIdx.x] = 0.0f;
  }

  float o[4][kOutTiles][4];  // [row block][n8 tile][fragment], columns 64 * warp ..
  for (int rb = 0; rb < 4; ++rb) {
    for (int n = 0; n < kOutTiles; ++n) o[rb][n][0] = o[rb][n][1] = o[rb][n][2] = o[rb][n][3] = 0.0f;
  }

  // MlaDecodeParams::earlier_rows_ready: tile 0's earlier rows before the wait (as in mla_decode_kernel)
  const bool early = begin_tiles<T, kThreads>(L, range, ring, kv_s, 1);

  if (range.n_tiles > 0) {
    load_query_rows<kRows, kThreads>(q_s, L, b, row0);
    copy_first_tile<T, kThreads>(L, range, ring, kv_s, 0, early);
    mma::cp_async_commit();  // group 0: queries and tile 0

    const int row_half = warp / kKGroups;  // partial scores: rows 32 * row_half ..
    const int k_group = warp % kKGroups;   // ... over k-steps 9 * k_group ..
    for (int tile = 0; tile < range.n_tiles; ++tile) {
      if (tile + 1 < range.n_tiles) {
        load_kv_tile<T, kThreads>(kv_s + ((tile + 1) % kStages) * T * kSmemRowElems, ring.tile_offsets(tile + 1),
                                  L.p.cache.data);
      }
      mma::cp_async_commit();
      const Ring::Pending pending = ring.start(L, range, tile);
      mma::cp_async_wait<kStages - 1>();
      __syncthreads();
      const bf16* kv_tile = kv_s + (tile % kStages) * T * kSmemRowElems;

      // 1. Partial scores: 32 rows x 32 positions over 9 k-steps.
      {
        float acc[2][4][4] = {};  // [row block][n8 tile][fragment]
        const bf16* a_base = q_s + (row_half * 32 + (lane % 8) + ((lane / 8) % 2) * 8) * kSmemRowElems +
                             (lane / 16) * 8 + k_group * kStepsPerGroup * 16;
        const bf16* b_base = kv_tile + ((lane / 16) * 8 + (lane % 8)) * kSmemRowElems + ((lane / 8) % 2) * 8 +
                             k_group * kStepsPerGroup * 16;
#pragma unroll 3
        for (int ks = 0; ks < kStepsPerGroup; ++ks) {
          uint32_t a[2][4], bk[2][4];
          mma::ldmatrix_x4(a[0], a_base + ks * 16);
          mma::ldmatrix_x4(a[1], a_base + 16 * kSmemRowElems + ks * 16);
          mma::ldmatrix_x4(bk[0], b_base + ks * 16);                       // positions 0..15
          mma::ldmatrix_x4(bk[1], b_base + 16 * kSmemRowElems + ks * 16);  // positions 16..31
#pragma unroll
          for (int i = 0; i < 2; ++i) {
#pragma unroll
            for (int np = 0; np < 2; ++np) {
              mma::mma_bf16_16816(acc[i][2 * np], a[i], bk[np][0], bk[np][1]);
              mma::mma_bf16_16816(acc[i][2 * np + 1], a[i], bk[np][2], bk[np][3]);
            }
          }
        }
        float* part = partial_s + k_group * kRows * kPartialStride;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
#pragma unroll
          for (int n = 0; n < 4; ++n) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              const int row = row_half * 32 + i * 16 + g + 8 * half;
              *reinterpret_cast<float2*>(part + row * kPartialStride + n * 8 + 2 * tq) =
                  make_float2(acc[i][n][2 * half], acc[i][n][2 * half + 1]);
            }
          }
        }
      }
      __syncthreads();

      // 2. Softmax of row srow over positions 8 * spart .. +7.
      {
        const int32_t* positions = ring.tile_positions(tile);
        float s[8] = {};
#pragma unroll
        for (int kg = 0; kg < kKGroups; ++kg) {
          const float* part = partial_s + (kg * kRows + srow) * kPartialStride + spart * 8;
          const float4 lo = *reinterpret_cast<const float4*>(part);
          const float4 hi = *reinterpret_cast<const float4*>(part + 4);
          s[0] += lo.x;
          s[1] += lo.y;
          s[2] += lo.z;
          s[3] += lo.w;
          s[4] += hi.x;
          s[5] += hi.y;
          s[6] += hi.z;
          s[7] += hi.w;
        }
        float tile_max = -INFINITY;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const int pos = positions[spart * 8 + j];
          s[j] = pos >= 0 && pos < srow_limit ? s[j] * L.score_scale : -INFINITY;
          tile_max = fmaxf(tile_max, s[j]);
        }
        const float m_old = row_max[srow];
        const float m_new = fmaxf(m_old, mma::quad_max(tile_max));
        // P rounded to bf16 once (one conversion per pair); the sum adds the rounded values read back
        uint32_t pair[4];
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          pair[j] = mma::pack_bf16x2(mma::exp2_shifted(s[2 * j], m_new), mma::exp2_shifted(s[2 * j + 1], m_new));
          sum += __uint_as_float(pair[j] << 16);
          sum += __uint_as_float(pair[j] & 0xFFFF0000u);
        }
        const uint4 packed = make_uint4(pair[0], pair[1], pair[2], pair[3]);
        *reinterpret_cast<uint4*>(p_s + srow * kPStride + spart * 8) = packed;
        sum = mma::quad_sum(sum);  // every thread of the row has read row_max before this point
        if (spart == 0) {
          const float alpha = mma::exp2_rescale(m_old, m_new);
          row_rescale[srow] = alpha;
          row_sum[srow] = row_sum[srow] * alpha + sum;
          row_max[srow] = m_new;
        }
      }
      __syncthreads();

      // 3. O += P V for columns 64 * warp .. +63 of all 64 rows.
      {
#pragma unroll
        for (int rb = 0; rb < 4; ++rb) {
          const float alpha_lo = row_rescale[rb * 16 + g];
          const float alpha_hi = row_rescale[rb * 16 + g + 8];
#pragma unroll
          for (int n = 0; n < kOutTiles; ++n) {
            o[rb][n][0] *= alpha_lo;
            o[rb][n][1] *= alpha_lo;
            o[rb][n][2] *= alpha_hi;
            o[rb][n][3] *= alpha_hi;
          }
        }
        const bf16* pa_base = p_s + ((lane % 8) + ((lane / 8) % 2) * 8) * kPStride + (lane / 16) * 8;
        const bf16* v_base =
            kv_tile + (((lane / 8) % 2) * 8 + (lane % 8)) * kSmemRowElems + warp * kColsPerWarp + (lane / 16) * 8;
#pragma unroll
        for (int kk = 0; kk < T / 16; ++kk) {
          uint32_t pa[4][4];
#pragma unroll
          for (int rb = 0; rb < 4; ++rb) mma::ldmatrix_x4(pa[rb], pa_base + rb * 16 * kPStride + kk * 16);
#pragma unroll
          for (int np = 0; np < kOutTiles / 2; ++np) {
            uint32_t bv[4];
            mma::ldmatrix_x4_trans(bv, v_base + kk * 16 * kSmemRowElems + np * 16);
#pragma unroll
            for (int rb = 0; rb < 4; ++rb) {
              mma::mma_bf16_16816(o[rb][2 * np], pa[rb], bv[0], bv[1]);
              mma::mma_bf16_16816(o[rb][2 * np + 1], pa[rb], bv[2], bv[3]);
            }
          }
        }
      }
      ring.finish(L, range, tile, pending);
      __syncthreads();  // stage, partials, P, rescale factors and metadata settled for the next tile
    }
  } else {
    __syncthreads();  // the row state initialisation is visible to the epilogue
  }

  // Epilogue: rows rb * 16 + g (+8), columns 64 * warp + 8n + 2tq.
#pragma unroll
  for (int rb = 0; rb < 4; ++rb) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int local = rb * 16 + g + 8 * half;
      const int row = row0 + local;
      if (row >= L.rows_total) continue;
      const float l = row_sum[local];
      const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
      for (int n = 0; n < kOutTiles; ++n) {
        store_output_pair(L, b, split, row, warp * kColsPerWarp + n * 8 + 2 * tq, o[rb][n][2 * half] * inv_l,
                          o[rb][n][2 * half + 1] * inv_l);
      }
      if (warp == 0 && tq == 0) store_lse(L, b, split, row, row_max[local], l);
    }
  }
}

}  // namespace

KernelInfo wide_kernel_info() { return {&mla_decode_wide_kernel, kRows, kTileTokens, kThreads, kSmemBytes}; }

}  // namespace latte::cuda::mla_decode_detail
