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
  // k[b]: [len, N, dim_qk], v[b]: [len, N, dim_v]; q [B, N, dim_qk].
  const CacheRows k = random_cache_rows(c.kv_lens, static_cast<size_t>(N) * c.dim_qk, rng);
  const CacheRows v = random_cache_rows(c.kv_lens, static_cast<size_t>(N) * c.dim_v, rng);
  const Bf16Values q = random_bf16(static_cast<size_t>(B) * N * c.dim_qk, rng);

  const int index_stride = c.top_k + 3;
  SparseSelection selection;
  std::vector<std::vector<int>> visible(B);
  if (sparse) {
    selection = random_sparse_selection(c.kv_lens, c.top_k, index_stride, rng);
    visible = selection.selected;
  } else {
    for (int b = 0; b < B; ++b) visible[b] = causal_positions(c.kv_lens[b], 1, 0);
  }

  // Float64 reference.
  std::vector<double> ref_out(static_cast<size_t>(B) * N * c.dim_v, 0.0);
  std::vector<double> ref_lse(static_cast<size_t>(B) * N);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < N; ++h) {
      const size_t row = static_cast<size_t>(b) * N + h;
      const float* qh = &q.values[row * c.dim_qk];
      const auto dot = [&](int s) {
        const float* kh = &k.values[b][(static_cast<size_t>(s) * N + h) * c.dim_qk];
        double sum = 0;
        for (int d = 0; d < c.dim_qk; ++d) sum += double(qh[d]) * kh[d];
        return sum;
      };
      const auto value = [&](int s) { return &v.values[b][(static_cast<size_t>(s) * N + h) * c.dim_v]; };
      ref_lse[row] =
          reference_attention_row(visible[b], c.scale, dot, value, std::span(ref_out).subspan(row * c.dim_v, c.dim_v));
    }
  }

  const CacheLayout k_layout{.n_heads = N, .dim = c.dim_qk, .page_size = c.page_size, .head_major = c.head_major};
  const CacheLayout v_layout{.n_heads = N, .dim = c.dim_v, .page_size = c.page_size, .head_major = c.head_major};
  const DeviceCache k_device = upload_cache(k.bits, k_layout, rng);
  const DeviceCache v_device = upload_cache(v.bits, v_layout, rng);
  auto q_device = upload(q.bits);
  const std::vector<int32_t> lens(c.kv_lens.begin(), c.kv_lens.end());
  auto lens_device = upload(lens);
  auto indices_device = upload(selection.indices);
  DecodeOutputs outputs(static_cast<size_t>(B) * N, c.dim_v, c.bf16_out);
  latte::cuda::StandardDecodeParams params;
  params.k_cache = k_device.view;
  params.v_cache = v_device.view;
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
  params.out = outputs.out.data();
  params.lse = outputs.lse.data();
  const latte::cuda::StandardDecodePlan plan = latte::cuda::plan_standard_decode(params, c.force_splits);
  latte::cuda::DeviceBuffer<char> workspace(std::max<size_t>(plan.workspace_bytes, 16));
  poison(workspace.data(), workspace.size());
  latte::cuda::run_standard_decode(params, plan, workspace.data(), workspace.size(), nullptr);

  // fp32 accumulation: ~1e-6 relative; a bf16 output adds 2^-9 relative.
  const std::string plan_text =
      " plan{splits " + std::to_string(plan.splits) + ", chunk " + std::to_string(plan.chunk) + "}";
  check_outputs(label + plan_text, outputs.out_values(), ref_out, outputs.lse_values(), ref_lse,
                {.out_rel_l2 = c.bf16_out ? 5e-3 : 1e-4,
                 .out_elem = (c.bf16_out ? 0.05 : 1e-3) * rms(ref_out),
                 .lse_elem = 1e-4});
}

void check_all(const std::vector<StandardCase>& cases) {
  check_each_case(cases, "standard_decode", check_standard_case);
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
