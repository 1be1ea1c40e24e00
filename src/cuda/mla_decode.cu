// MLA decode kernel (see mla_decode.hpp for the contract).
//
// Work decomposition: one CTA per (row group, KV split, sequence). The rows of a sequence are its
// (query token, head) pairs, r = t * n_heads + h; all of them share the same latent cache, so one CTA
// takes kRows = 16 * kHeadBlocks of them and reads each cache tile once for all of them.
// Per tile of kTileTokens positions (kStages-deep cp.async ring in shared memory):
//   1. S = Q K^T with mma.m16n8k16 (bf16 -> fp32): warp (row block rb, slice) computes 16 rows x 16
//      positions over the 576 dims; scaled by scale*log2(e), masked, stored to shared memory.
//   2. Online softmax + O += P V: warp (rb, slice) reads all kTileTokens scores of its 16 rows, updates
//      the running max/sum, and accumulates its 512/kSlices columns of O in registers (V = the first
//      512 values of the same cache rows: ldmatrix.trans).
// Partial results of a split (normalised O and LSE) go to the workspace; split_kv_combine merges them.
// With one split the kernel writes the final output directly.
//
// Back-of-envelope (H200, 4.28 TB/s copy, ~990 TFLOP/s dense bf16 datasheet, mma.sync ~2/3 of that):
//   bytes  = B * ctx * 1152 (latent cache, read once per head group)
//   FLOPs  = 2 * B * N * q_len * ctx * (576 + 512)
//   16 heads, B=64, ctx=8192: 604 MB -> 141 us at copy speed; 18 GFLOP (memory-bound, 30 FLOP/B).
//   128 heads: 146 GFLOP -> >= 147 us even at the datasheet tensor peak: compute-bound (242 FLOP/B).
#include "cuda/mla_decode.hpp"

#include "cuda/bf16_mma.cuh"
#include "cuda/check.hpp"
#include "cuda/kv_cache_layout.cuh"
#include "cuda/split_kv_combine.hpp"

#include <algorithm>
#include <string>

namespace latte::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <int kHeadBlocks_, int kTileTokens_, int kStages_>
struct MlaDecodeTraits {
  static constexpr int kHeadBlocks = kHeadBlocks_;  // 16-row tensor-core blocks per CTA
  static constexpr int kTileTokens = kTileTokens_;  // cache positions per pipeline stage
  static constexpr int kStages = kStages_;          // shared-memory stages; kStages - 1 tiles in flight
  static constexpr int kRows = 16 * kHeadBlocks;
  static constexpr int kSlices = kTileTokens / 16;  // warps per row block = 16-position k-steps of P V
  static constexpr int kWarps = kHeadBlocks * kSlices;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kColsPerWarp = kMlaLatentDim / kSlices;  // O columns per warp
  static constexpr int kOutTiles = kColsPerWarp / 8;            // n8 accumulator tiles per warp
  static constexpr int kQkSteps = kMlaCacheRow / 16;            // 36 k-steps of Q K^T
  static constexpr int kRowElems = kMlaCacheRow + 8;            // padded smem row, 1168 B: conflict-free ldmatrix
  static constexpr int kChunksPerRow = kMlaCacheRow / 8;        // 72 16-byte chunks per cache row
  static constexpr int kScoreStride = kTileTokens + 8;          // floats; = 8 mod 32: conflict-free float2
  static constexpr int kMetaSlots = kStages + 1;                // tile metadata ring (one tile ahead)
  static constexpr size_t kQBytes = size_t{kRows} * kRowElems * sizeof(bf16);
  static constexpr size_t kKvBytes = size_t{kStages} * kTileTokens * kRowElems * sizeof(bf16);
  static constexpr size_t kScoreBytes = size_t{kRows} * kScoreStride * sizeof(float);
  static constexpr size_t kMetaOffsetBytes = size_t{kMetaSlots} * kTileTokens * sizeof(int64_t);
  static constexpr size_t kMetaPosBytes = size_t{kMetaSlots} * kTileTokens * sizeof(int32_t);
  static constexpr size_t kSmemBytes = kQBytes + kKvBytes + kScoreBytes + kMetaOffsetBytes + kMetaPosBytes;
  static_assert(kTileTokens % 16 == 0 && kMlaLatentDim % kSlices == 0 && kColsPerWarp % 16 == 0);
  static_assert(kThreads >= kTileTokens, "one thread per tile row resolves the row addresses");
  static_assert((kRowElems * sizeof(bf16)) % 16 == 0 && kScoreStride % 32 == 8);
};

// Configurations compiled (keep this list short: every entry is compiled for every architecture).
using MlaDecodeFewRows = MlaDecodeTraits<1, 64, 2>;    // <= 32 rows: memory-bound, 4 warps, 171 KB smem
using MlaDecodeManyRows = MlaDecodeTraits<4, 32, 3>;   // > 32 rows: 64 rows per CTA, 8 warps, 194 KB smem
using MlaDecodeSmallSmem = MlaDecodeTraits<1, 32, 2>;  // devices with ~100 KB per block (sm_120), 2 warps

/// Kernel arguments: the caller's params plus the plan.
struct MlaDecodeLaunch {
  MlaDecodeParams p;
  int rows_total;  // q_len * n_heads
  int splits;
  int chunk;           // slots per split
  float score_scale;   // scale * log2(e): scores are kept in the log2 domain
  float* partial_out;  // [batch * rows_total, splits, 512] (splits > 1)
  float* partial_lse;  // [batch * rows_total, splits]
};

template <class Tr>
__global__ void __launch_bounds__(Tr::kThreads, 1) mla_decode_kernel(const MlaDecodeLaunch L) {
  constexpr int T = Tr::kTileTokens;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* q_s = reinterpret_cast<bf16*>(smem);                                     // [kRows][kRowElems]
  bf16* kv_s = reinterpret_cast<bf16*>(smem + Tr::kQBytes);                      // [kStages][T][kRowElems]
  float* score_s = reinterpret_cast<float*>(smem + Tr::kQBytes + Tr::kKvBytes);  // [kRows][kScoreStride]
  int64_t* meta_offset = reinterpret_cast<int64_t*>(smem + Tr::kQBytes + Tr::kKvBytes + Tr::kScoreBytes);
  int32_t* meta_pos = reinterpret_cast<int32_t*>(meta_offset + Tr::kMetaSlots * T);  // [kMetaSlots][T]

  const MlaDecodeParams& p = L.p;
  const int row_group = blockIdx.x;  // fastest-varying: row groups of one (sequence, split) share L2
  const int split = blockIdx.y;
  const int b = blockIdx.z;
  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int g = lane / 4;                // fragment row
  const int tq = lane % 4;               // fragment column pair
  const int rb = warp / Tr::kSlices;     // row block of this warp
  const int slice = warp % Tr::kSlices;  // position slice (scores) and column slice (P V)
  const int row0 = row_group * Tr::kRows;

  const int kv_len = max(0, p.kv_lens[b]);
  const bool sparse = p.indices != nullptr;
  const int n_slots = sparse ? p.top_k : kv_len;
  const int begin = split * L.chunk;
  const int end = min(n_slots, begin + L.chunk);
  const int n_tiles = end > begin ? (end - begin + T - 1) / T : 0;

  // Slot `r` of tile `tile` -> the raw position (dense) or index entry (sparse); -1 past the range.
  auto raw_position = [&](int tile, int r) -> int {
    const int slot = begin + tile * T + r;
    if (slot >= end) return -1;
    return sparse ? __ldg(&p.indices[static_cast<int64_t>(b) * p.index_stride + slot]) : slot;
  };
  auto valid_position = [&](int raw) { return raw >= 0 && raw < kv_len ? raw : -1; };

  // Causal limit (number of visible positions) of this thread's two fragment rows.
  int row_limit[2];
  for (int half = 0; half < 2; ++half) {
    const int row = min(row0 + rb * 16 + g + 8 * half, L.rows_total - 1);
    row_limit[half] = sparse ? kv_len : kv_len - p.q_len + 1 + row / p.n_heads;
  }

  float o[Tr::kOutTiles][4];
  for (int n = 0; n < Tr::kOutTiles; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY};  // running max (log2 domain) of rows g and g+8
  float l_run[2] = {0.0f, 0.0f};            // this thread's part of the running sum

  if (n_tiles > 0) {
    // Row metadata of the first kStages tiles, resolved before any copy is issued.
    int next_pos = -1;  // thread r < T: position of row r of the tile kStages ahead of the current one
    if (tid < T) {
      for (int j = 0; j < Tr::kStages; ++j) {
        const int pos = valid_position(raw_position(j, tid));
        meta_pos[j * T + tid] = pos;
        meta_offset[j * T + tid] = pos >= 0 ? paged_rows_offset(p.cache, b, pos) : -1;
      }
      next_pos = valid_position(raw_position(Tr::kStages, tid));
    }
    __syncthreads();

    // Queries: rows past rows_total are zero.
    for (int c = tid; c < Tr::kRows * Tr::kChunksPerRow; c += Tr::kThreads) {
      const int r = c / Tr::kChunksPerRow;
      const int col = c % Tr::kChunksPerRow;
      const int row = row0 + r;
      const bool valid = row < L.rows_total;
      const int t = valid ? row / p.n_heads : 0;
      const int h = valid ? row % p.n_heads : 0;
      const int64_t token = static_cast<int64_t>(b) * p.q_len + t;
      const bf16* src =
          col < kMlaLatentDim / 8
              ? p.q_latent + token * p.q_latent_token_stride + h * p.q_latent_head_stride + col * 8
              : p.q_rope + token * p.q_rope_token_stride + h * p.q_rope_head_stride + (col - kMlaLatentDim / 8) * 8;
      mma::cp_async_16(q_s + r * Tr::kRowElems + col * 8, valid ? src : p.q_latent, valid);
    }

    auto load_tile = [&](int tile) {
      bf16* dst = kv_s + (tile % Tr::kStages) * T * Tr::kRowElems;
      const int64_t* offsets = meta_offset + (tile % Tr::kMetaSlots) * T;
      for (int c = tid; c < T * Tr::kChunksPerRow; c += Tr::kThreads) {
        const int r = c / Tr::kChunksPerRow;
        const int col = c % Tr::kChunksPerRow;
        const int64_t offset = offsets[r];
        mma::cp_async_16(dst + r * Tr::kRowElems + col * 8, p.cache.data + (offset >= 0 ? offset : 0) + col * 8,
                         offset >= 0);
      }
    };
    for (int j = 0; j < Tr::kStages - 1; ++j) {
      if (j < n_tiles) load_tile(j);
      mma::cp_async_commit();  // group j holds tile j (group 0 also the queries)
    }

    for (int tile = 0; tile < n_tiles; ++tile) {
      if (tile + Tr::kStages - 1 < n_tiles) load_tile(tile + Tr::kStages - 1);
      mma::cp_async_commit();
      // Start the metadata loads of tile + kStages now; they are consumed at the end of the iteration.
      int64_t next_page = 0;
      int next_raw = -1;
      if (tid < T) {
        if (next_pos >= 0) next_page = paged_rows_page(p.cache, b, next_pos);
        next_raw = raw_position(tile + Tr::kStages + 1, tid);
      }
      mma::cp_async_wait<Tr::kStages - 1>();  // this thread's copies of `tile` have landed
      __syncthreads();                        // ... and everybody's

      const bf16* kv_tile = kv_s + (tile % Tr::kStages) * T * Tr::kRowElems;
      const int32_t* positions = meta_pos + (tile % Tr::kMetaSlots) * T;

      // 1. Scores of 16 rows x 16 positions.
      {
        float acc[2][4] = {};
        const bf16* a_base = q_s + (rb * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * Tr::kRowElems + (lane / 16) * 8;
        const bf16* b_base =
            kv_tile + (slice * 16 + (lane / 16) * 8 + (lane % 8)) * Tr::kRowElems + ((lane / 8) % 2) * 8;
#pragma unroll 12
        for (int kk = 0; kk < Tr::kQkSteps; ++kk) {
          uint32_t a[4], bk[4];
          mma::ldmatrix_x4(a, a_base + kk * 16);
          mma::ldmatrix_x4(bk, b_base + kk * 16);
          mma::mma_bf16_16816(acc[0], a, bk[0], bk[1]);
          mma::mma_bf16_16816(acc[1], a, bk[2], bk[3]);
        }
#pragma unroll
        for (int n = 0; n < 2; ++n) {
          const int col = slice * 16 + n * 8 + 2 * tq;
          const int pos0 = positions[col];
          const int pos1 = positions[col + 1];
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            float2 v;
            v.x = pos0 >= 0 && pos0 < row_limit[half] ? acc[n][2 * half] * L.score_scale : -INFINITY;
            v.y = pos1 >= 0 && pos1 < row_limit[half] ? acc[n][2 * half + 1] * L.score_scale : -INFINITY;
            *reinterpret_cast<float2*>(score_s + (rb * 16 + g + 8 * half) * Tr::kScoreStride + col) = v;
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
            const float2 lo = *reinterpret_cast<const float2*>(srow[half] + kk * 16 + 2 * tq);
            const float2 hi = *reinterpret_cast<const float2*>(srow[half] + kk * 16 + 8 + 2 * tq);
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
          float pr[2][4];
#pragma unroll
          for (int half = 0; half < 2; ++half) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              pr[half][i] = mma::round_to_bf16(mma::exp2_shifted(s[kk][half][i], m_run[half]));
              l_run[half] += pr[half][i];
            }
          }
          pa[kk][0] = mma::pack_bf16x2(pr[0][0], pr[0][1]);
          pa[kk][1] = mma::pack_bf16x2(pr[1][0], pr[1][1]);
          pa[kk][2] = mma::pack_bf16x2(pr[0][2], pr[0][3]);
          pa[kk][3] = mma::pack_bf16x2(pr[1][2], pr[1][3]);
        }
#pragma unroll
        for (int n = 0; n < Tr::kOutTiles; ++n) {
          o[n][0] *= alpha[0];
          o[n][1] *= alpha[0];
          o[n][2] *= alpha[1];
          o[n][3] *= alpha[1];
        }
        const bf16* v_base =
            kv_tile + (((lane / 8) % 2) * 8 + (lane % 8)) * Tr::kRowElems + slice * Tr::kColsPerWarp + (lane / 16) * 8;
#pragma unroll
        for (int kk = 0; kk < Tr::kSlices; ++kk) {
#pragma unroll
          for (int np = 0; np < Tr::kOutTiles / 2; ++np) {
            uint32_t bv[4];
            mma::ldmatrix_x4_trans(bv, v_base + kk * 16 * Tr::kRowElems + np * 16);
            mma::mma_bf16_16816(o[2 * np], pa[kk], bv[0], bv[1]);
            mma::mma_bf16_16816(o[2 * np + 1], pa[kk], bv[2], bv[3]);
          }
        }
      }

      // Metadata of tile + kStages (its loads were started above), for the copy issued next iteration.
      if (tid < T) {
        const int slot = (tile + Tr::kStages) % Tr::kMetaSlots;
        meta_pos[slot * T + tid] = next_pos;
        meta_offset[slot * T + tid] = next_pos >= 0 ? paged_rows_offset_in_page(p.cache, next_page, next_pos) : -1;
        next_pos = valid_position(next_raw);
      }
      __syncthreads();  // the stage and the scores are free for the next iteration
    }
  }

  // Epilogue: normalise and write rows g and g+8 of this warp's row block.
  const int64_t first_row = static_cast<int64_t>(b) * L.rows_total;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const float l = mma::quad_sum(l_run[half]);
    const int row = row0 + rb * 16 + g + 8 * half;
    if (row >= L.rows_total) continue;
    const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
    const float lse = l > 0.0f ? (m_run[half] + log2f(l)) * kLn2 : -INFINITY;
    const int64_t out_row = first_row + row;  // = (b * q_len + t) * n_heads + h
    if (L.splits == 1) {
#pragma unroll
      for (int n = 0; n < Tr::kOutTiles; ++n) {
        const int col = slice * Tr::kColsPerWarp + n * 8 + 2 * tq;
        const int64_t index = out_row * kMlaLatentDim + col;
        const float x = o[n][2 * half] * inv_l;
        const float y = o[n][2 * half + 1] * inv_l;
        if (p.out_type == AttnOutputType::f32) {
          *reinterpret_cast<float2*>(static_cast<float*>(p.out) + index) = make_float2(x, y);
        } else {
          *reinterpret_cast<__nv_bfloat162*>(static_cast<bf16*>(p.out) + index) = __floats2bfloat162_rn(x, y);
        }
      }
      if (p.lse != nullptr && slice == 0 && tq == 0) p.lse[out_row] = lse;
    } else {
      const int64_t part_row = out_row * L.splits + split;
#pragma unroll
      for (int n = 0; n < Tr::kOutTiles; ++n) {
        const int col = slice * Tr::kColsPerWarp + n * 8 + 2 * tq;
        *reinterpret_cast<float2*>(L.partial_out + part_row * kMlaLatentDim + col) =
            make_float2(o[n][2 * half] * inv_l, o[n][2 * half + 1] * inv_l);
      }
      if (slice == 0 && tq == 0) L.partial_lse[part_row] = lse;
    }
  }
}

struct ConfigInfo {
  void (*kernel)(MlaDecodeLaunch);
  int rows, tile_tokens, threads;
  size_t smem_bytes;
};

template <class Tr>
ConfigInfo config_info() {
  return {&mla_decode_kernel<Tr>, Tr::kRows, Tr::kTileTokens, Tr::kThreads, Tr::kSmemBytes};
}

ConfigInfo config_by_id(int id) {
  switch (id) {
    case 0:
      return config_info<MlaDecodeFewRows>();
    case 1:
      return config_info<MlaDecodeManyRows>();
    case 2:
      return config_info<MlaDecodeSmallSmem>();
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
  int sm_count = 0;
  int max_smem_optin = 0;
};

DeviceLimits current_device_limits() {
  int device = 0;
  LATTE_CUDA_CHECK(cudaGetDevice(&device));
  DeviceLimits limits;
  LATTE_CUDA_CHECK(cudaDeviceGetAttribute(&limits.sm_count, cudaDevAttrMultiProcessorCount, device));
  LATTE_CUDA_CHECK(cudaDeviceGetAttribute(&limits.max_smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return limits;
}

}  // namespace

MlaDecodePlan plan_mla_decode(const MlaDecodeParams& p, int force_splits) {
  check_params(p);
  const DeviceLimits device = current_device_limits();
  const int rows_total = p.q_len * p.n_heads;
  int config = rows_total <= 32 ? 0 : 1;
  if (config_by_id(config).smem_bytes > static_cast<size_t>(device.max_smem_optin)) config = 2;
  const ConfigInfo info = config_by_id(config);
  require(info.smem_bytes <= static_cast<size_t>(device.max_smem_optin), ErrorCode::unsupported,
          describe(p) + ": the device allows " + std::to_string(device.max_smem_optin) +
              " bytes of shared memory per block, the kernel needs " + std::to_string(info.smem_bytes));

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
  int best_splits = 1;
  if (force_splits > 0) {
    best_splits = std::min(force_splits, tiles);
  } else {
    // Cost in tile-times (one tile load per SM): waves * (tiles per split + ~2 tiles of per-CTA
    // start-up), plus, with several splits, a launch (~1) and the partial results written and read
    // again (4 bytes per value, twice) spread over the SMs.
    const double tile_bytes = static_cast<double>(info.tile_tokens) * kMlaCacheRow * 2;
    const double partial_bytes_per_split = static_cast<double>(p.batch) * rows_total * kMlaLatentDim * 4 * 2;
    double best_cost = 1e300;
    for (int s = 1; s <= std::min(tiles, kMaxSplits); ++s) {
      const int tiles_per_split = (tiles + s - 1) / s;
      if ((tiles + tiles_per_split - 1) / tiles_per_split != s) continue;  // would leave splits empty
      const int64_t waves = (base_ctas * s + ctas_per_wave - 1) / ctas_per_wave;
      const double combine = s > 1 ? 1.0 + s * partial_bytes_per_split / (tile_bytes * ctas_per_wave) : 0.0;
      const double cost = static_cast<double>(waves * (tiles_per_split + 2)) + combine;
      if (cost < best_cost) {
        best_cost = cost;
        best_splits = s;
      }
    }
  }
  const int tiles_per_split = (tiles + best_splits - 1) / best_splits;
  plan.splits = (tiles + tiles_per_split - 1) / tiles_per_split;
  plan.chunk = tiles_per_split * info.tile_tokens;
  const int64_t out_rows = static_cast<int64_t>(p.batch) * rows_total;
  plan.workspace_bytes =
      plan.splits > 1 ? static_cast<size_t>(out_rows) * plan.splits * (kMlaLatentDim + 1) * sizeof(float) : 0;
  return plan;
}

void run_mla_decode(const MlaDecodeParams& p, const MlaDecodePlan& plan, void* workspace, size_t workspace_bytes,
                    cudaStream_t stream) {
  check_params(p);
  const ConfigInfo info = config_by_id(plan.config);
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
  const size_t partial_out_bytes = static_cast<size_t>(out_rows) * plan.splits * kMlaLatentDim * sizeof(float);
  if (plan.splits > 1) {
    require(workspace != nullptr && workspace_bytes >= plan.workspace_bytes &&
                reinterpret_cast<uintptr_t>(workspace) % 16 == 0,
            ErrorCode::invalid_argument,
            what + ": needs a 16-byte aligned workspace of " + std::to_string(plan.workspace_bytes) + " bytes, got " +
                std::to_string(workspace_bytes));
  }

  MlaDecodeLaunch launch{};
  launch.p = p;
  launch.rows_total = rows_total;
  launch.splits = plan.splits;
  launch.chunk = plan.chunk;
  launch.score_scale = p.scale * kLog2e;
  if (plan.splits > 1) {
    launch.partial_out = static_cast<float*>(workspace);
    launch.partial_lse = reinterpret_cast<float*>(static_cast<char*>(workspace) + partial_out_bytes);
  }

  LATTE_CUDA_CHECK(cudaFuncSetAttribute(info.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(info.smem_bytes)));
  const dim3 grid(plan.head_groups, plan.splits, p.batch);
  info.kernel<<<grid, info.threads, info.smem_bytes, stream>>>(launch);
  LATTE_CUDA_CHECK_LAUNCH();

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
