// Standard (decompressed K/V) decode kernel vs a float64 reference written from the formula:
//   score(s) = scale * q . k_s, o = softmax(score) . v, lse = ln sum exp(score)
// over s < kv_len (dense) or the listed positions (sparse). The kernel computes in fp32 throughout.
#include "attention_test_support.hpp"
#include "cuda/standard_decode.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <latte/error.hpp>

namespace {

using namespace latte::test::attention;
using latte::cuda::AttnOutputType;

struct StandardCase {
  std::string name;
  int dim_qk = 192;
  int dim_v = 128;
  int n_heads = 16;
  std::vector<int> kv_lens;
  int page_size = 0;        // 0: contiguous [B, capacity, N, D] (or head-major, below)
  bool head_major = false;  // contiguous [B, N, capacity, D]
  int top_k = 0;            // > 0: sparse
  float scale = 0.07f;
  bool bf16_out = false;
  int force_splits = 0;
};

// The cache of one tensor (K or V) for every sequence: values[b] is [len, N, D].
struct CacheTensor {
  std::vector<std::vector<float>> values;
  std::vector<std::vector<uint16_t>> bits;
};

CacheTensor random_cache(const std::vector<int>& lens, int n_heads, int dim, Rng& rng) {
  CacheTensor c;
  for (int len : lens) {
    Bf16Values v = random_bf16(static_cast<size_t>(len) * n_heads * dim, rng);
    c.values.push_back(std::move(v.values));
    c.bits.push_back(std::move(v.bits));
  }
  return c;
}

// Uploads one cache tensor in the case's layout and returns its view (the buffers stay in `keep`).
latte::cuda::PagedRows<const __nv_bfloat16> upload_cache(const StandardCase& c, const CacheTensor& t, int dim, Rng& rng,
                                                         std::vector<latte::cuda::DeviceBuffer<uint16_t>>& keep,
                                                         std::vector<latte::cuda::DeviceBuffer<int32_t>>& keep_tables) {
  const int N = c.n_heads;
  const int B = static_cast<int>(c.kv_lens.size());
  if (c.page_size > 0) {
    const PagedPool pool = make_paged_pool(t.bits, N * dim, c.page_size, rng);
    keep.push_back(upload(pool.pool));
    keep_tables.push_back(upload(pool.page_table));
    return {.data = reinterpret_cast<const __nv_bfloat16*>(keep.back().data()),
            .page_table = keep_tables.back().data(),
            .page_stride = pool.page_stride,
            .token_stride = static_cast<int64_t>(N) * dim,
            .head_stride = dim,
            .page_size = c.page_size,
            .page_table_stride = pool.pages_per_seq};
  }
  int capacity = 1;
  for (int len : c.kv_lens) capacity = std::max(capacity, len + 2);
  std::vector<uint16_t> flat(static_cast<size_t>(B) * capacity * N * dim, 0xffffu);  // NaN outside the sequences
  for (int b = 0; b < B; ++b) {
    for (int s = 0; s < c.kv_lens[b]; ++s) {
      for (int h = 0; h < N; ++h) {
        const size_t dst = c.head_major ? ((static_cast<size_t>(b) * N + h) * capacity + s) * dim
                                        : ((static_cast<size_t>(b) * capacity + s) * N + h) * dim;
        std::copy_n(t.bits[b].begin() + (static_cast<size_t>(s) * N + h) * dim, dim, flat.begin() + dst);
      }
    }
  }
  keep.push_back(upload(flat));
  return {.data = reinterpret_cast<const __nv_bfloat16*>(keep.back().data()),
          .page_stride = static_cast<int64_t>(capacity) * N * dim,
          .token_stride = c.head_major ? dim : static_cast<int64_t>(N) * dim,
          .head_stride = c.head_major ? static_cast<int64_t>(capacity) * dim : dim};
}

void check_standard_case(const StandardCase& c) {
  Rng rng;
  const int B = static_cast<int>(c.kv_lens.size());
  const int N = c.n_heads;
  const bool sparse = c.top_k > 0;
  const std::string label = "standard_decode " + c.name + " [B=" + std::to_string(B) + " N=" + std::to_string(N) +
                            " dims=" + std::to_string(c.dim_qk) + "/" + std::to_string(c.dim_v) +
                            " kv_lens=" + list(c.kv_lens) +
                            (sparse ? " sparse top_k=" + std::to_string(c.top_k) : " dense") +
                            (c.page_size    ? " page=" + std::to_string(c.page_size)
                             : c.head_major ? " head-major"
                                            : "") +
                            (c.bf16_out ? " out=bf16" : " out=f32") + " seed=" + std::to_string(rng.seed) + "]";
  int max_len = 1;
  for (int len : c.kv_lens) max_len = std::max(max_len, len);
  const CacheTensor k = random_cache(c.kv_lens, N, c.dim_qk, rng);
  const CacheTensor v = random_cache(c.kv_lens, N, c.dim_v, rng);
  const Bf16Values q = random_bf16(static_cast<size_t>(B) * N * c.dim_qk, rng);

  const int index_stride = c.top_k + 3;
  std::vector<int32_t> indices(sparse ? static_cast<size_t>(B) * index_stride : 0, -1);
  std::vector<std::vector<int>> visible(B);
  for (int b = 0; b < B; ++b) {
    const int len = c.kv_lens[b];
    if (!sparse) {
      for (int s = 0; s < len; ++s) visible[b].push_back(s);
      continue;
    }
    std::vector<int> all(len);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng.engine);
    const int chosen = std::min(len, c.top_k - 2);
    visible[b].assign(all.begin(), all.begin() + chosen);
    std::vector<int32_t> row(visible[b].begin(), visible[b].end());
    row.push_back(-1);
    row.push_back(len);  // out of range: skipped
    while (static_cast<int>(row.size()) < c.top_k) row.push_back(-1);
    std::shuffle(row.begin(), row.end(), rng.engine);
    std::copy(row.begin(), row.end(), indices.begin() + static_cast<size_t>(b) * index_stride);
  }

  // Float64 reference.
  std::vector<double> ref_out(static_cast<size_t>(B) * N * c.dim_v, 0.0);
  std::vector<double> ref_lse(static_cast<size_t>(B) * N, -std::numeric_limits<double>::infinity());
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < N; ++h) {
      const float* qh = &q.values[(static_cast<size_t>(b) * N + h) * c.dim_qk];
      std::vector<double> score;
      double max_score = -std::numeric_limits<double>::infinity();
      for (int s : visible[b]) {
        const float* kh = &k.values[b][(static_cast<size_t>(s) * N + h) * c.dim_qk];
        double dot = 0;
        for (int d = 0; d < c.dim_qk; ++d) dot += double(qh[d]) * kh[d];
        score.push_back(c.scale * dot);
        max_score = std::max(max_score, score.back());
      }
      if (score.empty()) continue;
      double sum = 0;
      double* o = &ref_out[(static_cast<size_t>(b) * N + h) * c.dim_v];
      for (size_t i = 0; i < score.size(); ++i) {
        const double p = std::exp(score[i] - max_score);
        sum += p;
        const float* vh = &v.values[b][(static_cast<size_t>(visible[b][i]) * N + h) * c.dim_v];
        for (int d = 0; d < c.dim_v; ++d) o[d] += p * vh[d];
      }
      for (int d = 0; d < c.dim_v; ++d) o[d] /= sum;
      ref_lse[static_cast<size_t>(b) * N + h] = max_score + std::log(sum);
    }
  }

  std::vector<latte::cuda::DeviceBuffer<uint16_t>> keep;
  std::vector<latte::cuda::DeviceBuffer<int32_t>> keep_tables;
  latte::cuda::StandardDecodeParams params;
  params.k_cache = upload_cache(c, k, c.dim_qk, rng, keep, keep_tables);
  params.v_cache = upload_cache(c, v, c.dim_v, rng, keep, keep_tables);
  auto q_device = upload(q.bits);
  const std::vector<int32_t> lens(c.kv_lens.begin(), c.kv_lens.end());
  auto lens_device = upload(lens);
  auto indices_device = upload(indices);
  const size_t n_out = static_cast<size_t>(B) * N * c.dim_v;
  latte::cuda::DeviceBuffer<char> out_device(n_out * (c.bf16_out ? 2 : 4));
  latte::cuda::DeviceBuffer<float> lse_device(static_cast<size_t>(B) * N);
  poison(out_device.data(), out_device.size());
  poison(lse_device.data(), lse_device.bytes());
  params.q = reinterpret_cast<const __nv_bfloat16*>(q_device.data());
  params.q_batch_stride = static_cast<int64_t>(N) * c.dim_qk;
  params.q_head_stride = c.dim_qk;
  params.kv_lens = lens_device.data();
  if (sparse) {
    params.indices = indices_device.data();
    params.index_stride = index_stride;
    params.top_k = c.top_k;
  }
  params.batch = B;
  params.n_heads = N;
  params.head_dim_qk = c.dim_qk;
  params.head_dim_v = c.dim_v;
  params.max_kv_len = max_len;
  params.scale = c.scale;
  params.out_type = c.bf16_out ? AttnOutputType::bf16 : AttnOutputType::f32;
  params.out = out_device.data();
  params.lse = lse_device.data();
  const latte::cuda::StandardDecodePlan plan = latte::cuda::plan_standard_decode(params, c.force_splits);
  latte::cuda::DeviceBuffer<char> workspace(std::max<size_t>(plan.workspace_bytes, 16));
  poison(workspace.data(), workspace.size());
  latte::cuda::run_standard_decode(params, plan, workspace.data(), workspace.size(), nullptr);
  const std::vector<float> out = download_as_float(out_device.data(), n_out, c.bf16_out);
  const std::vector<float> lse = download(lse_device.data(), static_cast<size_t>(B) * N);

  // fp32 accumulation: ~1e-6 relative; a bf16 output adds 2^-9 relative.
  const double out_tol = c.bf16_out ? 5e-3 : 1e-4;
  const Comparison out_cmp = compare(out, ref_out, (c.bf16_out ? 0.05 : 1e-3) * rms(ref_out));
  const Comparison lse_cmp = compare(lse, ref_lse, 1e-4);
  const std::string summary = label + " plan{splits " + std::to_string(plan.splits) + ", chunk " +
                              std::to_string(plan.chunk) + "}\n  " + out_cmp.describe("out") + "\n  " +
                              lse_cmp.describe("lse");
  if (out_cmp.rel_l2 < out_tol && !out_cmp.has_bad() && !lse_cmp.has_bad()) {
    MESSAGE(summary);
  } else {
    FAIL_CHECK(summary);
  }
}

void check_all(const std::vector<StandardCase>& cases) {
  for (const StandardCase& c : cases) {
    try {
      check_standard_case(c);
    } catch (const std::exception& e) {
      FAIL_CHECK("standard_decode " << c.name << " threw: " << e.what());
    }
  }
}

}  // namespace

TEST_CASE("standard decode matches the float64 reference (DeepSeek and GLM-5 head dims)") {
  check_all({
      {.name = "deepseek dims, 16 heads", .kv_lens = {1, 2, 63, 65, 1000, 4097}},
      {.name = "deepseek dims, 4 heads, one split", .n_heads = 4, .kv_lens = {65, 1000}, .force_splits = 1},
      {.name = "deepseek dims, 128 heads", .n_heads = 128, .kv_lens = {1000, 63}},
      {.name = "glm-5 dims, 16 heads", .dim_qk = 256, .dim_v = 256, .kv_lens = {4097, 2, 300}},
      {.name = "glm-5 dims, 64 heads, 9 splits",
       .dim_qk = 256,
       .dim_v = 256,
       .n_heads = 64,
       .kv_lens = {1000, 1},
       .force_splits = 9},
      {.name = "sharp softmax", .kv_lens = {1000, 4097}, .scale = 0.4f},
      {.name = "bf16 output", .kv_lens = {500, 3}, .bf16_out = true},
  });
}

TEST_CASE("standard decode reads paged and head-major caches") {
  check_all({
      {.name = "page 32", .kv_lens = {1000, 65, 1}, .page_size = 32},
      {.name = "page 48, glm-5 dims", .dim_qk = 256, .dim_v = 256, .n_heads = 4, .kv_lens = {700, 50}, .page_size = 48},
      {.name = "head-major", .kv_lens = {1000, 2}, .head_major = true},
  });
}

TEST_CASE("sparse standard decode attends exactly the listed positions") {
  check_all({
      {.name = "top_k 256", .kv_lens = {1000, 100, 1}, .top_k = 256},
      {.name = "top_k 2048, glm-5 dims",
       .dim_qk = 256,
       .dim_v = 256,
       .n_heads = 8,
       .kv_lens = {4097, 300},
       .top_k = 2048},
  });
}

TEST_CASE("standard decode rejects unsupported head dims with latte::Error") {
  latte::cuda::StandardDecodeParams p;
  p.batch = 1;
  p.n_heads = 1;
  p.head_dim_qk = 128;
  p.head_dim_v = 128;
  CHECK_THROWS_AS(latte::cuda::plan_standard_decode(p), latte::Error);
}
