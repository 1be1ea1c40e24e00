// MLA decode kernel vs a float64 reference written from the formula:
//   score(s) = scale * (q_latent . c_s + q_rope . k_pe_s), o = softmax(score) . c, lse = ln sum exp(score)
// over the causally visible positions (dense) or the listed ones (sparse).
#include "attention_test_support.hpp"
#include "cuda/mla_decode.hpp"

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
  bool shared_sequence = false;  // every batch entry reads one cache (page_stride 0): a prefill chunk's
                                 // query tokens run as batch entries, each with its own kv_len / indices
};

struct Reference {
  std::vector<double> out;  // [B, q_len, N, 512]
  std::vector<double> lse;  // [B, q_len, N]
};

// cache[b]: kv_lens[b] rows of 576; q_latent [B, q_len, N, 512]; q_rope [B, q_len, N, 64];
// visible[b][t]: positions query t of sequence b attends.
Reference reference_mla(const MlaCase& c, const std::vector<std::vector<float>>& cache,
                        const std::vector<float>& q_latent, const std::vector<float>& q_rope,
                        const std::vector<std::vector<std::vector<int>>>& visible) {
  const int B = static_cast<int>(c.kv_lens.size());
  const int N = c.n_heads;
  Reference ref;
  ref.out.assign(static_cast<size_t>(B) * c.q_len * N * kMlaLatentDim, 0.0);
  ref.lse.assign(static_cast<size_t>(B) * c.q_len * N, -std::numeric_limits<double>::infinity());
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < c.q_len; ++t) {
      const std::vector<int>& positions = visible[b][t];
      for (int h = 0; h < N; ++h) {
        const size_t row = (static_cast<size_t>(b) * c.q_len + t) * N + h;
        const float* ql = &q_latent[row * kMlaLatentDim];
        const float* qr = &q_rope[row * kMlaRopeDim];
        std::vector<double> score(positions.size());
        double max_score = -std::numeric_limits<double>::infinity();
        for (size_t i = 0; i < positions.size(); ++i) {
          const float* kv = &cache[b][static_cast<size_t>(positions[i]) * kMlaCacheRow];
          double dot = 0;
          for (int d = 0; d < kMlaLatentDim; ++d) dot += double(ql[d]) * kv[d];
          for (int d = 0; d < kMlaRopeDim; ++d) dot += double(qr[d]) * kv[kMlaLatentDim + d];
          score[i] = c.scale * dot;
          max_score = std::max(max_score, score[i]);
        }
        if (positions.empty()) continue;
        double sum = 0;
        double* o = &ref.out[row * kMlaLatentDim];
        for (size_t i = 0; i < positions.size(); ++i) {
          const double p = std::exp(score[i] - max_score);
          sum += p;
          const float* kv = &cache[b][static_cast<size_t>(positions[i]) * kMlaCacheRow];
          for (int d = 0; d < kMlaLatentDim; ++d) o[d] += p * kv[d];
        }
        for (int d = 0; d < kMlaLatentDim; ++d) o[d] /= sum;
        ref.lse[row] = max_score + std::log(sum);
      }
    }
  }
  return ref;
}

// Runs one case on the GPU and checks it; returns a one-line summary (also on success).
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

  // Cache rows, bf16-exact.
  std::vector<std::vector<float>> cache(B);
  std::vector<std::vector<uint16_t>> cache_bits(B);
  for (int b = 0; b < B; ++b) {
    if (c.shared_sequence && b > 0) {
      cache[b] = cache[0];
      cache_bits[b] = cache_bits[0];
      continue;
    }
    const int len = c.shared_sequence ? max_len : c.kv_lens[b];
    Bf16Values rows = random_bf16(static_cast<size_t>(len) * kMlaCacheRow, rng);
    cache[b] = std::move(rows.values);
    cache_bits[b] = std::move(rows.bits);
  }
  const size_t n_rows = static_cast<size_t>(B) * c.q_len * N;
  const Bf16Values q_latent = random_bf16(n_rows * kMlaLatentDim, rng);
  const Bf16Values q_rope = random_bf16(n_rows * kMlaRopeDim, rng);

  // Visible positions and (sparse) the index rows handed to the kernel.
  const int index_stride = c.top_k + 5;
  std::vector<int32_t> indices;
  std::vector<std::vector<std::vector<int>>> visible(B, std::vector<std::vector<int>>(c.q_len));
  if (sparse) indices.assign(static_cast<size_t>(B) * index_stride, 0);
  for (int b = 0; b < B; ++b) {
    const int len = c.kv_lens[b];
    if (!sparse) {
      for (int t = 0; t < c.q_len; ++t) {
        for (int s = 0; s <= len - c.q_len + t; ++s) visible[b][t].push_back(s);
      }
      continue;
    }
    std::vector<int> all(len);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng.engine);
    const int chosen = std::min(len, c.top_k - c.top_k / 8);  // leave room for invalid entries
    std::vector<int32_t> row(all.begin(), all.begin() + chosen);
    visible[b][0].assign(row.begin(), row.end());
    while (static_cast<int>(row.size()) < c.top_k) row.push_back(row.size() % 2 ? -1 : len + rng.uniform_int(0, 100));
    std::shuffle(row.begin(), row.end(), rng.engine);
    std::copy(row.begin(), row.end(), indices.begin() + static_cast<size_t>(b) * index_stride);
    // Entries past top_k must be ignored: make them valid positions the query did not select.
    for (int i = c.top_k; i < index_stride; ++i) indices[static_cast<size_t>(b) * index_stride + i] = len - 1;
  }
  const Reference ref = reference_mla(c, cache, q_latent.values, q_rope.values, visible);

  // Device inputs.
  latte::cuda::PagedRows<const __nv_bfloat16> cache_view;
  latte::cuda::DeviceBuffer<uint16_t> cache_device;
  latte::cuda::DeviceBuffer<int32_t> page_table_i32;
  if (c.page_size > 0) {
    const PagedPool pool = make_paged_pool(cache_bits, kMlaCacheRow, c.page_size, rng);
    cache_device = upload(pool.pool);
    page_table_i32 = upload(pool.page_table);
    cache_view = {.data = reinterpret_cast<const __nv_bfloat16*>(cache_device.data()),
                  .page_table = page_table_i32.data(),
                  .page_stride = pool.page_stride,
                  .token_stride = kMlaCacheRow,
                  .page_size = c.page_size,
                  .page_table_stride = pool.pages_per_seq};
  } else if (c.shared_sequence) {
    std::vector<uint16_t> flat(cache_bits[0]);
    flat.resize(flat.size() + 3 * kMlaCacheRow, 0xffffu);  // NaN rows past the sequence
    cache_device = upload(flat);
    cache_view = {.data = reinterpret_cast<const __nv_bfloat16*>(cache_device.data()),
                  .page_stride = 0,
                  .token_stride = kMlaCacheRow};
  } else {
    // [B, max_len + 3, 576]; rows past each sequence's length hold NaN.
    const int capacity = max_len + 3;
    std::vector<uint16_t> flat(static_cast<size_t>(B) * capacity * kMlaCacheRow, 0xffffu);
    for (int b = 0; b < B; ++b) {
      std::copy(cache_bits[b].begin(), cache_bits[b].end(),
                flat.begin() + static_cast<size_t>(b) * capacity * kMlaCacheRow);
    }
    cache_device = upload(flat);
    cache_view = {.data = reinterpret_cast<const __nv_bfloat16*>(cache_device.data()),
                  .page_stride = static_cast<int64_t>(capacity) * kMlaCacheRow,
                  .token_stride = kMlaCacheRow};
  }
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
  auto indices_device = upload(indices);
  const size_t out_bytes = n_rows * kMlaLatentDim * (c.bf16_out ? 2 : 4);
  latte::cuda::DeviceBuffer<char> out_device(out_bytes);
  latte::cuda::DeviceBuffer<float> lse_device(n_rows);
  poison(out_device.data(), out_bytes);
  poison(lse_device.data(), n_rows * sizeof(float));

  params.cache = cache_view;
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
  params.out = out_device.data();
  params.lse = lse_device.data();

  const latte::cuda::MlaDecodePlan plan = latte::cuda::plan_mla_decode(params, c.force_splits);
  latte::cuda::DeviceBuffer<char> workspace(std::max<size_t>(plan.workspace_bytes, 16));
  poison(workspace.data(), workspace.size());
  latte::cuda::run_mla_decode(params, plan, workspace.data(), workspace.size(), nullptr);
  const std::vector<float> out = download_as_float(out_device.data(), n_rows * kMlaLatentDim, c.bf16_out);
  const std::vector<float> lse = download(lse_device.data(), n_rows);

  const std::string plan_text = " plan{config " + std::to_string(plan.config) + ", rows/CTA " +
                                std::to_string(plan.rows_per_cta) + ", splits " + std::to_string(plan.splits) +
                                ", chunk " + std::to_string(plan.chunk) + "}";
  // bf16 P in the P.V product (and a bf16 output) bound the error near 2^-9 relative.
  const Comparison out_cmp = compare(out, ref.out, 0.05 * rms(ref.out));
  const Comparison lse_cmp = compare(lse, ref.lse, 5e-3);
  const bool ok = out_cmp.rel_l2 < 1e-2 && !out_cmp.has_bad() && !lse_cmp.has_bad();
  const std::string summary = label + plan_text + "\n  " + out_cmp.describe("out") + "\n  " + lse_cmp.describe("lse");
  if (ok) {
    MESSAGE(summary);
  } else {
    FAIL_CHECK(summary);
  }
}

void check_all(const std::vector<MlaCase>& cases) {
  for (const MlaCase& c : cases) {
    try {
      check_mla_case(c);
    } catch (const std::exception& e) {
      FAIL_CHECK("mla_decode " << c.name << " threw: " << e.what());
    }
  }
}

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

TEST_CASE("mla decode rejects invalid arguments with latte::Error") {
  latte::cuda::MlaDecodeParams p;
  CHECK_THROWS_AS(latte::cuda::plan_mla_decode(p), latte::Error);  // everything unset
  alignas(16) static uint16_t dummy[1024];
  static int32_t lens[1] = {4};
  p.q_latent = p.q_rope = reinterpret_cast<const __nv_bfloat16*>(dummy);
  p.cache = {.data = reinterpret_cast<const __nv_bfloat16*>(dummy), .page_stride = 576 * 8, .token_stride = 576};
  p.kv_lens = lens;
  p.out = dummy;
  p.batch = 1;
  p.n_heads = 4;
  p.max_kv_len = 4;
  p.scale = 0.1f;
  p.q_latent_token_stride = 4 * 512;
  p.q_latent_head_stride = 512;
  p.q_rope_token_stride = 4 * 64;
  p.q_rope_head_stride = 64;
  p.q_len = 2;
  p.indices = lens;
  p.top_k = 1;
  p.index_stride = 1;
  CHECK_THROWS_AS(latte::cuda::plan_mla_decode(p), latte::Error);  // sparse needs q_len 1
  p.indices = nullptr;
  p.q_latent_head_stride = 500;
  CHECK_THROWS_AS(latte::cuda::plan_mla_decode(p), latte::Error);  // stride not a multiple of 8
  p.q_latent_head_stride = 512;
  p.scale = std::numeric_limits<float>::infinity();
  CHECK_THROWS_AS(latte::cuda::plan_mla_decode(p), latte::Error);  // infinite scale
}
