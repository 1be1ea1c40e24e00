// DSA lightning-indexer scores (see dsa_indexer.hpp).
//
// One CTA (8 warps) per (4 key tiles of 64 positions, group of 4 query tokens, batch entry); the
// queries stay in shared memory while the key tiles stream through. Warp w takes
// query 4 * group + w / 2 and its heads 16 * (w % 2) .. +15: S = q_I k_I^T (16 heads x 64 positions,
// mma.m16n8k16), then ReLU(scale * S) * w[h] summed over its 16 heads with shuffles; the two head
// halves are added through shared memory and the visible positions written.
#include "cuda/dsa_indexer.hpp"

#include "cuda/bf16_mma.cuh"
#include "cuda/check.hpp"
#include "cuda/kv_cache_layout.cuh"
#include "cuda/launch.cuh"

#include <cstdint>
#include <string>

namespace latte::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kKeyTile = 64;        // positions per CTA
constexpr int kQueriesPerCta = 4;   // query tokens per CTA (share the key tiles)
constexpr int kKeyTilesPerCta = 4;  // key tiles per CTA (share the queries in shared memory)
constexpr int kWarps = 2 * kQueriesPerCta;
constexpr int kThreads = 32 * kWarps;
constexpr int kRowElems = kDsaIndexHeadDim + 8;  // padded smem rows (272 B): conflict-free ldmatrix
constexpr int kChunks = kDsaIndexHeadDim / 8;    // 16-byte chunks per row
constexpr size_t kKeyBytes = size_t{kKeyTile} * kRowElems * sizeof(bf16);
constexpr size_t kQueryBytes = size_t{kQueriesPerCta} * kDsaIndexHeads * kRowElems * sizeof(bf16);
constexpr size_t kPartialBytes = size_t{kQueriesPerCta} * 2 * kKeyTile * sizeof(float);
constexpr size_t kSmemBytes = kKeyBytes + kQueryBytes + kPartialBytes;

__global__ void __launch_bounds__(kThreads) dsa_index_scores_kernel(const DsaIndexScoresParams p) {
  wait_for_producers();  // see launch.cuh
  allow_dependents();
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* k_s = reinterpret_cast<bf16*>(smem);                                  // [kKeyTile][kRowElems]
  bf16* q_s = reinterpret_cast<bf16*>(smem + kKeyBytes);                      // [kQueriesPerCta * 32][kRowElems]
  float* partial = reinterpret_cast<float*>(smem + kKeyBytes + kQueryBytes);  // [kQueriesPerCta][2][kKeyTile]

  const int first_tile = blockIdx.x * kKeyTilesPerCta;
  const int t0 = blockIdx.y * kQueriesPerCta;
  const int b = blockIdx.z;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int kv_len = max(0, p.kv_lens[b]);
  // The last query of the group sees the most positions.
  const int last_t = min(t0 + kQueriesPerCta, p.q_len) - 1;
  const int max_visible = kv_len - p.q_len + last_t + 1;
  if (first_tile * kKeyTile >= max_visible) return;  // uniform over the CTA

  // Queries of the group, loaded once for all key tiles (the first copy group).
  for (int c = threadIdx.x; c < kQueriesPerCta * kDsaIndexHeads * kChunks; c += kThreads) {
    const int r = c / kChunks;  // query * 32 + head
    const int col = c % kChunks;
    const int t = t0 + r / kDsaIndexHeads;
    const bool valid = t < p.q_len;
    const bf16* src = valid ? p.q + (static_cast<int64_t>(b) * p.q_len + t) * p.q_token_stride +
                                  (r % kDsaIndexHeads) * p.q_head_stride + col * 8
                            : p.q;
    mma::cp_async_16(q_s + r * kRowElems + col * 8, src, valid);
  }

  const int query = warp / 2;  // within the CTA
  const int head_half = warp % 2;
  const int t = t0 + query;
  const int g = lane / 4;
  const int tq = lane % 4;
  float w[2] = {0.0f, 0.0f};
  if (t < p.q_len) {
    const float* w_row = p.weights + (static_cast<int64_t>(b) * p.q_len + t) * p.weights_token_stride;
    w[0] = w_row[head_half * 16 + g];
    w[1] = w_row[head_half * 16 + g + 8];
  }

  for (int tile = first_tile; tile < first_tile + kKeyTilesPerCta; ++tile) {
    const int key0 = tile * kKeyTile;
    if (key0 >= max_visible) break;  // uniform over the CTA
    for (int c = threadIdx.x; c < kKeyTile * kChunks; c += kThreads) {
      const int r = c / kChunks;
      const int col = c % kChunks;
      const bool valid = key0 + r < kv_len;
      const bf16* src = valid ? p.k_cache.data + paged_rows_offset(p.k_cache, b, key0 + r) + col * 8 : p.k_cache.data;
      mma::cp_async_16(k_s + r * kRowElems + col * 8, src, valid);
    }
    mma::cp_async_commit();
    mma::cp_async_wait<0>();
    __syncthreads();  // the key tile (and, the first time, the queries) landed

    float acc[kKeyTile / 8][4] = {};
    if (t < p.q_len) {
      const bf16* a_base = q_s +
                           (query * kDsaIndexHeads + head_half * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * kRowElems +
                           (lane / 16) * 8;
      const bf16* b_base = k_s + ((lane / 16) * 8 + (lane % 8)) * kRowElems + ((lane / 8) % 2) * 8;
#pragma unroll
      for (int kk = 0; kk < kDsaIndexHeadDim / 16; ++kk) {
        uint32_t a[4];
        mma::ldmatrix_x4(a, a_base + kk * 16);
#pragma unroll
        for (int np = 0; np < kKeyTile / 16; ++np) {
          uint32_t bk[4];
          mma::ldmatrix_x4(bk, b_base + np * 16 * kRowElems + kk * 16);
          mma::mma_bf16_16816(acc[2 * np], a, bk[0], bk[1]);
          mma::mma_bf16_16816(acc[2 * np + 1], a, bk[2], bk[3]);
        }
      }
    }
    // Weighted ReLU summed over this warp's 16 heads: rows g and g+8 here, the other rows across lanes.
#pragma unroll
    for (int n = 0; n < kKeyTile / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float v = fmaxf(acc[n][e] * p.scale, 0.0f) * w[0] + fmaxf(acc[n][2 + e] * p.scale, 0.0f) * w[1];
        v += __shfl_xor_sync(0xffffffffu, v, 4);
        v += __shfl_xor_sync(0xffffffffu, v, 8);
        v += __shfl_xor_sync(0xffffffffu, v, 16);
        if (g == 0) partial[(query * 2 + head_half) * kKeyTile + n * 8 + 2 * tq + e] = v;
      }
    }
    __syncthreads();  // both head halves are in `partial`; the key tile is no longer read

    for (int i = threadIdx.x; i < kQueriesPerCta * kKeyTile; i += kThreads) {
      const int q_local = i / kKeyTile;
      const int key = i % kKeyTile;
      const int tt = t0 + q_local;
      const int pos = key0 + key;
      if (tt >= p.q_len || pos >= kv_len - p.q_len + tt + 1) continue;
      const float total = partial[(q_local * 2) * kKeyTile + key] + partial[(q_local * 2 + 1) * kKeyTile + key];
      p.scores[(static_cast<int64_t>(b) * p.q_len + tt) * p.scores_stride + pos] = total;
    }
    __syncthreads();  // `partial` is free for the next tile
  }
}

}  // namespace

void run_dsa_index_scores(const DsaIndexScoresParams& p, cudaStream_t stream) {
  const std::string what = "dsa_index_scores(batch " + std::to_string(p.batch) + ", q_len " + std::to_string(p.q_len) +
                           ", max_kv_len " + std::to_string(p.max_kv_len) + ")";
  auto fail_unless = [&](bool ok, const std::string& message) {
    require(ok, ErrorCode::invalid_argument, what + ": " + message);
  };
  fail_unless(p.batch >= 1 && p.batch <= 65535 && p.q_len >= 1 && p.max_kv_len >= p.q_len,
              "needs 1 <= batch <= 65535, q_len >= 1 and max_kv_len >= q_len");
  fail_unless((p.q_len + kQueriesPerCta - 1) / kQueriesPerCta <= 65535, "q_len is too large for one launch");
  fail_unless(p.q != nullptr && p.weights != nullptr && p.kv_lens != nullptr && p.scores != nullptr,
              "q, weights, kv_lens and scores must be set");
  fail_unless(reinterpret_cast<uintptr_t>(p.q) % 16 == 0 && p.q_token_stride % 8 == 0 && p.q_head_stride % 8 == 0,
              "q must be 16-byte aligned with strides that are multiples of 8 elements");
  fail_unless(p.weights_token_stride >= kDsaIndexHeads, "weights_token_stride must be at least 32");
  fail_unless(p.scores_stride >= p.max_kv_len, "scores_stride must be at least max_kv_len");
  fail_unless(p.scale > 0.0f, "scale must be positive");
  check_paged_rows(p.k_cache, "dsa_index_scores", "k_cache");
  LATTE_CUDA_CHECK(cudaFuncSetAttribute(dsa_index_scores_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(kSmemBytes)));
  const int key_tiles = (p.max_kv_len + kKeyTile - 1) / kKeyTile;
  const dim3 grid((key_tiles + kKeyTilesPerCta - 1) / kKeyTilesPerCta, (p.q_len + kQueriesPerCta - 1) / kQueriesPerCta,
                  p.batch);
  launch_kernel(dsa_index_scores_kernel, grid, kThreads, kSmemBytes, stream, p);
}

}  // namespace latte::cuda
