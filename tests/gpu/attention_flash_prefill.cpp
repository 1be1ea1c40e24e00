// Flash-attention prefill vs a float64 reference written from the formula: query t (absolute position
// pos0 + t) sees positions s <= pos0 + t (and, in sparse mode, only its listed positions).
#include "attention_test_support.hpp"
#include "cuda/flash_prefill.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <latte/error.hpp>

namespace {

using namespace latte::test::attention;
using latte::cuda::AttnOutputType;

struct PrefillCase {
  std::string name;
  int dim_qk = 192;
  int dim_v = 128;
  int n_heads = 4;
  int n_queries = 1;
  int pos0 = 0;
  int page_size = 0;  // 0: contiguous [capacity, N, D]
  int top_k = 0;      // > 0: sparse (index lists turned into a key mask on the device)
  float scale = 0.07f;
  bool bf16_out = false;
  int splits = 0;  // 0: no workspace (one CTA per tile and head); n > 0: at most n key splits; -1: automatic
};

void check_prefill_case(const PrefillCase& c) {
  Rng rng;
  const int N = c.n_heads;
  const int T = c.n_queries;
  const int n_keys = c.pos0 + T;
  const bool sparse = c.top_k > 0;
  const std::string label = "flash_prefill " + c.name + " [N=" + std::to_string(N) +
                            " dims=" + std::to_string(c.dim_qk) + "/" + std::to_string(c.dim_v) +
                            " T=" + std::to_string(T) + " pos0=" + std::to_string(c.pos0) +
                            (sparse ? " sparse top_k=" + std::to_string(c.top_k) : " causal") +
                            (c.page_size ? " page=" + std::to_string(c.page_size) : "") +
                            (c.bf16_out ? " out=bf16" : " out=f32") + " seed=" + std::to_string(rng.seed) + "]";
  const Bf16Values k = random_bf16(static_cast<size_t>(n_keys) * N * c.dim_qk, rng);  // [n_keys, N, Dqk]
  const Bf16Values v = random_bf16(static_cast<size_t>(n_keys) * N * c.dim_v, rng);   // [n_keys, N, Dv]
  const Bf16Values q = random_bf16(static_cast<size_t>(T) * N * c.dim_qk, rng);       // [T, N, Dqk]

  // Visible positions per query; sparse rows list a random subset of the causal ones (+ junk entries).
  const int index_stride = c.top_k + 2;
  std::vector<int32_t> indices(sparse ? static_cast<size_t>(T) * index_stride : 0, -1);
  std::vector<std::vector<int>> visible(T);
  for (int t = 0; t < T; ++t) {
    const int n_visible = c.pos0 + t + 1;
    std::vector<int> all(n_visible);
    std::iota(all.begin(), all.end(), 0);
    if (!sparse) {
      visible[t] = all;
      continue;
    }
    std::shuffle(all.begin(), all.end(), rng.engine);
    const int chosen = std::min(n_visible, c.top_k - 1);
    visible[t].assign(all.begin(), all.begin() + chosen);
    std::vector<int32_t> row(visible[t].begin(), visible[t].end());
    row.push_back(-1);
    while (static_cast<int>(row.size()) < c.top_k) row.push_back(-1);
    std::shuffle(row.begin(), row.end(), rng.engine);
    std::copy(row.begin(), row.end(), indices.begin() + static_cast<size_t>(t) * index_stride);
  }

  std::vector<double> ref_out(static_cast<size_t>(T) * N * c.dim_v, 0.0);
  std::vector<double> ref_lse(static_cast<size_t>(T) * N, -std::numeric_limits<double>::infinity());
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < N; ++h) {
      const float* qh = &q.values[(static_cast<size_t>(t) * N + h) * c.dim_qk];
      std::vector<double> score;
      double max_score = -std::numeric_limits<double>::infinity();
      for (int s : visible[t]) {
        const float* kh = &k.values[(static_cast<size_t>(s) * N + h) * c.dim_qk];
        double dot = 0;
        for (int d = 0; d < c.dim_qk; ++d) dot += double(qh[d]) * kh[d];
        score.push_back(c.scale * dot);
        max_score = std::max(max_score, score.back());
      }
      double sum = 0;
      double* o = &ref_out[(static_cast<size_t>(t) * N + h) * c.dim_v];
      for (size_t i = 0; i < score.size(); ++i) {
        const double p = std::exp(score[i] - max_score);
        sum += p;
        const float* vh = &v.values[(static_cast<size_t>(visible[t][i]) * N + h) * c.dim_v];
        for (int d = 0; d < c.dim_v; ++d) o[d] += p * vh[d];
      }
      if (score.empty()) continue;
      for (int d = 0; d < c.dim_v; ++d) o[d] /= sum;
      ref_lse[static_cast<size_t>(t) * N + h] = max_score + std::log(sum);
    }
  }

  // Device caches (one sequence; batch entry 1 of a two-entry page table when paged).
  auto make_view = [&](const Bf16Values& x, int dim, latte::cuda::DeviceBuffer<uint16_t>& data,
                       latte::cuda::DeviceBuffer<int64_t>& table) -> latte::cuda::PagedRows<const __nv_bfloat16> {
    if (c.page_size > 0) {
      std::vector<std::vector<uint16_t>> rows = {std::vector<uint16_t>(static_cast<size_t>(N) * dim * 3, 0), x.bits};
      const PagedPool pool = make_paged_pool(rows, N * dim, c.page_size, rng);
      data = upload(pool.pool);
      table = upload(pool.page_table);
      return {.data = reinterpret_cast<const __nv_bfloat16*>(data.data()),
              .page_table = table.data(),
              .page_stride = pool.page_stride,
              .token_stride = static_cast<int64_t>(N) * dim,
              .head_stride = dim,
              .page_size = c.page_size,
              .page_table_stride = pool.pages_per_seq};
    }
    std::vector<uint16_t> flat(x.bits);
    flat.resize(flat.size() + static_cast<size_t>(5) * N * dim, 0xffffu);  // NaN rows past the chunk
    data = upload(flat);
    return {.data = reinterpret_cast<const __nv_bfloat16*>(data.data()),
            .page_stride = 0,
            .token_stride = static_cast<int64_t>(N) * dim,
            .head_stride = dim};
  };
  latte::cuda::DeviceBuffer<uint16_t> k_data, v_data;
  latte::cuda::DeviceBuffer<int64_t> k_table, v_table;
  latte::cuda::FlashPrefillParams params;
  params.k_cache = make_view(k, c.dim_qk, k_data, k_table);
  params.v_cache = make_view(v, c.dim_v, v_data, v_table);
  params.cache_batch = c.page_size > 0 ? 1 : 0;
  auto q_device = upload(q.bits);
  auto indices_device = upload(indices);
  const int64_t mask_stride = (n_keys + 31) / 32 + 1;
  latte::cuda::DeviceBuffer<uint32_t> mask_device(sparse ? static_cast<size_t>(T) * mask_stride : 1);
  if (sparse) {
    poison(mask_device.data(), mask_device.bytes());
    latte::cuda::run_build_key_mask({.indices = indices_device.data(),
                                     .index_stride = index_stride,
                                     .top_k = c.top_k,
                                     .n_queries = T,
                                     .n_keys = n_keys,
                                     .mask = mask_device.data(),
                                     .mask_stride = mask_stride},
                                    nullptr);
    params.key_mask = mask_device.data();
    params.key_mask_stride = mask_stride;
  }
  const size_t n_out = static_cast<size_t>(T) * N * c.dim_v;
  latte::cuda::DeviceBuffer<char> out_device(n_out * (c.bf16_out ? 2 : 4));
  latte::cuda::DeviceBuffer<float> lse_device(static_cast<size_t>(T) * N);
  poison(out_device.data(), out_device.size());
  poison(lse_device.data(), lse_device.bytes());
  params.q = reinterpret_cast<const __nv_bfloat16*>(q_device.data());
  params.q_token_stride = static_cast<int64_t>(N) * c.dim_qk;
  params.q_head_stride = c.dim_qk;
  params.n_queries = T;
  params.pos0 = c.pos0;
  params.n_heads = N;
  params.head_dim_qk = c.dim_qk;
  params.head_dim_v = c.dim_v;
  params.scale = c.scale;
  params.out_type = c.bf16_out ? AttnOutputType::bf16 : AttnOutputType::f32;
  params.out = out_device.data();
  params.lse = lse_device.data();
  std::string split_note;
  latte::cuda::DeviceBuffer<char> workspace(1);
  if (c.splits != 0) {
    params.splits = std::max(c.splits, 0);
    const int splits = latte::cuda::flash_prefill_splits(params);
    if (c.splits > 1) CHECK_MESSAGE(splits > 1, label << ": the split path did not run");
    const size_t bytes = latte::cuda::flash_prefill_workspace_bytes(params);
    workspace = latte::cuda::DeviceBuffer<char>(std::max<size_t>(bytes, 16));
    poison(workspace.data(), workspace.size());
    params.workspace = workspace.data();
    params.workspace_bytes = bytes;
    split_note = " (" + std::to_string(splits) + " key splits)";
  }
  latte::cuda::run_flash_prefill(params, nullptr);
  const std::vector<float> out = download_as_float(out_device.data(), n_out, c.bf16_out);
  const std::vector<float> lse = download(lse_device.data(), static_cast<size_t>(T) * N);

  const Comparison out_cmp = compare(out, ref_out, 0.05 * rms(ref_out));
  const Comparison lse_cmp = compare(lse, ref_lse, 5e-3);
  const std::string summary =
      label + split_note + "\n  " + out_cmp.describe("out") + "\n  " + lse_cmp.describe("lse");
  if (out_cmp.rel_l2 < 1e-2 && !out_cmp.has_bad() && !lse_cmp.has_bad()) {
    MESSAGE(summary);
  } else {
    FAIL_CHECK(summary);
  }
}

void check_all(const std::vector<PrefillCase>& cases) {
  for (const PrefillCase& c : cases) {
    try {
      check_prefill_case(c);
    } catch (const std::exception& e) {
      FAIL_CHECK("flash_prefill " << c.name << " threw: " << e.what());
    }
  }
}

}  // namespace

TEST_CASE("flash prefill is causal attention from pos0 (DeepSeek and GLM-5 head dims)") {
  check_all({
      {.name = "one query at depth 0", .n_queries = 1},
      {.name = "65 queries at depth 0", .n_queries = 65},
      {.name = "130 queries at depth 1000", .n_queries = 130, .pos0 = 1000},
      {.name = "single query at depth 4096 (decode)", .n_heads = 16, .n_queries = 1, .pos0 = 4096},
      {.name = "glm-5 dims, 63 queries at depth 17", .dim_qk = 256, .dim_v = 256, .n_queries = 63, .pos0 = 17},
      {.name = "glm-5 dims, 200 queries at depth 300",
       .dim_qk = 256,
       .dim_v = 256,
       .n_heads = 2,
       .n_queries = 200,
       .pos0 = 300},
      {.name = "sharp softmax", .n_queries = 100, .pos0 = 64, .scale = 0.4f},
      {.name = "bf16 output", .n_queries = 70, .pos0 = 5, .bf16_out = true},
      {.name = "paged, page 48", .n_queries = 90, .pos0 = 200, .page_size = 48},
  });
}

TEST_CASE("flash prefill with the keys split over several CTAs equals the reference") {
  check_all({
      {.name = "130 queries at depth 1000, 3 splits", .n_queries = 130, .pos0 = 1000, .splits = 3},
      {.name = "70 queries at depth 0, 2 splits (the diagonal in the last)", .n_queries = 70, .splits = 2},
      {.name = "one query at depth 4096, 7 splits", .n_heads = 16, .n_queries = 1, .pos0 = 4096, .splits = 7},
      {.name = "200 queries at depth 3000, automatic plan", .n_heads = 2, .n_queries = 200, .pos0 = 3000, .splits = -1},
      {.name = "glm-5 dims, 63 queries at depth 700, 5 splits",
       .dim_qk = 256,
       .dim_v = 256,
       .n_queries = 63,
       .pos0 = 700,
       .splits = 5},
      {.name = "bf16 output, 4 splits", .n_queries = 70, .pos0 = 500, .bf16_out = true, .splits = 4},
      {.name = "paged, page 48, 6 splits", .n_queries = 90, .pos0 = 900, .page_size = 48, .splits = 6},
      {.name = "more splits than key tiles", .n_queries = 20, .pos0 = 100, .splits = 40},
      {.name = "sparse top_k 64 at depth 1500, 4 splits", .n_queries = 70, .pos0 = 1500, .top_k = 64, .splits = 4},
  });
}

TEST_CASE("sparse flash prefill attends exactly the listed positions") {
  check_all({
      {.name = "top_k 64 at depth 500", .n_queries = 70, .pos0 = 500, .top_k = 64},
      {.name = "top_k 2048 at depth 3000", .n_heads = 2, .n_queries = 33, .pos0 = 3000, .top_k = 2048},
      {.name = "glm-5 dims, top_k 128, paged",
       .dim_qk = 256,
       .dim_v = 256,
       .n_queries = 40,
       .pos0 = 400,
       .page_size = 64,
       .top_k = 128},
  });
}

TEST_CASE("flash prefill rejects unsupported shapes with latte::Error") {
  latte::cuda::FlashPrefillParams p;
  p.head_dim_qk = 192;
  p.head_dim_v = 192;
  p.n_queries = 1;
  p.n_heads = 1;
  CHECK_THROWS_AS(latte::cuda::run_flash_prefill(p, nullptr), latte::Error);
  p.head_dim_v = 128;
  CHECK_THROWS_AS(latte::cuda::run_flash_prefill(p, nullptr), latte::Error);  // null pointers
}

TEST_CASE("flash prefill rejects a workspace smaller than its split plan with latte::Error") {
  latte::cuda::DeviceBuffer<uint16_t> q(4 * 192), k(1000 * 4 * 192), v(1000 * 4 * 128);
  latte::cuda::DeviceBuffer<float> out(4 * 128), ws(64);
  latte::cuda::FlashPrefillParams p;
  p.q = reinterpret_cast<const __nv_bfloat16*>(q.data());
  p.q_token_stride = 4 * 192;
  p.q_head_stride = 192;
  p.k_cache = {.data = reinterpret_cast<const __nv_bfloat16*>(k.data()), .token_stride = 4 * 192, .head_stride = 192};
  p.v_cache = {.data = reinterpret_cast<const __nv_bfloat16*>(v.data()), .token_stride = 4 * 128, .head_stride = 128};
  p.n_queries = 1;
  p.pos0 = 999;
  p.n_heads = 4;
  p.head_dim_qk = 192;
  p.head_dim_v = 128;
  p.scale = 0.07f;
  p.out = out.data();
  p.splits = 4;
  REQUIRE(latte::cuda::flash_prefill_splits(p) == 4);
  REQUIRE(latte::cuda::flash_prefill_workspace_bytes(p) == size_t{4} * 4 * (128 + 1) * sizeof(float));
  p.workspace = ws.data();
  p.workspace_bytes = ws.bytes();  // 256 bytes: too small
  CHECK_THROWS_AS(latte::cuda::run_flash_prefill(p, nullptr), latte::Error);
  p.splits = -1;
  p.workspace_bytes = 1 << 20;
  CHECK_THROWS_AS(latte::cuda::run_flash_prefill(p, nullptr), latte::Error);  // negative splits
}
