// Device-side pieces shared by the MLA decode kernels (mla_decode.cu, mla_decode_wide.cu): the CTA's
// KV range, the ring that resolves tile rows (positions, cache offsets) ahead of their copies, the
// query and cache-tile loaders, and the result writer (final output or split partials).
#pragma once

#include <cstdint>
#include "cuda/bf16_mma.cuh"
#include "cuda/chunk_deal.cuh"
#include "cuda/cluster.cuh"
#include "cuda/kv_cache_layout.cuh"
#include "cuda/launch.cuh"
#include "cuda/mla_decode_kernels.hpp"

namespace latte::cuda::mla_decode_detail {

using bf16 = __nv_bfloat16;

inline constexpr int kChunksPerRow = kMlaCacheRow / 8;  // 72 16-byte chunks per cache row
inline constexpr int kSmemRowElems = kMlaCacheRow + 8;  // padded smem row, 1168 B: conflict-free ldmatrix
inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

/// The slots [begin, end) this CTA covers (positions when dense, index-row entries when sparse).
struct CtaRange {
  int b;
  int kv_len;
  bool sparse;
  int begin;
  int end;
  int n_tiles;

  __device__ CtaRange(const Launch& L, int split, int batch_entry, int tile_tokens) {
    b = batch_entry;
    kv_len = max(0, L.p.kv_lens[b]);
    sparse = L.p.indices != nullptr;
    const int n_slots = sparse ? L.p.top_k : kv_len;
    begin = split * L.chunk;
    end = min(n_slots, begin + L.chunk);
    n_tiles = end > begin ? (end - begin + tile_tokens - 1) / tile_tokens : 0;
  }

  /// Number of positions (row) `row` of this sequence may see: causal for dense, all valid for sparse.
  __device__ int visible_limit(const Launch& L, int row) const {
    row = min(row, L.rows_total - 1);
    return sparse ? kv_len : kv_len - L.p.q_len + 1 + row / L.p.n_heads;
  }
};

/// Per-tile row metadata in a shared-memory ring of kStages + 1 tiles: the cache position of every
/// tile row (-1: outside the range or an invalid index; its smem row is zero-filled and its score
/// masked) and the element offset of that row in the cache. Thread r < T owns row r. The index entry
/// of tile j + kStages + 1 and the page of tile j + kStages are loaded during iteration j and stored
/// at its end, so their global-load latency hides behind a tile of compute.
template <int T, int kStages>
struct TileRowRing {
  static constexpr int kSlots = kStages + 1;
  static constexpr size_t kBytes = size_t{kSlots} * T * (sizeof(int64_t) + sizeof(int32_t));

  int64_t* offsets;    // [kSlots][T]
  int32_t* positions;  // [kSlots][T]
  int next_pos = -1;   // row threadIdx.x of tile (current + kStages): its valid position or -1

  struct Pending {
    int64_t page = 0;
    int raw = -1;
  };

  __device__ explicit TileRowRing(unsigned char* smem)
      : offsets(reinterpret_cast<int64_t*>(smem)), positions(reinterpret_cast<int32_t*>(offsets + kSlots * T)) {}

  __device__ static int raw_position(const Launch& L, const CtaRange& r, int tile, int row) {
    const int slot = r.begin + tile * T + row;
    if (slot >= r.end) return -1;
    return r.sparse ? __ldg(&L.p.indices[static_cast<int64_t>(r.b) * L.p.index_stride + slot]) : slot;
  }
  __device__ static int valid_position(const CtaRange& r, int raw) { return raw >= 0 && raw < r.kv_len ? raw : -1; }

  /// Resolves tiles 0 .. kStages-1 (blocking loads) and primes next_pos. The caller syncs afterwards.
  __device__ void resolve_first(const Launch& L, const CtaRange& r) {
    const int row = threadIdx.x;
    if (row >= T) return;
    for (int j = 0; j < kStages; ++j) {
      const int pos = valid_position(r, raw_position(L, r, j, row));
      positions[j * T + row] = pos;
      offsets[j * T + row] = pos >= 0 ? paged_rows_offset(L.p.cache, r.b, pos) : -1;
    }
    next_pos = valid_position(r, raw_position(L, r, kStages, row));
  }
  /// Starts the loads for tiles tile + kStages (its page) and tile + kStages + 1 (its index entry).
  __device__ Pending start(const Launch& L, const CtaRange& r, int tile) const {
    Pending pending;
    if (threadIdx.x < T) {
      if (next_pos >= 0) pending.page = paged_rows_page(L.p.cache, r.b, next_pos);
      pending.raw = raw_position(L, r, tile + kStages + 1, threadIdx.x);
    }
    return pending;
  }
  /// Stores tile + kStages's metadata (read after the caller's next barrier).
  __device__ void finish(const Launch& L, const CtaRange& r, int tile, const Pending& pending) {
    const int row = threadIdx.x;
    if (row >= T) return;
    const int slot = (tile + kStages) % kSlots;
    positions[slot * T + row] = next_pos;
    offsets[slot * T + row] = next_pos >= 0 ? paged_rows_offset_in_page(L.p.cache, pending.page, next_pos) : -1;
    next_pos = valid_position(r, pending.raw);
  }
  __device__ const int32_t* tile_positions(int tile) const { return positions + (tile % kSlots) * T; }
  __device__ const int64_t* tile_offsets(int tile) const { return offsets + (tile % kSlots) * T; }
};

/// Issues the copies of rows row0 .. row0 + kRows - 1 of the queries of sequence b into q_s
/// ([kRows][kSmemRowElems]); rows past rows_total are zero-filled.
template <int kRows, int kThreads>
__device__ __forceinline__ void load_query_rows(bf16* q_s, const Launch& L, int b, int row0) {
  using Deal = ChunkDeal<kRows, kChunksPerRow, kThreads>;
  static_assert(kMlaLatentDim == (Deal::kChunks - 1) * Deal::kStep, "a thread's last chunk of a row is a rope one");
  const MlaDecodeParams& p = L.p;
  const int first = Deal::first_element();
#pragma unroll
  for (int w = 0; w < Deal::kWaves; ++w) {
    const int r = Deal::row(w);
    const int row = row0 + r;
    const bool valid = row < L.rows_total;
    const int t = valid ? row / p.n_heads : 0;
    const int h = valid ? row % p.n_heads : 0;
    const int64_t token = static_cast<int64_t>(b) * p.q_len + t;
    // a zero-filled row reads nothing, but its addresses stay inside the first query's row
    const bf16* latent =
        (valid ? p.q_latent + token * p.q_latent_token_stride + h * p.q_latent_head_stride : p.q_latent) + first;
    const bf16* rope =
        (valid ? p.q_rope + token * p.q_rope_token_stride + h * p.q_rope_head_stride : p.q_latent) + first;
    bf16* d = q_s + r * kSmemRowElems + first;
    Deal::template copy_row<Deal::kChunks - 1>(d, latent, valid);
    mma::cp_async_16(d + Deal::kStep * (Deal::kChunks - 1), rope, valid);
  }
}

/// Every row of a tile (load_kv_tile's default filter).
struct AllTileRows {
  __device__ bool operator()(int /*row*/) const { return true; }
};

/// Issues the copies of one cache tile (T rows at `offsets`, -1 = zero-fill) into dst ([T][kSmemRowElems]); with
/// `keep`, of the rows r for which keep(r) holds only.
template <int T, int kThreads, class Keep = AllTileRows>
__device__ __forceinline__ void load_kv_tile(bf16* dst, const int64_t* offsets, const bf16* cache, Keep keep = {}) {
  using Deal = ChunkDeal<T, kChunksPerRow, kThreads>;
  const int first = Deal::first_element();
#pragma unroll
  for (int w = 0; w < Deal::kWaves; ++w) {
    const int r = Deal::row(w);
    if (!keep(r)) continue;
    const int64_t offset = offsets[r];
    const bool valid = offset >= 0;
    const bf16* src = cache + (valid ? offset : 0) + first;  // zero-fill: reads nothing, inside row 0
    Deal::copy_row(dst + r * kSmemRowElems + first, src, valid);
  }
}

/// load_kv_tile for part of the tile's rows: those at positions before `fresh` (and the zero-filled ones, which
/// read nothing) when `earlier`, else the others. The two parts together issue load_kv_tile's copies.
template <int T, int kThreads>
__device__ __forceinline__ void load_kv_tile_part(bf16* dst, const int64_t* offsets, const int32_t* positions,
                                                  const bf16* cache, int fresh, bool earlier) {
  load_kv_tile<T, kThreads>(dst, offsets, cache, [=](int r) { return (positions[r] < fresh) == earlier; });
}

/// Whether a CTA copies its first tiles' earlier rows before it waits for its producers
/// (MlaDecodeParams::earlier_rows_ready; dense mode, a CTA with tiles), and from which position the rows are new.
__device__ __forceinline__ bool early_tiles(const Launch& L, const CtaRange& r) {
  return L.p.earlier_rows_ready && !r.sparse && r.n_tiles > 0;
}
__device__ __forceinline__ int first_fresh_position(const Launch& L, const CtaRange& r) { return r.kv_len - L.p.q_len; }

/// The start of a CTA's tiles, called by every thread: resolves tiles 0 .. kStages - 1 (TileRowRing::resolve_first)
/// and, with MlaDecodeParams::earlier_rows_ready, first issues the copies of the earlier rows of the first `n_first`
/// tiles (stage j at kv_s + j T kSmemRowElems) as one cp.async group, then waits for the producers (launch.cuh; without
/// earlier_rows_ready the kernel waited at its top). Returns whether those copies were made: copy_first_tile then adds
/// the newest rows.
template <int T, int kThreads, class Ring>
__device__ __forceinline__ bool begin_tiles(const Launch& L, const CtaRange& range, Ring& ring, bf16* kv_s,
                                            int n_first) {
  const bool early = early_tiles(L, range);
  if (early) {
    ring.resolve_first(L, range);
    __syncthreads();
    for (int j = 0; j < n_first && j < range.n_tiles; ++j) {
      load_kv_tile_part<T, kThreads>(kv_s + j * T * kSmemRowElems, ring.tile_offsets(j), ring.tile_positions(j),
                                     L.p.cache.data, first_fresh_position(L, range), true);
    }
    mma::cp_async_commit();  // the oldest group: complete whenever tile 0's is
  }
  if (L.p.earlier_rows_ready) {
    wait_for_producers();
    allow_dependents();
  }
  if (range.n_tiles > 0 && !early) {
    ring.resolve_first(L, range);
    __syncthreads();
  }
  return early;
}

/// The copies of first tile j into `stage`: the whole tile, or its newest rows where begin_tiles copied the others.
template <int T, int kThreads, class Ring>
__device__ __forceinline__ void copy_first_tile(const Launch& L, const CtaRange& range, const Ring& ring, bf16* stage,
                                                int j, bool early) {
  if (early) {
    load_kv_tile_part<T, kThreads>(stage, ring.tile_offsets(j), ring.tile_positions(j), L.p.cache.data,
                                   first_fresh_position(L, range), false);
  } else {
    load_kv_tile<T, kThreads>(stage, ring.tile_offsets(j), L.p.cache.data);
  }
}

/// Writes columns col, col+1 of result row `row` (< rows_total) of sequence b: the final output when
/// there is one split, else this split's partial. Values are already normalised by the row sum.
__device__ __forceinline__ void store_output_pair(const Launch& L, int b, int split, int row, int col, float x,
                                                  float y) {
  const int64_t out_row = static_cast<int64_t>(b) * L.rows_total + row;  // = (b * q_len + t) * n_heads + h
  if (L.splits == 1) {
    const int64_t index = out_row * kMlaLatentDim + col;
    if (L.p.out_type == AttnOutputType::f32) {
      *reinterpret_cast<float2*>(static_cast<float*>(L.p.out) + index) = make_float2(x, y);
    } else {
      *reinterpret_cast<__nv_bfloat162*>(static_cast<bf16*>(L.p.out) + index) = __floats2bfloat162_rn(x, y);
    }
  } else {
    *reinterpret_cast<float2*>(L.partial_out + (out_row * L.splits + split) * kMlaLatentDim + col) = make_float2(x, y);
  }
}

/// The natural-log LSE of a row from its log2-domain max and its sum (-inf for a row that saw nothing).
__device__ __forceinline__ float natural_lse(float max_log2, float sum) {
  return sum > 0.0f ? (max_log2 + log2f(sum)) * kLn2 : -INFINITY;
}

/// Writes the natural-log LSE of result row `row` (from the log2-domain max and the row sum).
__device__ __forceinline__ void store_lse(const Launch& L, int b, int split, int row, float max_log2, float sum) {
  const float lse = natural_lse(max_log2, sum);
  const int64_t out_row = static_cast<int64_t>(b) * L.rows_total + row;
  if (L.splits == 1) {
    if (L.p.lse != nullptr) L.p.lse[out_row] = lse;
  } else {
    L.partial_lse[out_row * L.splits + split] = lse;
  }
}

/// The merge of a cluster launch (Launch::cluster): the L.splits CTAs of one (row group, sequence) form a
/// cluster, and each has put its kRows normalised rows into its own shared memory at `part` ([kRows][512]
/// fp32) and their natural-log LSEs after them ([kRows]). After a cluster barrier, CTA r merges columns
/// [r * 128 / S, (r + 1) * 128 / S) (float4 units) of every row from all S CTAs' shared memory, weighting
/// split s by exp(lse_s - lse) as split_kv_combine does, and writes the final rows; CTA 0 writes the LSEs.
/// `scratch` holds kRows * S floats of this CTA's shared memory (not `part`). Every thread of the CTA
/// calls it, and returns only after the cluster's last read of its shared memory.
template <int kRows, int kThreads>
__device__ __forceinline__ void cluster_merge(const Launch& L, int b, int row0, float* part, float* scratch) {
  constexpr int kUnits = kMlaLatentDim / 4;  // float4 units per row
  const int S = L.splits;
  const unsigned me = cluster::rank();
  const float* lse_part = part + kRows * kMlaLatentDim;
  cluster::sync();  // every CTA's rows and LSEs are in its shared memory
  for (int i = threadIdx.x; i < kRows * S; i += kThreads) scratch[i] = cluster::load(lse_part + i / S, i % S);
  __syncthreads();
  if (threadIdx.x < kRows) {
    float* w = scratch + threadIdx.x * S;  // this row's LSEs, then its split weights (-1: an empty split)
    float max_lse = -INFINITY;
    for (int s = 0; s < S; ++s) max_lse = fmaxf(max_lse, w[s]);
    float total = 0.0f;
    if (max_lse != -INFINITY) {
      for (int s = 0; s < S; ++s) total += expf(w[s] - max_lse);
    }
    const float row_lse = max_lse == -INFINITY ? -INFINITY : max_lse + logf(total);
    for (int s = 0; s < S; ++s) w[s] = w[s] == -INFINITY || row_lse == -INFINITY ? -1.0f : expf(w[s] - row_lse);
    const int row = row0 + static_cast<int>(threadIdx.x);
    if (me == 0 && row < L.rows_total && L.p.lse != nullptr) {
      L.p.lse[static_cast<int64_t>(b) * L.rows_total + row] = row_lse;
    }
  }
  __syncthreads();
  const int u0 = static_cast<int>(me) * kUnits / S;
  const int n = (static_cast<int>(me) + 1) * kUnits / S - u0;
  const float4* part4 = reinterpret_cast<const float4*>(part);
  for (int i = threadIdx.x; i < kRows * n; i += kThreads) {
    const int r = i / n;
    const int u = u0 + i % n;
    const float* w = scratch + r * S;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
    for (int s = 0; s < S; ++s) {
      const float4 v = cluster::load(part4 + r * kUnits + u, s);
      // an empty split's rows may be anything: selected away, never multiplied
      const bool empty = w[s] < 0.0f;
      acc.x += empty ? 0.0f : w[s] * v.x;
      acc.y += empty ? 0.0f : w[s] * v.y;
      acc.z += empty ? 0.0f : w[s] * v.z;
      acc.w += empty ? 0.0f : w[s] * v.w;
    }
    const int row = row0 + r;
    if (row >= L.rows_total) continue;
    const int64_t index = (static_cast<int64_t>(b) * L.rows_total + row) * kMlaLatentDim + 4 * u;
    if (L.p.out_type == AttnOutputType::f32) {
      *reinterpret_cast<float4*>(static_cast<float*>(L.p.out) + index) = acc;
    } else {
      __nv_bfloat162* out = reinterpret_cast<__nv_bfloat162*>(static_cast<bf16*>(L.p.out) + index);
      out[0] = __floats2bfloat162_rn(acc.x, acc.y);
      out[1] = __floats2bfloat162_rn(acc.z, acc.w);
    }
  }
  cluster::sync();  // no CTA leaves while another may still read its shared memory
}

}  // namespace latte::cuda::mla_decode_detail
