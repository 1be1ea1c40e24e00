// Flash-attention prefill (FlashAttention-2 style); see flash_prefill.hpp for the contract.
//
// One CTA (4 warps) per (query tile, head, key split). At the DeepSeek dims (192/128) a warp owns 32 query
// rows (two m16 blocks, 128-query tiles), so every K and V fragment read through ldmatrix feeds two MMAs
// (ptxas spills ~40 registers there, and it is still the fastest variant measured); at GLM-5's 256/256 a
// warp owns 16 rows (64-query tiles: the 32 output tiles need the registers). Key tiles of 64.
// Per key tile: S = Q K^T (mma.m16n8k16, Q and K from shared memory), causal / sparse mask, online softmax
// in registers, P rounded to bf16 once and reused from the accumulators as the A operand of O += P V.
// Single K and V buffers: V_j streams in while S_j is computed, K_{j+1} while P_j V_j is.
// Query tiles are launched heaviest (latest) first so the causal tail does not straggle.
// With a workspace, the keys of a (tile, head) are split into ranges of whole key tiles, each its own CTA;
// each writes its normalised partial output and LSE, and split_kv_combine merges them (flash-decoding).
// History on an H200, 512 queries of 16 heads at depth 16384: 1.31 ms unsplit (128 CTAs, one per SM);
// 829 us split; 782 / 864 us with two K/V buffers and Q in registers at 16 rows per warp (two calls); at
// 32 rows per warp 771 us with 32-key tiles, 762 us with those double-buffered, 689 us with 64-key tiles,
// 669 us with P converted to bf16 once per pair.
//
// Back-of-envelope, DeepSeek-V3 dims (N=128, 192/128), 512 queries at depth 16384 (H200):
//   FLOPs = 2 * 128 * 512 * 16640 * 320 = 0.70 TFLOP -> ~1.1 ms at ~650 TFLOP/s (mma.sync ceiling);
//   unique K/V bytes = 16896 * 128 * 640 = 1.38 GB -> 0.32 ms: compute-bound.
#include "cuda/flash_prefill.hpp"

#include "cuda/bf16_mma.cuh"
#include "cuda/check.hpp"
#include "cuda/chunk_deal.cuh"
#include "cuda/kv_cache_layout.cuh"
#include "cuda/launch.cuh"
#include "cuda/split_kv_combine.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

namespace latte::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

/// kMi_: m16 row blocks per warp (16 or 32 query rows: at 32 each K and V fragment feeds two MMAs).
template <int kDimQk_, int kDimV_, int kMi_>
struct FlashPrefillTraits {
  static constexpr int kDimQk = kDimQk_;
  static constexpr int kDimV = kDimV_;
  static constexpr int kMi = kMi_;
  static constexpr int kWarps = 4;
  static constexpr int kBlockM = 16 * kMi * kWarps;  // queries per CTA
  static constexpr int kBlockN = 64;                 // keys per tile
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kQkSteps = kDimQk / 16;
  static constexpr int kScoreTiles = kBlockN / 8;  // n8 tiles of S per m16 block
  static constexpr int kOutTiles = kDimV / 8;      // n8 tiles of O per m16 block
  static constexpr int kQkRow = kDimQk + 8;        // padded smem rows: conflict-free ldmatrix
  static constexpr int kVRow = kDimV + 8;
  static constexpr size_t kQBytes = size_t{kBlockM} * kQkRow * sizeof(bf16);
  static constexpr size_t kKBytes = size_t{kBlockN} * kQkRow * sizeof(bf16);
  static constexpr size_t kVBytes = size_t{kBlockN} * kVRow * sizeof(bf16);
  static constexpr size_t kSmemBytes = kQBytes + kKBytes + kVBytes;
  static_assert(kDimQk % 16 == 0 && kDimV % 16 == 0);
};

/// Copies kRows rows of kDim bf16 into shared memory rows of kSmemRow elements; row r is cache position
/// first + r of head h (zero-filled at and past `limit`).
template <int kDim, int kSmemRow, int kThreads, int kRows>
__device__ __forceinline__ void load_cache_rows(bf16* dst, const PagedRows<const bf16>& cache, int batch, int h,
                                                int first, int limit) {
  using Deal = ChunkDeal<kRows, kDim / 8, kThreads>;
  const int col = Deal::first_element();
#pragma unroll
  for (int w = 0; w < Deal::kWaves; ++w) {
    const int r = Deal::row(w);
    const int pos = first + r;
    const bool valid = pos < limit;
    // a zero-filled row reads nothing; its addresses stay inside the cache's first row
    const bf16* src =
        (valid ? cache.data + paged_rows_offset(cache, batch, pos) + h * cache.head_stride : cache.data) + col;
    Deal::copy_row(dst + r * kSmemRow + col, src, valid);
  }
}

/// One launch: the parameters and the key split (blockIdx.z) of each CTA.
struct PrefillLaunch {
  FlashPrefillParams p;
  int splits;           ///< CTAs per (query tile, head) along the keys
  int split_keys;       ///< keys per split, a multiple of the key tile
  float* partial_out;   ///< splits > 1: [n_queries * n_heads, splits, head_dim_v] normalised partial outputs
  float* partial_lse;   ///< splits > 1: [n_queries * n_heads, splits] natural-log LSE (-inf: no key)
};

template <class Tr>
__global__ void __launch_bounds__(Tr::kThreads, 2) flash_prefill_kernel(const PrefillLaunch L) {
  wait_for_producers();  // see launch.cuh
  allow_dependents();
  constexpr int kMi = Tr::kMi;
  const FlashPrefillParams& p = L.p;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* q_s = reinterpret_cast<bf16*>(smem);                              // [kBlockM][kQkRow]
  bf16* k_s = reinterpret_cast<bf16*>(smem + Tr::kQBytes);                // [kBlockN][kQkRow]
  bf16* v_s = reinterpret_cast<bf16*>(smem + Tr::kQBytes + Tr::kKBytes);  // [kBlockN][kVRow]

  const int q_tile = gridDim.x - 1 - blockIdx.x;  // heaviest first
  const int h = blockIdx.y;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int tq = lane % 4;
  const int m0 = q_tile * Tr::kBlockM;
  const int warp_row0 = warp * 16 * kMi;  // the warp's first query row in the tile
  const int n_keys = p.pos0 + p.n_queries;
  const int key_end = min(n_keys, p.pos0 + m0 + Tr::kBlockM);  // keys any query of this tile sees
  // this CTA's keys: [key_begin, key_stop), whole key tiles (split_keys is a multiple of kBlockN)
  const int split = blockIdx.z;
  const int key_begin = split * L.split_keys;
  const int key_stop = min(key_end, key_begin + L.split_keys);
  const int n_key_tiles = key_stop > key_begin ? (key_stop - key_begin + Tr::kBlockN - 1) / Tr::kBlockN : 0;
  const float score_scale = p.scale * kLog2e;

  // Queries (rows past n_queries are zero) and the first key tile: one copy group (none for a split
  // without keys: it only writes its empty partial result).
  if (n_key_tiles > 0) {
    using Deal = ChunkDeal<Tr::kBlockM, Tr::kDimQk / 8, Tr::kThreads>;
    const int col = Deal::first_element();
#pragma unroll
    for (int w = 0; w < Deal::kWaves; ++w) {
      const int r = Deal::row(w);
      const bool valid = m0 + r < p.n_queries;
      // a zero-filled row reads nothing; its addresses stay inside the first query's row
      const bf16* src =
          (valid ? p.q + static_cast<int64_t>(m0 + r) * p.q_token_stride + h * p.q_head_stride : p.q) + col;
      Deal::copy_row(q_s + r * Tr::kQkRow + col, src, valid);
    }
    load_cache_rows<Tr::kDimQk, Tr::kQkRow, Tr::kThreads, Tr::kBlockN>(k_s, p.k_cache, p.cache_batch, h, key_begin,
                                                                       n_keys);
    mma::cp_async_commit();
  }
  // ldmatrix addresses of this lane's Q rows (m16 block mi at q_base + mi * 16 rows)
  const bf16* q_base = q_s + (warp_row0 + (lane % 8) + ((lane / 8) % 2) * 8) * Tr::kQkRow + (lane / 16) * 8;

  // row g + 8 half of m16 block mi: query index (computed where used: registers are scarce at kMi = 2)
  const int row_g = m0 + warp_row0 + g;
  auto query_of = [&](int mi, int half) { return row_g + 16 * mi + 8 * half; };

  float o[kMi][Tr::kOutTiles][4];
  float m_run[kMi][2], l_run[kMi][2];
#pragma unroll
  for (int mi = 0; mi < kMi; ++mi) {
#pragma unroll
    for (int n = 0; n < Tr::kOutTiles; ++n) o[mi][n][0] = o[mi][n][1] = o[mi][n][2] = o[mi][n][3] = 0.0f;
    m_run[mi][0] = m_run[mi][1] = -INFINITY;
    l_run[mi][0] = l_run[mi][1] = 0.0f;
  }

  for (int j = 0; j < n_key_tiles; ++j) {
    const int key0 = key_begin + j * Tr::kBlockN;
    mma::cp_async_wait<0>();
    __syncthreads();  // K_j (and Q) landed; every warp is done with V_{j-1}
    load_cache_rows<Tr::kDimV, Tr::kVRow, Tr::kThreads, Tr::kBlockN>(v_s, p.v_cache, p.cache_batch, h, key0, n_keys);
    mma::cp_async_commit();

    // S = Q K_j^T: each K fragment feeds the warp's kMi row blocks
    float acc[kMi][Tr::kScoreTiles][4];
#pragma unroll
    for (int mi = 0; mi < kMi; ++mi)
#pragma unroll
      for (int n = 0; n < Tr::kScoreTiles; ++n) acc[mi][n][0] = acc[mi][n][1] = acc[mi][n][2] = acc[mi][n][3] = 0.0f;
    {
      const bf16* b_base = k_s + ((lane / 16) * 8 + (lane % 8)) * Tr::kQkRow + ((lane / 8) % 2) * 8;
#pragma unroll
      for (int kk = 0; kk < Tr::kQkSteps; ++kk) {
        uint32_t a[kMi][4];
#pragma unroll
        for (int mi = 0; mi < kMi; ++mi) mma::ldmatrix_x4(a[mi], q_base + mi * 16 * Tr::kQkRow + kk * 16);
#pragma unroll
        for (int np = 0; np < Tr::kScoreTiles / 2; ++np) {
          uint32_t bk[4];
          mma::ldmatrix_x4(bk, b_base + np * 16 * Tr::kQkRow + kk * 16);
#pragma unroll
          for (int mi = 0; mi < kMi; ++mi) {
            mma::mma_bf16_16816(acc[mi][2 * np], a[mi], bk[0], bk[1]);
            mma::mma_bf16_16816(acc[mi][2 * np + 1], a[mi], bk[2], bk[3]);
          }
        }
      }
    }

    // Scale, mask and update the running softmax of rows g and g+8 of each block; P as bf16 A fragments.
    const bool needs_mask = p.key_mask != nullptr || key0 + Tr::kBlockN - 1 > p.pos0 + m0;
    uint32_t pa[kMi][Tr::kBlockN / 16][4];
#pragma unroll
    for (int mi = 0; mi < kMi; ++mi) {
      float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int n = 0; n < Tr::kScoreTiles; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int half = e / 2;
          float s = acc[mi][n][e] * score_scale;
          if (needs_mask) {
            const int key = key0 + n * 8 + 2 * tq + (e % 2);
            const int t = query_of(mi, half);
            bool visible = key <= p.pos0 + t && key < n_keys;
            if (p.key_mask != nullptr && visible) {
              visible = t < p.n_queries &&
                        ((p.key_mask[static_cast<int64_t>(t) * p.key_mask_stride + key / 32] >> (key % 32)) & 1u);
            }
            if (!visible) s = -INFINITY;
          }
          acc[mi][n][e] = s;
          tile_max[half] = fmaxf(tile_max[half], s);
        }
      }
      float alpha[2];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float m_new = fmaxf(m_run[mi][half], mma::quad_max(tile_max[half]));
        alpha[half] = mma::exp2_rescale(m_run[mi][half], m_new);
        m_run[mi][half] = m_new;
        l_run[mi][half] *= alpha[half];
      }
#pragma unroll
      for (int n = 0; n < Tr::kScoreTiles; ++n) {
        // P rounded to bf16 once (one conversion per pair); the row sums add the rounded values, read back
        // from the pairs with integer ops: what the tensor cores multiply is what normalises.
        // n8 tile n covers keys 8n..8n+7: the low (even n) or high (odd n) half of k-step n/2.
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const uint32_t pair = mma::pack_bf16x2(mma::exp2_shifted(acc[mi][n][2 * half], m_run[mi][half]),
                                                 mma::exp2_shifted(acc[mi][n][2 * half + 1], m_run[mi][half]));
          l_run[mi][half] += __uint_as_float(pair << 16);
          l_run[mi][half] += __uint_as_float(pair & 0xFFFF0000u);
          pa[mi][n / 2][(n % 2) * 2 + half] = pair;
        }
      }
#pragma unroll
      for (int n = 0; n < Tr::kOutTiles; ++n) {
        o[mi][n][0] *= alpha[0];
        o[mi][n][1] *= alpha[0];
        o[mi][n][2] *= alpha[1];
        o[mi][n][3] *= alpha[1];
      }
    }

    mma::cp_async_wait<0>();
    __syncthreads();  // V_j landed; every warp is done with K_j
    if (j + 1 < n_key_tiles) {
      load_cache_rows<Tr::kDimQk, Tr::kQkRow, Tr::kThreads, Tr::kBlockN>(k_s, p.k_cache, p.cache_batch, h,
                                                                         key0 + Tr::kBlockN, n_keys);
    }
    mma::cp_async_commit();

    // O += P V_j: each V fragment feeds the warp's kMi row blocks
    const bf16* v_base = v_s + (((lane / 8) % 2) * 8 + (lane % 8)) * Tr::kVRow + (lane / 16) * 8;
#pragma unroll
    for (int kk = 0; kk < Tr::kBlockN / 16; ++kk) {
#pragma unroll
      for (int np = 0; np < Tr::kOutTiles / 2; ++np) {
        uint32_t bv[4];
        mma::ldmatrix_x4_trans(bv, v_base + kk * 16 * Tr::kVRow + np * 16);
#pragma unroll
        for (int mi = 0; mi < kMi; ++mi) {
          mma::mma_bf16_16816(o[mi][2 * np], pa[mi][kk], bv[0], bv[1]);
          mma::mma_bf16_16816(o[mi][2 * np + 1], pa[mi][kk], bv[2], bv[3]);
        }
      }
    }
  }

#pragma unroll
  for (int mi = 0; mi < kMi; ++mi) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float l = mma::quad_sum(l_run[mi][half]);
      const int t = query_of(mi, half);
      if (t >= p.n_queries) continue;
      const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
      const int64_t row = static_cast<int64_t>(t) * p.n_heads + h;
      const float lse = l > 0.0f ? (m_run[mi][half] + log2f(l)) * kLn2 : -INFINITY;
      if (L.splits > 1) {  // this split's normalised part; split_kv_combine weighs it by exp(lse - total)
        const int64_t part = row * L.splits + split;
#pragma unroll
        for (int n = 0; n < Tr::kOutTiles; ++n) {
          *reinterpret_cast<float2*>(L.partial_out + part * Tr::kDimV + n * 8 + 2 * tq) =
              make_float2(o[mi][n][2 * half] * inv_l, o[mi][n][2 * half + 1] * inv_l);
        }
        if (tq == 0) L.partial_lse[part] = lse;
        continue;
      }
#pragma unroll
      for (int n = 0; n < Tr::kOutTiles; ++n) {
        const int64_t index = row * Tr::kDimV + n * 8 + 2 * tq;
        const float x = o[mi][n][2 * half] * inv_l;
        const float y = o[mi][n][2 * half + 1] * inv_l;
        if (p.out_type == AttnOutputType::f32) {
          *reinterpret_cast<float2*>(static_cast<float*>(p.out) + index) = make_float2(x, y);
        } else {
          *reinterpret_cast<__nv_bfloat162*>(static_cast<bf16*>(p.out) + index) = __floats2bfloat162_rn(x, y);
        }
      }
      if (p.lse != nullptr && tq == 0) p.lse[row] = lse;
    }
  }
}

struct PrefillKernel {
  void (*kernel)(PrefillLaunch);
  size_t smem_bytes;
  int threads;
  int block_m;  ///< queries per CTA
};

template <class Tr>
PrefillKernel prefill_kernel() {
  return {&flash_prefill_kernel<Tr>, Tr::kSmemBytes, Tr::kThreads, Tr::kBlockM};
}

/// 192/128 (DeepSeek): 32 query rows per warp; 256/256 (GLM-5): 16 (the 32 output tiles need the registers).
PrefillKernel kernel_for(int dim_qk, int dim_v) {
  if (dim_qk == 192 && dim_v == 128) return prefill_kernel<FlashPrefillTraits<192, 128, 2>>();
  if (dim_qk == 256 && dim_v == 256) return prefill_kernel<FlashPrefillTraits<256, 256, 1>>();
  return {nullptr, 0, 0, 64};
}

__global__ void build_key_mask_kernel(const KeyMaskParams p) {
  wait_for_producers();  // see launch.cuh
  allow_dependents();
  extern __shared__ uint32_t row_bits[];  // [ceil(n_keys / 32)]
  const int words = (p.n_keys + 31) / 32;
  const int t = blockIdx.x;
  for (int w = threadIdx.x; w < words; w += blockDim.x) row_bits[w] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < p.top_k; i += blockDim.x) {
    const int pos = p.indices[static_cast<int64_t>(t) * p.index_stride + i];
    if (pos >= 0 && pos < p.n_keys) atomicOr(&row_bits[pos / 32], 1u << (pos % 32));
  }
  __syncthreads();
  uint32_t* out = p.mask + static_cast<int64_t>(t) * p.mask_stride;
  for (int w = threadIdx.x; w < p.mask_stride; w += blockDim.x) out[w] = w < words ? row_bits[w] : 0u;
}

/// Key tiles of the (tile, head) that sees the most keys: the last query tile's.
int max_key_tiles(const FlashPrefillParams& p) {
  const int64_t n_keys = static_cast<int64_t>(p.pos0) + p.n_queries;
  return static_cast<int>((n_keys + 63) / 64);
}

/// The split plan: `splits` CTAs per (tile, head), `split_keys` keys each (a multiple of the key tile).
struct SplitPlan {
  int splits = 1;
  int split_keys = 0;
};

SplitPlan plan_splits(const FlashPrefillParams& p) {
  const PrefillKernel k = kernel_for(p.head_dim_qk, p.head_dim_v);
  const int tiles = max_key_tiles(p);
  SplitPlan plan{.splits = 1, .split_keys = tiles * 64};
  // (the combine takes at most 65535 rows: longer chunks of many heads fill the device without splits)
  if (k.kernel == nullptr || p.n_queries < 1 || p.n_heads < 1 || tiles < 2 ||
      static_cast<int64_t>(p.n_queries) * p.n_heads > 65535) {
    return plan;
  }
  int best = 1;
  if (p.splits > 0) {
    best = std::min(p.splits, tiles);
  } else {
    int device = 0, sm_count = 0, per_sm = 0;
    LATTE_CUDA_CHECK(cudaGetDevice(&device));
    LATTE_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
    LATTE_CUDA_CHECK(
        cudaFuncSetAttribute(k.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(k.smem_bytes)));
    LATTE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k.kernel, k.threads, k.smem_bytes));
    const int64_t slots = static_cast<int64_t>(std::max(1, sm_count)) * std::max(1, per_sm);
    const int64_t base = static_cast<int64_t>((p.n_queries + k.block_m - 1) / k.block_m) * p.n_heads;
    // Cost in key-tile times (cheapest_kv_splits), the combine ~3 tile times: it reads and writes every
    // output value once per split.
    best = cheapest_kv_splits(tiles, 64, base, slots, [](int) { return 3.0; });
  }
  const int per_split = (tiles + best - 1) / best;
  plan.split_keys = per_split * 64;
  plan.splits = (tiles + per_split - 1) / per_split;
  return plan;
}

size_t workspace_bytes_for(const FlashPrefillParams& p, int splits) {
  if (splits <= 1) return 0;
  const size_t rows = static_cast<size_t>(p.n_queries) * static_cast<size_t>(p.n_heads);
  return rows * static_cast<size_t>(splits) * (static_cast<size_t>(p.head_dim_v) + 1) * sizeof(float);
}

}  // namespace

int flash_prefill_splits(const FlashPrefillParams& p) { return plan_splits(p).splits; }

size_t flash_prefill_workspace_bytes(const FlashPrefillParams& p) { return workspace_bytes_for(p, plan_splits(p).splits); }

void run_flash_prefill(const FlashPrefillParams& p, cudaStream_t stream) {
  const std::string what = "flash_prefill(T " + std::to_string(p.n_queries) + ", pos0 " + std::to_string(p.pos0) +
                           ", heads " + std::to_string(p.n_heads) + ", dims " + std::to_string(p.head_dim_qk) + "/" +
                           std::to_string(p.head_dim_v) + (p.key_mask ? ", sparse" : "") + ")";
  auto fail_unless = [&](bool ok, const std::string& message) {
    require(ok, ErrorCode::invalid_argument, what + ": " + message);
  };
  const PrefillKernel k = kernel_for(p.head_dim_qk, p.head_dim_v);
  fail_unless(k.kernel != nullptr, "head dims must be 192/128 or 256/256 (the dims of the supported models)");
  fail_unless(p.n_queries >= 1 && p.pos0 >= 0 && p.n_heads >= 1 && p.n_heads <= 65535,
              "needs n_queries >= 1, pos0 >= 0 and 1 <= n_heads <= 65535");
  fail_unless(static_cast<int64_t>(p.pos0) + p.n_queries < (int64_t{1} << 31), "pos0 + n_queries overflows int32");
  fail_unless(p.q != nullptr && p.out != nullptr, "q and out must be set");
  fail_unless(reinterpret_cast<uintptr_t>(p.q) % 16 == 0 && reinterpret_cast<uintptr_t>(p.out) % 16 == 0,
              "q and out must be 16-byte aligned");
  fail_unless(p.q_token_stride % 8 == 0 && p.q_head_stride % 8 == 0, "query strides must be multiples of 8");
  fail_unless(p.scale > 0.0f && p.scale < 1e30f, "scale must be positive and finite");
  check_paged_rows(p.k_cache, "flash_prefill", "k_cache");
  check_paged_rows(p.v_cache, "flash_prefill", "v_cache");
  if (p.key_mask != nullptr) {
    fail_unless(p.key_mask_stride >= (static_cast<int64_t>(p.pos0) + p.n_queries + 31) / 32,
                "key_mask_stride must cover pos0 + n_queries positions");
  }
  int device = 0, max_smem = 0;
  LATTE_CUDA_CHECK(cudaGetDevice(&device));
  LATTE_CUDA_CHECK(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  require(k.smem_bytes <= static_cast<size_t>(max_smem), ErrorCode::unsupported,
          what + ": needs " + std::to_string(k.smem_bytes) + " bytes of shared memory per block, the device allows " +
              std::to_string(max_smem));
  fail_unless(p.splits >= 0, "splits must not be negative");
  LATTE_CUDA_CHECK(
      cudaFuncSetAttribute(k.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(k.smem_bytes)));
  PrefillLaunch launch{.p = p, .splits = 1, .split_keys = max_key_tiles(p) * 64, .partial_out = nullptr,
                       .partial_lse = nullptr};
  if (p.workspace != nullptr) {
    const SplitPlan plan = plan_splits(p);
    const size_t need = workspace_bytes_for(p, plan.splits);
    fail_unless(reinterpret_cast<uintptr_t>(p.workspace) % 16 == 0 && p.workspace_bytes >= need,
                "needs a 16-byte aligned workspace of " + std::to_string(need) + " bytes, got " +
                    std::to_string(p.workspace_bytes));
    if (plan.splits > 1) {
      const size_t rows = static_cast<size_t>(p.n_queries) * static_cast<size_t>(p.n_heads);
      launch.splits = plan.splits;
      launch.split_keys = plan.split_keys;
      launch.partial_out = static_cast<float*>(p.workspace);
      launch.partial_lse = launch.partial_out + rows * static_cast<size_t>(plan.splits) * p.head_dim_v;
    }
  }
  fail_unless(launch.splits <= 65535, "too many key splits for one launch");
  const dim3 grid((p.n_queries + k.block_m - 1) / k.block_m, p.n_heads, launch.splits);
  launch_kernel(k.kernel, grid, k.threads, k.smem_bytes, stream, launch);
  if (launch.splits > 1) {
    run_split_kv_combine({.partial_out = launch.partial_out,
                          .partial_lse = launch.partial_lse,
                          .rows = p.n_queries * p.n_heads,
                          .splits = launch.splits,
                          .dim = p.head_dim_v,
                          .out_type = p.out_type,
                          .out = p.out,
                          .lse = p.lse},
                         stream);
  }
}

void run_build_key_mask(const KeyMaskParams& p, cudaStream_t stream) {
  const std::string what = "build_key_mask(queries " + std::to_string(p.n_queries) + ", keys " +
                           std::to_string(p.n_keys) + ", top_k " + std::to_string(p.top_k) + ")";
  const int64_t words = (static_cast<int64_t>(p.n_keys) + 31) / 32;
  require(p.indices != nullptr && p.mask != nullptr, ErrorCode::invalid_argument, what + ": null pointer");
  require(p.n_queries >= 0 && p.n_keys >= 1 && p.top_k >= 0 && p.index_stride >= p.top_k, ErrorCode::invalid_argument,
          what + ": needs n_keys >= 1 and 0 <= top_k <= index_stride");
  require(p.mask_stride >= words, ErrorCode::invalid_argument, what + ": mask_stride is below ceil(n_keys / 32)");
  require(words * 4 <= 48 * 1024, ErrorCode::invalid_argument, what + ": more than 393216 keys");
  if (p.n_queries == 0) return;
  launch_kernel(build_key_mask_kernel, p.n_queries, 256, static_cast<size_t>(words) * 4, stream, p);
}

}  // namespace latte::cuda
