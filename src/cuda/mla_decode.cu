// MLA decode: plan, launcher and the 16-row kernel (see mla_decode.hpp for the contract; the 64-row
// kernel for many heads is in mla_decode_wide.cu, the shared device pieces in mla_decode_tiles.cuh).
//
// Work decomposition: one CTA per (row group, KV split, sequence). The rows of a sequence are its
// (query token, head) pairs, r = t * n_heads + h; all of them share the same latent cache, so one CTA
// takes 16 (or 64) of them and reads each cache tile once for all of them. Row groups of one
// (sequence, split) are adjacent in the grid, so they run side by side and share the tiles in L2.
// Per tile of kTileTokens positions (kStages-deep cp.async ring in shared memory), 16-row kernel:
//   1. S = Q K^T with mma.m16n8k16 (bf16 -> fp32): warp `qk_slice` computes 16 rows x 16 positions over
//      the 576 dims (over half of them with kDimSplit 2: two score tiles, summed in step 2); scaled by
//      scale*log2(e), masked, stored to shared memory.
//   2. Online softmax + O += P V: every warp reads all kTileTokens scores of the 16 rows, updates the
//      running max/sum, and accumulates its 512/kWarpsPerBlock columns of O in registers (V = the first 512
//      values of the same cache rows: ldmatrix.trans).
// Partial results of a split (normalised O and LSE) go to the workspace; split_kv_combine merges them.
// With one split the kernel writes the final output directly.
//
// Back-of-envelope (H200: 4.28 TB/s measured copy, ~990 TFLOP/s dense bf16 datasheet, of which
// mma.sync reaches roughly two thirds):
//   bytes  = B * ctx * 1152 (latent cache, read once per row group), FLOPs = 2 * B * N * q_len * ctx * 1088
//   16 heads, B=64, ctx=8192: 604 MB -> 141 us at copy speed; 18 GFLOP (memory-bound, 30 FLOP/B).
//   128 heads: 146 GFLOP -> >= 147 us even at the datasheet tensor peak: compute-bound (242 FLOP/B),
//   so 3.6 TB/s of effective cache bandwidth is out of reach there for any kernel on this chip.
#include "cuda/mla_decode.hpp"

#include "core/environment.hpp"
#include "cuda/check.hpp"
#include "cuda/launch.cuh"
#include "cuda/mla_decode_tiles.cuh"
#include "cuda/split_kv_combine.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

namespace latte::cuda {
namespace {

using namespace mla_decode_detail;

template <int kHeadBlocks_, int kTileTokens_, int kStages_, int kDimSplit_ = 1>
struct MlaDecodeTraits {
  static constexpr int kHeadBlocks = kHeadBlocks_;  // 16-row tensor-core blocks per CTA
  static constexpr int kTileTokens = kTileTokens_;  // cache positions per pipeline stage
  static constexpr int kStages = kStages_;          // shared-memory stages; kStages - 1 tiles in flight
  static constexpr int kDimSplit = kDimSplit_;      // warps sharing one 16-position slice of Q K^T (by dims)
  static constexpr int kRows = 16 * kHeadBlocks;
  static constexpr int kSlices = kTileTokens / 16;            // 16-position slices of Q K^T = k-steps of P V
  static constexpr int kWarpsPerBlock = kSlices * kDimSplit;  // warps per row block
  static constexpr int kWarps = kHeadBlocks * kWarpsPerBlock;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kColsPerWarp = kMlaLatentDim / kWarpsPerBlock;  // O columns per warp
  static constexpr int kOutTiles = kColsPerWarp / 8;                   // n8 accumulator tiles per warp
  static constexpr int kQkSteps = kMlaCacheRow / 16 / kDimSplit;       // k-steps of Q K^T per warp (36 in all)
  static constexpr int kScoreStride = kTileTokens + 8;                 // floats; = 8 mod 32: conflict-free float2
  static constexpr size_t kQBytes = size_t{kRows} * kSmemRowElems * sizeof(bf16);
  static constexpr size_t kKvBytes = size_t{kStages} * kTileTokens * kSmemRowElems * sizeof(bf16);
  // one score tile per dim part: the parts' partial dot products, summed by the softmax
  static constexpr size_t kScoreBytes = size_t{kDimSplit} * kRows * kScoreStride * sizeof(float);
  using Ring = TileRowRing<kTileTokens, kStages>;
  static constexpr size_t kSmemBytes = kQBytes + kKvBytes + kScoreBytes + Ring::kBytes;
  static_assert(kTileTokens % 16 == 0 && kMlaLatentDim % kWarpsPerBlock == 0 && kColsPerWarp % 16 == 0);
  static_assert(kMlaCacheRow / 16 % kDimSplit == 0 && (kDimSplit == 1 || kDimSplit == 2));
  static_assert(kThreads >= kTileTokens, "one thread per tile row resolves the row addresses");
  static_assert(kScoreStride % 32 == 8);
};

// Configurations of this kernel (keep the list short: each is compiled for every architecture). More
// than 32 rows go to the 64-row kernel of mla_decode_wide.cu.
using MlaDecodeNarrow = MlaDecodeTraits<1, 64, 2>;     // 16 rows, 4 warps, 171 KB smem: memory-bound
using MlaDecodeSmallSmem = MlaDecodeTraits<1, 32, 2>;  // 16 rows, 2 warps, 95 KB: sm_120 (~100 KB per block)
// 16 rows, 4 warps (2 position slices x 2 halves of the 576 dims in Q K^T, 4 column slices in P V), 175 KB:
// 32-position tiles in 4 stages keep 3 tiles (112 KB) in flight through each tile's compute, where the
// 64-position tiles keep one (75 KB). LATTE_MLA_DECODE_TILE=32 (BENCHMARKS.md, eighteenth round); measured in the
// twentieth: +1% at one sequence and shallow depth, -1% at depth 16384, 20% slower at B=64 ctx=8192, so off.
using MlaDecodeDeep = MlaDecodeTraits<1, 32, 4, 2>;

template <class Tr>
__global__ void __launch_bounds__(Tr::kThreads, 1) mla_decode_kernel(const Launch L) {
  if (!L.p.earlier_rows_ready) {
    wait_for_producers();  // see launch.cuh
    allow_dependents();
  }
  constexpr int T = Tr::kTileTokens;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* q_s = reinterpret_cast<bf16*>(smem);                                     // [kRows][kSmemRowElems]
  bf16* kv_s = reinterpret_cast<bf16*>(smem + Tr::kQBytes);                      // [kStages][T][kSmemRowElems]
  float* score_s = reinterpret_cast<float*>(smem + Tr::kQBytes + Tr::kKvBytes);  // [kRows][kScoreStride]
  typename Tr::Ring ring(smem + Tr::kQBytes + Tr::kKvBytes + Tr::kScoreBytes);

  const int row_group = blockIdx.x;  // fastest-varying: row groups of one (sequence, split) share L2
  const int split = blockIdx.y;
  const CtaRange range(L, split, blockIdx.z, T);
  const int b = range.b;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;                // fragment row
  const int tq = lane % 4;               // fragment column pair
  const int rb = warp / Tr::kWarpsPerBlock;     // row block of this warp
  const int slice = warp % Tr::kWarpsPerBlock;  // column slice of P V
  const int qk_slice = slice % Tr::kSlices;     // position slice of Q K^T
  const int qk_part = slice / Tr::kSlices;      // which kQkSteps k-steps of the 576 dims it sums
  const int row0 = row_group * Tr::kRows;
  const int row_limit[2] = {range.visible_limit(L, row0 + rb * 16 + g), range.visible_limit(L, row0 + rb * 16 + g + 8)};

  float o[Tr::kOutTiles][4];
  for (int n = 0; n < Tr::kOutTiles; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY};  // running max (log2 domain) of rows g and g+8
  float l_run[2] = {0.0f, 0.0f};            // this thread's part of the running sum

  // MlaDecodeParams::earlier_rows_ready: the first tiles' earlier rows are copied before the wait
  const bool early = begin_tiles<T, Tr::kThreads>(L, range, ring, kv_s, Tr::kStages - 1);

  if (range.n_tiles > 0) {
    load_query_rows<Tr::kRows, Tr::kThreads>(q_s, L, b, row0);
    auto load_tile = [&](int tile) {
      load_kv_tile<T, Tr::kThreads>(kv_s + (tile % Tr::kStages) * T * kSmemRowElems, ring.tile_offsets(tile),
                                    L.p.cache.data);
    };
    for (int j = 0; j < Tr::kStages - 1; ++j) {
      if (j < range.n_tiles) copy_first_tile<T, Tr::kThreads>(L, range, ring, kv_s + j * T * kSmemRowElems, j, early);
      mma::cp_async_commit();  // group j holds tile j (group 0 also the queries)
    }

    for (int tile = 0; tile < range.n_tiles; ++tile) {
      if (tile + Tr::kStages - 1 < range.n_tiles) load_tile(tile + Tr::kStages - 1);
      mma::cp_async_commit();
      const typename Tr::Ring::Pending pending = ring.start(L, range, tile);
      mma::cp_async_wait<Tr::kStages - 1>();  // this thread's copies of `tile` have landed
      __syncthreads();                        // ... and everybody's

      const bf16* kv_tile = kv_s + (tile % Tr::kStages) * T * kSmemRowElems;
      const int32_t* positions = ring.tile_positions(tile);

      // 1. Scores of 16 rows x 16 positions.
      {
        float acc[2][4] = {};
        const int k0 = qk_part * Tr::kQkSteps * 16;  // this warp's first dim
        const bf16* a_base = q_s + (rb * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * kSmemRowElems + (lane / 16) * 8 + k0;
        const bf16* b_base =
            kv_tile + (qk_slice * 16 + (lane / 16) * 8 + (lane % 8)) * kSmemRowElems + ((lane / 8) % 2) * 8 + k0;
#pragma unroll 12
        for (int kk = 0; kk < Tr::kQkSteps; ++kk) {
          uint32_t a[4], bk[4];
          mma::ldmatrix_x4(a, a_base + kk * 16);
          mma::ldmatrix_x4(bk, b_base + kk * 16);
          mma::mma_bf16_16816(acc[0], a, bk[0], bk[1]);
          mma::mma_bf16_16816(acc[1], a, bk[2], bk[3]);
        }
        float* scores = score_s + qk_part * Tr::kRows * Tr::kScoreStride;
#pragma unroll
        for (int n = 0; n < 2; ++n) {
          const int col = qk_slice * 16 + n * 8 + 2 * tq;
          const int pos0 = positions[col];
          const int pos1 = positions[col + 1];
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            float2 v;
            v.x = pos0 >= 0 && pos0 < row_limit[half] ? acc[n][2 * half] * L.score_scale : -INFINITY;
            v.y = pos1 >= 0 && pos1 < row_limit[half] ? acc[n][2 * half + 1] * L.score_scale : -INFINITY;
            *reinterpret_cast<float2*>(scores + (rb * 16 + g + 8 * half) * Tr::kScoreStride + col) = v;
          }
        }
      }
      __syncthreads();

      // 2. Online softmax over the tile and O += P V for this warp's columns.
      {
        const float* srow[2] = {score_s + (rb * 16 + g) * Tr::kScoreStride,
                                score_s + (rb * 16 + g + 8) * Tr::kScoreStride};
        float s[Tr::kSlices][2][4];  // [k-step][row half][a-fragment order: 2tq, 2tq+1, 2tq+8, 2tq+9]
        float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int kk = 0; kk < Tr::kSlices; ++kk) {
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            float2 lo = *reinterpret_cast<const float2*>(srow[half] + kk * 16 + 2 * tq);
            float2 hi = *reinterpret_cast<const float2*>(srow[half] + kk * 16 + 8 + 2 * tq);
            if constexpr (Tr::kDimSplit == 2) {  // + the other half's partial dot products (-inf + -inf: masked)
              const float* other = srow[half] + Tr::kRows * Tr::kScoreStride;
              const float2 lo2 = *reinterpret_cast<const float2*>(other + kk * 16 + 2 * tq);
              const float2 hi2 = *reinterpret_cast<const float2*>(other + kk * 16 + 8 + 2 * tq);
              lo.x += lo2.x;
              lo.y += lo2.y;
              hi.x += hi2.x;
              hi.y += hi2.y;
            }
            s[kk][half][0] = lo.x;
            s[kk][half][1] = lo.y;
            s[kk][half][2] = hi.x;
            s[kk][half][3] = hi.y;
            tile_max[half] = fmaxf(tile_max[half], fmaxf(fmaxf(lo.x, lo.y), fmaxf(hi.x, hi.y)));
          }
        }
        float alpha[2];
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const float m_new = fmaxf(m_run[half], mma::quad_max(tile_max[half]));
          alpha[half] = mma::exp2_rescale(m_run[half], m_new);
          m_run[half] = m_new;
          l_run[half] *= alpha[half];
        }
        uint32_t pa[Tr::kSlices][4];  // P as A fragments (bf16)
#pragma unroll
        for (int kk = 0; kk < Tr::kSlices; ++kk) {
          // P rounded to bf16 once (one conversion per pair); the row sums add the rounded values, read back
          // from the pairs with integer ops: what the tensor cores multiply is what normalises.
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const uint32_t lo = mma::pack_bf16x2(mma::exp2_shifted(s[kk][half][0], m_run[half]),
                                                 mma::exp2_shifted(s[kk][half][1], m_run[half]));
            const uint32_t hi = mma::pack_bf16x2(mma::exp2_shifted(s[kk][half][2], m_run[half]),
                                                 mma::exp2_shifted(s[kk][half][3], m_run[half]));
            l_run[half] += __uint_as_float(lo << 16);
            l_run[half] += __uint_as_float(lo & 0xFFFF0000u);
            l_run[half] += __uint_as_float(hi << 16);
            l_run[half] += __uint_as_float(hi & 0xFFFF0000u);
            pa[kk][half] = lo;      // rows g / g+8, columns 2tq, 2tq+1
            pa[kk][2 + half] = hi;  // columns 2tq+8, 2tq+9
          }
        }
#pragma unroll
        for (int n = 0; n < Tr::kOutTiles; ++n) {
          o[n][0] *= alpha[0];
          o[n][1] *= alpha[0];
          o[n][2] *= alpha[1];
          o[n][3] *= alpha[1];
        }
        const bf16* v_base =
            kv_tile + (((lane / 8) % 2) * 8 + (lane % 8)) * kSmemRowElems + slice * Tr::kColsPerWarp + (lane / 16) * 8;
#pragma unroll
        for (int kk = 0; kk < Tr::kSlices; ++kk) {
#pragma unroll
          for (int np = 0; np < Tr::kOutTiles / 2; ++np) {
            uint32_t bv[4];
            mma::ldmatrix_x4_trans(bv, v_base + kk * 16 * kSmemRowElems + np * 16);
            mma::mma_bf16_16816(o[2 * np], pa[kk], bv[0], bv[1]);
            mma::mma_bf16_16816(o[2 * np + 1], pa[kk], bv[2], bv[3]);
          }
        }
      }
      ring.finish(L, range, tile, pending);
      __syncthreads();  // the stage, the scores and the new metadata are settled for the next iteration
    }
  }

  if (L.cluster) {
    // Merged in the cluster: rows g and g+8 of this warp's row block, normalised, into the KV stages (no
    // longer read: the last tile ended with a barrier), then cluster_merge.
    float* part = reinterpret_cast<float*>(smem + Tr::kQBytes);  // [kRows][512], then [kRows] LSEs
    static_assert(Tr::kKvBytes >= (Tr::kRows * (kMlaLatentDim + 1)) * sizeof(float));
    static_assert(Tr::kScoreBytes >= Tr::kRows * 8 * sizeof(float), "scratch for 8 splits' weights");
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float l = mma::quad_sum(l_run[half]);
      const int r = rb * 16 + g + 8 * half;
      const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
      for (int n = 0; n < Tr::kOutTiles; ++n) {
        *reinterpret_cast<float2*>(part + r * kMlaLatentDim + slice * Tr::kColsPerWarp + n * 8 + 2 * tq) =
            make_float2(o[n][2 * half] * inv_l, o[n][2 * half + 1] * inv_l);
      }
      if (slice == 0 && tq == 0) part[Tr::kRows * kMlaLatentDim + r] = natural_lse(m_run[half], l);
    }
    cluster_merge<Tr::kRows, Tr::kThreads>(L, b, row0, part, score_s);
    return;
  }

  // Epilogue: normalise and write rows g and g+8 of this warp's row block.
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const float l = mma::quad_sum(l_run[half]);
    const int row = row0 + rb * 16 + g + 8 * half;
    if (row >= L.rows_total) continue;
    const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (int n = 0; n < Tr::kOutTiles; ++n) {
      store_output_pair(L, b, split, row, slice * Tr::kColsPerWarp + n * 8 + 2 * tq, o[n][2 * half] * inv_l,
                        o[n][2 * half + 1] * inv_l);
    }
    if (slice == 0 && tq == 0) store_lse(L, b, split, row, m_run[half], l);
  }
}

template <class Tr>
KernelInfo narrow_kernel_info() {
  return {&mla_decode_kernel<Tr>, Tr::kRows, Tr::kTileTokens, Tr::kThreads, Tr::kSmemBytes};
}

/// Compiled configurations: 0 narrow (16 rows), 1 wide (64 rows), 2 narrow for ~100 KB of shared memory, 3 narrow
/// with 32-position tiles in 4 stages.
KernelInfo config_by_id(int id) {
  switch (id) {
    case 0:
      return narrow_kernel_info<MlaDecodeNarrow>();
    case 1:
      return wide_kernel_info();
    case 2:
      return narrow_kernel_info<MlaDecodeSmallSmem>();
    case 3:
      return narrow_kernel_info<MlaDecodeDeep>();
    default:
      throw Error(ErrorCode::internal, "mla_decode: unknown tile configuration " + std::to_string(id));
  }
}

std::string describe(const MlaDecodeParams& p) {
  return "mla_decode(batch " + std::to_string(p.batch) + ", q_len " + std::to_string(p.q_len) + ", heads " +
         std::to_string(p.n_heads) + ", " +
         (p.indices ? "sparse top_k " + std::to_string(p.top_k) : "max_kv_len " + std::to_string(p.max_kv_len)) + ")";
}

void check_params(const MlaDecodeParams& p) {
  const std::string what = describe(p);
  auto fail_unless = [&](bool ok, const std::string& message) {
    require(ok, ErrorCode::invalid_argument, what + ": " + message);
  };
  fail_unless(p.batch >= 1 && p.q_len >= 1 && p.n_heads >= 1, "batch, q_len and n_heads must be positive");
  fail_unless(static_cast<int64_t>(p.q_len) * p.n_heads <= (1 << 20), "q_len * n_heads is too large");
  fail_unless(p.q_latent != nullptr && p.q_rope != nullptr && p.kv_lens != nullptr && p.out != nullptr,
              "q_latent, q_rope, kv_lens and out must be set");
  auto aligned16 = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  fail_unless(aligned16(p.q_latent) && aligned16(p.q_rope) && aligned16(p.out),
              "q_latent, q_rope and out must be 16-byte aligned");
  fail_unless(p.q_latent_token_stride % 8 == 0 && p.q_latent_head_stride % 8 == 0 && p.q_rope_token_stride % 8 == 0 &&
                  p.q_rope_head_stride % 8 == 0,
              "query strides must be multiples of 8 elements");
  fail_unless(p.scale > 0.0f && p.scale < 1e30f, "scale must be positive and finite");
  check_paged_rows(p.cache, "mla_decode", "cache");
  fail_unless(p.cache.token_stride >= kMlaCacheRow,
              "cache rows (token_stride) must not overlap: at least 576 elements");
  if (p.indices != nullptr) {
    fail_unless(p.q_len == 1, "sparse mode needs q_len == 1 (give each query token its own batch entry)");
    fail_unless(p.top_k >= 1 && p.index_stride >= p.top_k, "sparse mode needs 1 <= top_k <= index_stride");
  } else {
    fail_unless(p.max_kv_len >= p.q_len, "max_kv_len must be at least q_len");
  }
}

struct DeviceLimits {
  int device = 0;
  int sm_count = 0;
  int max_smem_optin = 0;
  int major = 0;  // compute capability
};

DeviceLimits current_device_limits() {
  DeviceLimits limits;
  LATTE_CUDA_CHECK(cudaGetDevice(&limits.device));
  LATTE_CUDA_CHECK(cudaDeviceGetAttribute(&limits.sm_count, cudaDevAttrMultiProcessorCount, limits.device));
  LATTE_CUDA_CHECK(
      cudaDeviceGetAttribute(&limits.max_smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, limits.device));
  LATTE_CUDA_CHECK(cudaDeviceGetAttribute(&limits.major, cudaDevAttrComputeCapabilityMajor, limits.device));
  return limits;
}

constexpr int kMaxClusterSplits = 8;  // the portable cluster size

/// How many clusters of `size` CTAs of configuration `config` can run at once on the current device (0:
/// none). Asked of the runtime once per device, configuration and size.
int max_active_clusters(const DeviceLimits& device, int config, int size) {
  static std::mutex mutex;
  static std::map<std::tuple<int, int, int>, int> known;
  const std::lock_guard lock(mutex);
  const auto key = std::make_tuple(device.device, config, size);
  if (const auto it = known.find(key); it != known.end()) return it->second;
  const KernelInfo info = config_by_id(config);
  LATTE_CUDA_CHECK(cudaFuncSetAttribute(info.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(info.smem_bytes)));
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = 1;
  attribute.val.clusterDim.y = static_cast<unsigned>(size);
  attribute.val.clusterDim.z = 1;
  // {gridDim, blockDim, dynamicSmemBytes, stream, attrs, numAttrs}, by position (see launch.cuh)
  const cudaLaunchConfig_t launch{dim3(1, static_cast<unsigned>(size), 1),
                                  dim3(static_cast<unsigned>(info.threads)),
                                  info.smem_bytes,
                                  nullptr,
                                  &attribute,
                                  1};
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, info.kernel, &launch) != cudaSuccess) {
    (void)cudaGetLastError();  // not an error of the stream's: the cluster is just not an option
    clusters = 0;
  }
  known.emplace(key, clusters);
  return clusters;
}

/// Whether configuration `config` merges splits in clusters (the 16-row kernels; not the 64-row one).
bool cluster_config(int config) { return config == 0 || config == 2 || config == 3; }

}  // namespace

MlaDecodePlan plan_mla_decode(const MlaDecodeParams& p, int force_splits, MlaSplitMerge merge, int tile_tokens) {
  check_params(p);
  require(tile_tokens == 0 || tile_tokens == 32 || tile_tokens == 64, ErrorCode::invalid_argument,
          describe(p) + ": tile_tokens is 0, 32 or 64 (got " + std::to_string(tile_tokens) + ")");
  const DeviceLimits device = current_device_limits();
  const int rows_total = p.q_len * p.n_heads;
  // LATTE_MLA_DECODE_TILE=32: the 16-row kernel with 32-position tiles, more of them in flight (read per plan)
  const bool deep =
      tile_tokens == 0 ? latte::detail::env_choice("LATTE_MLA_DECODE_TILE", "64") == "32" : tile_tokens == 32;
  int config = rows_total <= 32 ? (deep ? 3 : 0) : 1;
  if (config_by_id(config).smem_bytes > static_cast<size_t>(device.max_smem_optin)) config = 2;
  const KernelInfo info = config_by_id(config);
  require(info.smem_bytes <= static_cast<size_t>(device.max_smem_optin), ErrorCode::unsupported,
          describe(p) + ": the device allows " + std::to_string(device.max_smem_optin) +
              " bytes of shared memory per block, the kernel needs " + std::to_string(info.smem_bytes));
  if (merge == MlaSplitMerge::cluster) {
    require(device.major >= 9 && cluster_config(config), ErrorCode::unsupported,
            describe(p) + ": merging the splits in a cluster needs sm_90 or later and at most 32 rows per sequence");
  }

  MlaDecodePlan plan;
  plan.config = config;
  plan.rows_per_cta = info.rows;
  plan.head_groups = (rows_total + info.rows - 1) / info.rows;
  plan.threads = info.threads;
  plan.smem_bytes = info.smem_bytes;

  const int slots = p.indices ? p.top_k : p.max_kv_len;
  const int tiles = (slots + info.tile_tokens - 1) / info.tile_tokens;
  const int64_t base_ctas = static_cast<int64_t>(p.batch) * plan.head_groups;
  const int ctas_per_wave = std::max(1, device.sm_count);  // one CTA per SM (shared-memory bound)
  constexpr int kMaxSplits = 256;
  // Cost in tile-times (one tile load per SM, ~1 us for 64 positions): waves * (tiles per split + ~2 tiles
  // of per-CTA start-up), plus the merge. With a combine launch that is ~5 (measured 5.5 us on an H200 at one
  // token) and the partial results written and read again (4 bytes per value, twice) spread over the SMs: up
  // to a few hundred positions one CTA per head group then beats splitting (the decode of one token at depth
  // < 256 took 10 us + 5.5 us of combine with 8 splits). In a cluster the merge is ~1: two cluster barriers
  // and 32 KB of another CTA's shared memory per CTA, but the clusters fill fewer SMs at a time. Measured on an
  // H200 (BENCHMARKS.md, thirteenth round) the cluster paid only where one sequence's few CTAs would leave the
  // GPU idle: tg128 +3.6% at one sequence, but -2-3% at 8 sequences and -1% at 32 against the combine
  // launch's plans, so the automatic plan keeps it to at most kClusterMaxBaseCtas CTAs before splitting.
  constexpr int64_t kClusterMaxBaseCtas = 2;
  const double tile_bytes = static_cast<double>(info.tile_tokens) * kMlaCacheRow * 2;
  const double partial_bytes_per_split = static_cast<double>(p.batch) * rows_total * kMlaLatentDim * 4 * 2;
  auto combine_cost = [&](int s) { return 5.0 + s * partial_bytes_per_split / (tile_bytes * ctas_per_wave); };
  constexpr double kClusterMergeCost = 1.0;
  static const bool clusters_allowed = latte::detail::env_flag("LATTE_MLA_CLUSTER", true);
  const bool may_cluster = merge == MlaSplitMerge::cluster ||
                           (merge == MlaSplitMerge::automatic && clusters_allowed && device.major >= 9 &&
                            cluster_config(config) && force_splits <= 0 && base_ctas <= kClusterMaxBaseCtas);
  int best_splits = 1;
  bool cluster = false;
  if (merge == MlaSplitMerge::cluster && force_splits > 0) {
    best_splits = std::min({force_splits, tiles, kMaxClusterSplits});
    cluster = best_splits > 1;
  } else if (force_splits > 0) {
    best_splits = std::min(force_splits, tiles);
  } else {
    const KvSplitChoice launched = cheapest_kv_split(
        tiles, 1, kMaxSplits, base_ctas, [&](int) { return int64_t{ctas_per_wave}; }, combine_cost);
    best_splits = std::max(launched.splits, 1);
    if (may_cluster) {
      // the clusters of s CTAs that fit at once, s CTAs each
      const KvSplitChoice clustered = cheapest_kv_split(
          tiles, 2, kMaxClusterSplits, base_ctas,
          [&](int s) { return int64_t{max_active_clusters(device, config, s)} * s; },
          [](int) { return kClusterMergeCost; });
      if (clustered.splits > 0 && (clustered.cost < launched.cost || merge == MlaSplitMerge::cluster)) {
        best_splits = clustered.splits;
        cluster = true;
      }
    }
  }
  const int tiles_per_split = (tiles + best_splits - 1) / best_splits;
  plan.splits = (tiles + tiles_per_split - 1) / tiles_per_split;
  plan.cluster = cluster && plan.splits > 1;
  plan.chunk = tiles_per_split * info.tile_tokens;
  const int64_t out_rows = static_cast<int64_t>(p.batch) * rows_total;
  plan.workspace_bytes = plan.splits > 1 && !plan.cluster
                             ? static_cast<size_t>(out_rows) * plan.splits * (kMlaLatentDim + 1) * sizeof(float)
                             : 0;
  return plan;
}

void run_mla_decode(const MlaDecodeParams& p, const MlaDecodePlan& plan, void* workspace, size_t workspace_bytes,
                    cudaStream_t stream) {
  check_params(p);
  const KernelInfo info = config_by_id(plan.config);
  const int rows_total = p.q_len * p.n_heads;
  const int64_t out_rows = static_cast<int64_t>(p.batch) * rows_total;
  const std::string what = describe(p);
  require(plan.splits >= 1 && plan.chunk > 0 && plan.chunk % info.tile_tokens == 0 &&
              plan.head_groups == (rows_total + info.rows - 1) / info.rows,
          ErrorCode::invalid_argument, what + ": the plan does not belong to this shape");
  const int slots = p.indices ? p.top_k : p.max_kv_len;
  require(static_cast<int64_t>(plan.chunk) * plan.splits >= slots, ErrorCode::invalid_argument,
          what + ": the plan covers fewer positions than max_kv_len / top_k");
  require(plan.splits <= 65535 && p.batch <= 65535, ErrorCode::invalid_argument,
          what + ": too many splits or sequences for one launch");
  require(!plan.cluster || (plan.splits <= kMaxClusterSplits && cluster_config(plan.config)),
          ErrorCode::invalid_argument, what + ": the plan's cluster does not fit its configuration");
  const size_t partial_out_bytes = static_cast<size_t>(out_rows) * plan.splits * kMlaLatentDim * sizeof(float);
  if (plan.splits > 1 && !plan.cluster) {
    require(workspace != nullptr && workspace_bytes >= plan.workspace_bytes &&
                reinterpret_cast<uintptr_t>(workspace) % 16 == 0,
            ErrorCode::invalid_argument,
            what + ": needs a 16-byte aligned workspace of " + std::to_string(plan.workspace_bytes) + " bytes, got " +
                std::to_string(workspace_bytes));
  }

  Launch launch{};
  launch.p = p;
  launch.rows_total = rows_total;
  launch.splits = plan.splits;
  launch.chunk = plan.chunk;
  launch.score_scale = p.scale * kLog2e;
  launch.cluster = plan.cluster ? 1 : 0;
  if (plan.splits > 1 && !plan.cluster) {
    launch.partial_out = static_cast<float*>(workspace);
    launch.partial_lse = reinterpret_cast<float*>(static_cast<char*>(workspace) + partial_out_bytes);
  }

  LATTE_CUDA_CHECK(cudaFuncSetAttribute(info.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(info.smem_bytes)));
  const dim3 grid(plan.head_groups, plan.splits, p.batch);
  if (plan.cluster) {
    launch_kernel_cluster(info.kernel, grid, dim3(1, plan.splits, 1), info.threads, info.smem_bytes, stream, launch);
    return;
  }
  launch_kernel(info.kernel, grid, info.threads, info.smem_bytes, stream, launch);

  if (plan.splits > 1) {
    run_split_kv_combine({.partial_out = launch.partial_out,
                          .partial_lse = launch.partial_lse,
                          .rows = static_cast<int>(out_rows),
                          .splits = plan.splits,
                          .dim = kMlaLatentDim,
                          .out_type = p.out_type,
                          .out = p.out,
                          .lse = p.lse},
                         stream);
  }
}

}  // namespace latte::cuda
