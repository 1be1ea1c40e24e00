// MLA decode kernel vs a float64 reference written from the formula:
//   score(s) = scale * (q_latent . c_s + q_rope . k_pe_s), o = softmax(score) . c, lse = ln sum exp(score)
// over the causally visible positions (dense) or the listed ones (sparse).
#include "attention_test_support.hpp"
#include "cuda/kv_cache_append.hpp"
#include "cuda/mla_decode.hpp"
#include "support/env_scope.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <latte/error.hpp>

namespace {

using namespace latte::test::attention;
using latte::cuda::AttnOutputType;
using latte::cuda::kMlaCacheRow;
using latte::cuda::kMlaLatentDim;
using latte::cuda::kMlaRopeDim;

struct MlaCase {
  std::string name;
  int n_heads = 16;
  int q_len = 1;
  std::vector<int> kv_lens;
  int page_size = 0;                // 0: one contiguous cache per sequence
  bool concatenated_query = false;  // q_latent | q_rope in one 576-wide row per head
  int top_k = 0;                    // > 0: sparse mode
  float scale = 0.1f;
  bool bf16_out = false;
  int force_splits = 0;
  latte::cuda::MlaSplitMerge merge = latte::cuda::MlaSplitMerge::automatic;
  bool shared_sequence = false;  // every batch entry reads one cache (page_stride 0): a prefill chunk's
                                 // query tokens run as batch entries, each with its own kv_len / indices
  // MlaDecodeParams::earlier_rows_ready (contiguous caches): each sequence's last q_len rows start as NaN and an
  // append launched just before the decode on one stream writes them, after kAppendDummies rows elsewhere that keep
  // it busy; the decode copies its earlier rows before it waits for the append and must read the appended ones
  bool append_newest = false;
};

constexpr int kAppendDummies = 16384;

struct Reference {
  std::vector<double> out;  // [B, q_len, N, 512]
  std::vector<double> lse;  // [B, q_len, N]
};

// cache[b]: sequence b's rows of 576; q_latent [B, q_len, N, 512]; q_rope [B, q_len, N, 64];
// visible[b][t]: positions query t of sequence b attends.
Reference reference_mla(const MlaCase& c, const std::vector<std::vector<float>>& cache,
                        const std::vector<float>& q_latent, const std::vector<float>& q_rope,
                        const std::vector<std::vector<std::vector<int>>>& visible) {
  const int B = static_cast<int>(c.kv_lens.size());
  const int N = c.n_heads;
  Reference ref;
  ref.out.assign(static_cast<size_t>(B) * c.q_len * N * kMlaLatentDim, 0.0);
  ref.lse.assign(static_cast<size_t>(B) * c.q_len * N, 0.0);
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < c.q_len; ++t) {
      for (int h = 0; h < N; ++h) {
        const size_t row = (static_cast<size_t>(b) * c.q_len + t) * N + h;
        const float* ql = &q_latent[row * kMlaLatentDim];
        const float* qr = &q_rope[row * kMlaRopeDim];
        const auto cache_row = [&](int s) { return &cache[b][static_cast<size_t>(s) * kMlaCacheRow]; };
        const auto dot = [&](int s) {
          const float* kv = cache_row(s);
          double sum = 0;
          for (int d = 0; d < kMlaLatentDim; ++d) sum += double(ql[d]) * kv[d];
          for (int d = 0; d < kMlaRopeDim; ++d) sum += double(qr[d]) * kv[kMlaLatentDim + d];
          return sum;
        };
        ref.lse[row] = reference_attention_row(visible[b][t], c.scale, dot, cache_row,
                                               std::span(ref.out).subspan(row * kMlaLatentDim, kMlaLatentDim));
      }
    }
  }
  return ref;
}

// Runs one case on the GPU and checks it; reports a one-line summary (also on success).
void check_mla_case(const MlaCase& c) {
  Rng rng;
  const int B = static_cast<int>(c.kv_lens.size());
  const int N = c.n_heads;
  const bool sparse = c.top_k > 0;
  const std::string label = "mla_decode " + c.name + " [B=" + std::to_string(B) + " N=" + std::to_string(N) +
                            " q_len=" + std::to_string(c.q_len) + " kv_lens=" + list(c.kv_lens) +
                            (sparse ? " sparse top_k=" + std::to_string(c.top_k) : " dense") +
                            (c.page_size         ? " page=" + std::to_string(c.page_size)
                             : c.shared_sequence ? " shared-sequence"
                                                 : " contiguous") +
                            (c.bf16_out ? " out=bf16" : " out=f32") + " seed=" + std::to_string(rng.seed) + "]";
  int max_len = 1;
  for (int len : c.kv_lens) max_len = std::max(max_len, len);

  // Cache rows, bf16-exact; with a shared sequence every batch entry reads the same rows.
  CacheRows cache = random_cache_rows(c.shared_sequence ? std::vector<int>{max_len} : c.kv_lens, kMlaCacheRow, rng);
  if (c.shared_sequence) {
    const CacheRows one = cache;
    cache.values.assign(B, one.values[0]);
    cache.bits.assign(B, one.bits[0]);
  }
  const size_t n_rows = static_cast<size_t>(B) * c.q_len * N;
  const Bf16Values q_latent = random_bf16(n_rows * kMlaLatentDim, rng);
  const Bf16Values q_rope = random_bf16(n_rows * kMlaRopeDim, rng);

  // Visible positions and (sparse) the index rows handed to the kernel.
  const int index_stride = c.top_k + 5;
  SparseSelection selection;
  std::vector<std::vector<std::vector<int>>> visible(B, std::vector<std::vector<int>>(c.q_len));
  if (sparse) {
    selection = random_sparse_selection(c.kv_lens, c.top_k, index_stride, rng);
    for (int b = 0; b < B; ++b) visible[b][0] = selection.selected[b];
  } else {
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < c.q_len; ++t) visible[b][t] = causal_positions(c.kv_lens[b], c.q_len, t);
    }
  }
  const Reference ref = reference_mla(c, cache.values, q_latent.values, q_rope.values, visible);

  // Device inputs: a paged pool, one shared sequence (page_stride 0) or [B, max_len + 3, 576]; rows
  // past each sequence hold NaN.
  const CacheLayout layout{.dim = kMlaCacheRow, .page_size = c.page_size, .spare_rows = 3};
  REQUIRE((!c.append_newest || (c.page_size == 0 && !c.shared_sequence && !sparse)));
  std::vector<std::vector<uint16_t>> uploaded = cache.bits;
  if (c.append_newest) {
    for (int b = 0; b < B; ++b) {
      const int first = std::max(0, c.kv_lens[b] - c.q_len);
      std::fill(uploaded[b].begin() + static_cast<int64_t>(first) * kMlaCacheRow, uploaded[b].end(), uint16_t{0xffff});
    }
  }
  DeviceCache cache_device =
      upload_cache(c.shared_sequence ? std::vector<std::vector<uint16_t>>{cache.bits[0]} : uploaded, layout, rng);
  if (c.shared_sequence) cache_device.view.page_stride = 0;
  latte::cuda::DeviceBuffer<uint16_t> q_latent_device, q_rope_device;
  latte::cuda::MlaDecodeParams params;
  if (c.concatenated_query) {
    std::vector<uint16_t> joined(n_rows * kMlaCacheRow);
    for (size_t r = 0; r < n_rows; ++r) {
      std::copy_n(q_latent.bits.begin() + r * kMlaLatentDim, kMlaLatentDim, joined.begin() + r * kMlaCacheRow);
      std::copy_n(q_rope.bits.begin() + r * kMlaRopeDim, kMlaRopeDim,
                  joined.begin() + r * kMlaCacheRow + kMlaLatentDim);
    }
    q_latent_device = upload(joined);
    params.q_latent = reinterpret_cast<const __nv_bfloat16*>(q_latent_device.data());
    params.q_rope = params.q_latent + kMlaLatentDim;
    params.q_latent_token_stride = params.q_rope_token_stride = static_cast<int64_t>(N) * kMlaCacheRow;
    params.q_latent_head_stride = params.q_rope_head_stride = kMlaCacheRow;
  } else {
    q_latent_device = upload(q_latent.bits);
    q_rope_device = upload(q_rope.bits);
    params.q_latent = reinterpret_cast<const __nv_bfloat16*>(q_latent_device.data());
    params.q_rope = reinterpret_cast<const __nv_bfloat16*>(q_rope_device.data());
    params.q_latent_token_stride = static_cast<int64_t>(N) * kMlaLatentDim;
    params.q_latent_head_stride = kMlaLatentDim;
    params.q_rope_token_stride = static_cast<int64_t>(N) * kMlaRopeDim;
    params.q_rope_head_stride = kMlaRopeDim;
  }
  const std::vector<int32_t> lens(c.kv_lens.begin(), c.kv_lens.end());
  auto lens_device = upload(lens);
  auto indices_device = upload(selection.indices);
  DecodeOutputs outputs(n_rows, kMlaLatentDim, c.bf16_out);

  params.cache = cache_device.view;
  params.kv_lens = lens_device.data();
  if (sparse) {
    params.indices = indices_device.data();
    params.index_stride = index_stride;
    params.top_k = c.top_k;
  }
  params.batch = B;
  params.q_len = c.q_len;
  params.n_heads = N;
  params.max_kv_len = max_len;
  params.scale = c.scale;
  params.out_type = c.bf16_out ? AttnOutputType::bf16 : AttnOutputType::f32;
  params.out = outputs.out.data();
  params.lse = outputs.lse.data();

  const latte::cuda::MlaDecodePlan plan = latte::cuda::plan_mla_decode(params, c.force_splits, c.merge);
  if (c.merge == latte::cuda::MlaSplitMerge::cluster) {
    CHECK_MESSAGE(plan.cluster, label, ": a cluster merge was asked for");
    CHECK(plan.workspace_bytes == 0);
  }
  latte::cuda::DeviceBuffer<char> workspace(std::max<size_t>(plan.workspace_bytes, 16));
  poison(workspace.data(), workspace.size());
  if (c.append_newest) {
    // the append's tokens: kAppendDummies copies of row 0 of sequence 0 into its last spare row (never read), then
    // each sequence's newest rows, so that those are written last
    const int64_t capacity = cache_device.view.page_stride / kMlaCacheRow;
    std::vector<uint16_t> src(static_cast<size_t>(kAppendDummies) * kMlaCacheRow);
    std::vector<int32_t> batch_index(kAppendDummies, 0), positions(kAppendDummies, static_cast<int32_t>(capacity - 1));
    for (int d = 0; d < kAppendDummies; ++d) {
      std::copy_n(cache.bits[0].begin(), kMlaCacheRow, src.begin() + static_cast<int64_t>(d) * kMlaCacheRow);
    }
    for (int b = 0; b < B; ++b) {
      for (int pos = std::max(0, c.kv_lens[b] - c.q_len); pos < c.kv_lens[b]; ++pos) {
        src.insert(src.end(), cache.bits[b].begin() + static_cast<int64_t>(pos) * kMlaCacheRow,
                   cache.bits[b].begin() + static_cast<int64_t>(pos + 1) * kMlaCacheRow);
        batch_index.push_back(b);
        positions.push_back(pos);
      }
    }
    const auto src_device = upload(src);
    const auto batch_device = upload(batch_index);
    const auto positions_device = upload(positions);
    const auto* rows = reinterpret_cast<const __nv_bfloat16*>(src_device.data());
    params.earlier_rows_ready = true;
    latte::cuda::Stream stream;
    latte::cuda::run_kv_cache_append({.src = rows,
                                      .src_type = latte::cuda::AppendSourceType::bf16,
                                      .src_token_stride = kMlaCacheRow,
                                      .n_tokens = static_cast<int32_t>(positions.size()),
                                      .dim = kMlaLatentDim,
                                      .dst = {.data = const_cast<__nv_bfloat16*>(cache_device.view.data),
                                              .page_stride = cache_device.view.page_stride,
                                              .token_stride = cache_device.view.token_stride},
                                      .batch_index = batch_device.data(),
                                      .positions = positions_device.data(),
                                      .tail_src = rows + kMlaLatentDim,
                                      .tail_src_token_stride = kMlaCacheRow,
                                      .tail_dim = kMlaRopeDim,
                                      .tail_dst_offset = kMlaLatentDim},
                                     stream.get());
    latte::cuda::run_mla_decode(params, plan, workspace.data(), workspace.size(), stream.get());
    stream.synchronize();
  } else {
    latte::cuda::run_mla_decode(params, plan, workspace.data(), workspace.size(), nullptr);
  }

  const std::string plan_text = " plan{config " + std::to_string(plan.config) + ", rows/CTA " +
                                std::to_string(plan.rows_per_cta) + ", splits " + std::to_string(plan.splits) +
                                (plan.cluster ? " in a cluster" : "") + ", chunk " + std::to_string(plan.chunk) + "}";
  // bf16 P in the P.V product (and a bf16 output) bound the error near 2^-9 relative.
  check_outputs(label + plan_text, outputs.out_values(), ref.out, outputs.lse_values(), ref.lse,
                {.out_rel_l2 = 1e-2, .out_elem = 0.05 * rms(ref.out), .lse_elem = 5e-3});
}

void check_all(const std::vector<MlaCase>& cases) { check_each_case(cases, "mla_decode", check_mla_case); }

}  // namespace

TEST_CASE("mla decode matches the float64 reference for mixed context lengths and head counts") {
  check_all({
      {.name = "16 heads, auto plan", .n_heads = 16, .kv_lens = {1, 2, 63, 65, 1000, 4097}},
      {.name = "16 heads, one split (direct write)", .n_heads = 16, .kv_lens = {65, 1000, 1}, .force_splits = 1},
      {.name = "16 heads, 7 splits (some empty)", .n_heads = 16, .kv_lens = {4097, 2, 130}, .force_splits = 7},
      {.name = "4 heads", .n_heads = 4, .kv_lens = {63, 1, 4097}},
      {.name = "20 heads (two row groups, padded)", .n_heads = 20, .kv_lens = {1000, 65}},
      {.name = "64 heads", .n_heads = 64, .kv_lens = {1000, 2}},
      {.name = "128 heads", .n_heads = 128, .kv_lens = {4097, 63}},
      {.name = "128 heads, one split", .n_heads = 128, .kv_lens = {1000}, .force_splits = 1},
      {.name = "sharp softmax", .n_heads = 16, .kv_lens = {1000, 4097}, .scale = 0.6f},
      {.name = "bf16 output", .n_heads = 16, .kv_lens = {1000, 3}, .bf16_out = true},
      {.name = "concatenated 576-wide queries", .n_heads = 16, .kv_lens = {65, 700}, .concatenated_query = true},
  });
}

TEST_CASE("mla decode reads paged caches through the page table") {
  check_all({
      {.name = "page 64", .n_heads = 16, .kv_lens = {1000, 65, 1}, .page_size = 64},
      {.name = "page 48 (not a tile multiple)", .n_heads = 16, .kv_lens = {1000, 63, 2}, .page_size = 48},
      {.name = "page 16, 128 heads", .n_heads = 128, .kv_lens = {500, 17}, .page_size = 16},
  });
}

TEST_CASE("mla decode with several query tokens per sequence is causal per token") {
  check_all({
      {.name = "q_len 2, 16 heads", .n_heads = 16, .q_len = 2, .kv_lens = {2, 1000, 65}},
      {.name = "q_len 4, 4 heads", .n_heads = 4, .q_len = 4, .kv_lens = {4, 63, 4097}},
      {.name = "q_len 3, 16 heads (48 rows)", .n_heads = 16, .q_len = 3, .kv_lens = {5, 300}, .force_splits = 2},
  });
}

TEST_CASE("sparse mla decode attends exactly the listed positions") {
  check_all({
      {.name = "top_k 256, 16 heads", .n_heads = 16, .kv_lens = {1000, 100, 1}, .top_k = 256},
      {.name = "top_k 2048, 128 heads", .n_heads = 128, .kv_lens = {4097, 700}, .top_k = 2048},
      {.name = "top_k 64, 4 heads, paged", .n_heads = 4, .kv_lens = {500, 65}, .page_size = 32, .top_k = 64},
      {.name = "top_k 2048, 64 heads, 5 splits", .n_heads = 64, .kv_lens = {3000}, .top_k = 2048, .force_splits = 5},
      {.name = "prefill chunk as batch entries of one sequence",
       .n_heads = 16,
       .kv_lens = {296, 297, 298, 299, 300},
       .top_k = 128,
       .shared_sequence = true},
      {.name = "prefill chunk, 128 heads, shared sequence",
       .n_heads = 128,
       .kv_lens = {2999, 3000},
       .top_k = 2048,
       .shared_sequence = true},
  });
}

TEST_CASE("mla decode merges its splits inside one cluster per row group") {
  using latte::cuda::MlaSplitMerge;
  constexpr MlaSplitMerge cluster = MlaSplitMerge::cluster;
  check_all({
      {.name = "5 splits (some empty)", .kv_lens = {4097, 2, 130}, .force_splits = 5, .merge = cluster},
      {.name = "8 splits, bf16 output", .kv_lens = {1000, 65}, .bf16_out = true, .force_splits = 8, .merge = cluster},
      {.name = "2 splits, sharp softmax", .kv_lens = {700, 1}, .scale = 0.6f, .force_splits = 2, .merge = cluster},
      {.name = "20 heads: two row groups, 6 splits",
       .n_heads = 20,
       .kv_lens = {1000, 65},
       .force_splits = 6,
       .merge = cluster},
      {.name = "q_len 4, 4 heads, 3 splits",
       .n_heads = 4,
       .q_len = 4,
       .kv_lens = {4, 63, 4097},
       .force_splits = 3,
       .merge = cluster},
      {.name = "page 48, 7 splits", .kv_lens = {1000, 63, 2}, .page_size = 48, .force_splits = 7, .merge = cluster},
      {.name = "sparse top_k 256, 4 splits",
       .kv_lens = {1000, 100, 1},
       .top_k = 256,
       .force_splits = 4,
       .merge = cluster},
      {.name = "cluster chosen by the plan", .kv_lens = {900}, .merge = cluster},
      {.name = "auto plan, one sequence", .kv_lens = {1000}},
  });
}

namespace {

/// Valid parameters for planning (not running) one query token of `n_heads` heads over max_kv_len positions:
/// the pointers are 16-byte aligned static storage, the strides those of contiguous heads.
latte::cuda::MlaDecodeParams plan_probe(int n_heads, int max_kv_len) {
  alignas(16) static uint16_t dummy[1024];
  static int32_t lens[1] = {4};
  latte::cuda::MlaDecodeParams p;
  p.q_latent = p.q_rope = reinterpret_cast<const __nv_bfloat16*>(dummy);
  p.cache = {.data = reinterpret_cast<const __nv_bfloat16*>(dummy), .page_stride = 576 * 8, .token_stride = 576};
  p.kv_lens = lens;
  p.out = dummy;
  p.batch = 1;
  p.q_len = 1;
  p.n_heads = n_heads;
  p.max_kv_len = max_kv_len;
  p.scale = 0.1f;
  p.q_latent_token_stride = static_cast<int64_t>(n_heads) * 512;
  p.q_latent_head_stride = 512;
  p.q_rope_token_stride = static_cast<int64_t>(n_heads) * 64;
  p.q_rope_head_stride = 64;
  return p;
}

}  // namespace

TEST_CASE("mla decode with 32-position tiles in 4 stages (LATTE_MLA_DECODE_TILE=32) matches the reference") {
  const latte::test::EnvScope tile("LATTE_MLA_DECODE_TILE", "32");
  using latte::cuda::MlaSplitMerge;
  constexpr MlaSplitMerge cluster = MlaSplitMerge::cluster;
  // the plan takes the 32-position kernel (configuration 3) for up to 32 rows per sequence, where it fits
  const latte::cuda::MlaDecodePlan plan = latte::cuda::plan_mla_decode(plan_probe(16, 4096));
  CHECK((plan.config == 3 || plan.config == 2));  // 2: a device with ~100 KB of shared memory per block
  CHECK(plan.chunk % 32 == 0);
  check_all({
      {.name = "16 heads, auto plan", .n_heads = 16, .kv_lens = {1, 2, 31, 33, 63, 65, 1000, 4097}},
      {.name = "16 heads, one split (direct write)", .n_heads = 16, .kv_lens = {65, 1000, 1}, .force_splits = 1},
      {.name = "16 heads, 7 splits (some empty)", .n_heads = 16, .kv_lens = {4097, 2, 130}, .force_splits = 7},
      {.name = "4 heads", .n_heads = 4, .kv_lens = {63, 1, 4097}},
      {.name = "20 heads (two row groups, padded)", .n_heads = 20, .kv_lens = {1000, 65}},
      {.name = "sharp softmax", .n_heads = 16, .kv_lens = {1000, 4097}, .scale = 0.6f},
      {.name = "bf16 output", .n_heads = 16, .kv_lens = {1000, 3}, .bf16_out = true},
      {.name = "page 48", .n_heads = 16, .kv_lens = {1000, 63, 2}, .page_size = 48},
      {.name = "q_len 2, 16 heads", .n_heads = 16, .q_len = 2, .kv_lens = {2, 1000, 65}},
      {.name = "sparse top_k 256", .n_heads = 16, .kv_lens = {1000, 100, 1}, .top_k = 256},
      {.name = "cluster, 5 splits", .kv_lens = {4097, 2, 130}, .force_splits = 5, .merge = cluster},
      {.name = "cluster, 8 splits, bf16", .kv_lens = {1000, 65}, .bf16_out = true, .force_splits = 8, .merge = cluster},
      {.name = "cluster chosen by the plan", .kv_lens = {900}, .merge = cluster},
  });
}

TEST_CASE("mla decode copies earlier rows before its producers end and the newest after (earlier_rows_ready)") {
  using latte::cuda::MlaSplitMerge;
  constexpr MlaSplitMerge cluster = MlaSplitMerge::cluster;
  check_all({
      {.name = "16 heads, auto plan", .kv_lens = {1, 2, 63, 64, 65, 1000, 4097}, .append_newest = true},
      {.name = "16 heads, one split", .kv_lens = {65, 700, 1}, .force_splits = 1, .append_newest = true},
      {.name = "16 heads, 7 splits", .kv_lens = {4097, 2, 130}, .force_splits = 7, .append_newest = true},
      {.name = "cluster, 5 splits", .kv_lens = {900, 2}, .force_splits = 5, .merge = cluster, .append_newest = true},
      {.name = "q_len 2, 20 heads", .n_heads = 20, .q_len = 2, .kv_lens = {2, 64, 1000}, .append_newest = true},
      {.name = "128 heads (the 64-row kernel)", .n_heads = 128, .kv_lens = {1, 33, 1000}, .append_newest = true},
      {.name = "128 heads, q_len 2, 3 splits",
       .n_heads = 128,
       .q_len = 2,
       .kv_lens = {2, 700},
       .force_splits = 3,
       .append_newest = true},
  });
  {
    const latte::test::EnvScope tile("LATTE_MLA_DECODE_TILE", "32");
    check_all({{.name = "32-position tiles in 4 stages", .kv_lens = {1, 31, 33, 64, 1000}, .append_newest = true}});
  }
}

TEST_CASE("mla decode rejects invalid arguments with latte::Error") {
  latte::cuda::MlaDecodeParams p;
  CHECK_THROWS_AS(latte::cuda::plan_mla_decode(p), latte::Error);  // everything unset
  p = plan_probe(4, 4);
  p.q_len = 2;
  p.indices = p.kv_lens;
  p.top_k = 1;
  p.index_stride = 1;
  CHECK_THROWS_AS(latte::cuda::plan_mla_decode(p), latte::Error);  // sparse needs q_len 1
  p.indices = nullptr;
  p.q_latent_head_stride = 500;
  CHECK_THROWS_AS(latte::cuda::plan_mla_decode(p), latte::Error);  // stride not a multiple of 8
  p.q_latent_head_stride = 512;
  p.scale = std::numeric_limits<float>::infinity();
  CHECK_THROWS_AS(latte::cuda::plan_mla_decode(p), latte::Error);  // infinite scale
  p.scale = 0.1f;
  p.q_len = 1;
  CHECK_NOTHROW(latte::cuda::plan_mla_decode(p, 2, latte::cuda::MlaSplitMerge::cluster));
  p.n_heads = 64;  // 64 rows: the 64-row kernel, which has no cluster merge
  p.q_latent_token_stride = 64 * 512;
  p.q_rope_token_stride = 64 * 64;
  CHECK_THROWS_AS(latte::cuda::plan_mla_decode(p, 2, latte::cuda::MlaSplitMerge::cluster), latte::Error);
}
