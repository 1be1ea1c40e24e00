// DSA lightning indexer on the GPU vs float64 / exact host references:
//   I[t,s] = sum_h w[t,h] * ReLU(scale * q_I[t,h] . k_I[s]) over visible s, then the top_k positions
//   (ties: the lower position wins; all visible positions when there are at most top_k).
#include "attention_test_support.hpp"
#include "cuda/dsa_indexer.hpp"

#include <doctest/doctest.h>

#include <latte/error.hpp>

#include <cstdint>
#include <set>

namespace {

using namespace latte::test::attention;
using latte::cuda::kDsaIndexHeadDim;
using latte::cuda::kDsaIndexHeads;

struct ScoreCase {
  std::string name;
  int q_len = 1;
  std::vector<int> kv_lens;
  int page_size = 0;
};

struct ScoreSetup {
  std::vector<double> ref;    // [rows, stride], NaN where not visible
  std::vector<float> scores;  // device result, same layout
  int64_t stride = 0;
  std::vector<int> visible;  // per row
  std::string label;
};

int visible_of(int kv_len, int q_len, int t) { return kv_len - q_len + t + 1; }

ScoreSetup run_scores(const ScoreCase& c, Rng& rng, latte::cuda::DeviceBuffer<float>& scores_device,
                      latte::cuda::DeviceBuffer<int32_t>& lens_device) {
  const int B = static_cast<int>(c.kv_lens.size());
  const int rows = B * c.q_len;
  int max_len = 1;
  for (int len : c.kv_lens) max_len = std::max(max_len, len);
  ScoreSetup s;
  s.stride = max_len + 5;
  s.label = "dsa_index_scores " + c.name + " [B=" + std::to_string(B) + " q_len=" + std::to_string(c.q_len) +
            " kv_lens=" + list(c.kv_lens) + (c.page_size ? " page=" + std::to_string(c.page_size) : "") +
            " seed=" + std::to_string(rng.seed) + "]";
  const Bf16Values q = random_bf16(static_cast<size_t>(rows) * kDsaIndexHeads * kDsaIndexHeadDim, rng);
  std::vector<float> w(static_cast<size_t>(rows) * kDsaIndexHeads);
  for (float& x : w) x = rng.uniform(-1.0f, 1.0f);
  std::vector<std::vector<uint16_t>> k_bits(B);
  std::vector<std::vector<float>> k_values(B);
  for (int b = 0; b < B; ++b) {
    Bf16Values k = random_bf16(static_cast<size_t>(c.kv_lens[b]) * kDsaIndexHeadDim, rng);
    k_bits[b] = std::move(k.bits);
    k_values[b] = std::move(k.values);
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(kDsaIndexHeadDim));
  s.ref.assign(static_cast<size_t>(rows) * s.stride, std::nan(""));
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < c.q_len; ++t) {
      const int row = b * c.q_len + t;
      s.visible.push_back(visible_of(c.kv_lens[b], c.q_len, t));
      for (int pos = 0; pos < s.visible.back(); ++pos) {
        double total = 0;
        for (int h = 0; h < kDsaIndexHeads; ++h) {
          const float* qh = &q.values[(static_cast<size_t>(row) * kDsaIndexHeads + h) * kDsaIndexHeadDim];
          const float* kp = &k_values[b][static_cast<size_t>(pos) * kDsaIndexHeadDim];
          double dot = 0;
          for (int d = 0; d < kDsaIndexHeadDim; ++d) dot += double(qh[d]) * kp[d];
          total += double(w[static_cast<size_t>(row) * kDsaIndexHeads + h]) * std::max(0.0, double(scale) * dot);
        }
        s.ref[static_cast<size_t>(row) * s.stride + pos] = total;
      }
    }
  }

  latte::cuda::DeviceBuffer<uint16_t> k_device;
  latte::cuda::DeviceBuffer<int64_t> table_device;
  latte::cuda::DsaIndexScoresParams p;
  if (c.page_size > 0) {
    const PagedPool pool = make_paged_pool(k_bits, kDsaIndexHeadDim, c.page_size, rng);
    k_device = upload(pool.pool);
    table_device = upload(pool.page_table);
    p.k_cache = {.data = reinterpret_cast<const __nv_bfloat16*>(k_device.data()),
                 .page_table = table_device.data(),
                 .page_stride = pool.page_stride,
                 .token_stride = kDsaIndexHeadDim,
                 .page_size = c.page_size,
                 .page_table_stride = pool.pages_per_seq};
  } else {
    std::vector<uint16_t> flat(static_cast<size_t>(B) * max_len * kDsaIndexHeadDim, 0xffffu);
    for (int b = 0; b < B; ++b) {
      std::copy(k_bits[b].begin(), k_bits[b].end(), flat.begin() + static_cast<size_t>(b) * max_len * kDsaIndexHeadDim);
    }
    k_device = upload(flat);
    p.k_cache = {.data = reinterpret_cast<const __nv_bfloat16*>(k_device.data()),
                 .page_stride = static_cast<int64_t>(max_len) * kDsaIndexHeadDim,
                 .token_stride = kDsaIndexHeadDim};
  }
  auto q_device = upload(q.bits);
  auto w_device = upload(w);
  lens_device = upload(std::vector<int32_t>(c.kv_lens.begin(), c.kv_lens.end()));
  scores_device = latte::cuda::DeviceBuffer<float>(static_cast<size_t>(rows) * s.stride);
  poison(scores_device.data(), scores_device.bytes());
  p.q = reinterpret_cast<const __nv_bfloat16*>(q_device.data());
  p.q_token_stride = int64_t{kDsaIndexHeads} * kDsaIndexHeadDim;
  p.q_head_stride = kDsaIndexHeadDim;
  p.weights = w_device.data();
  p.weights_token_stride = kDsaIndexHeads;
  p.kv_lens = lens_device.data();
  p.batch = B;
  p.q_len = c.q_len;
  p.max_kv_len = max_len;
  p.scale = scale;
  p.scores = scores_device.data();
  p.scores_stride = s.stride;
  latte::cuda::run_dsa_index_scores(p, nullptr);
  s.scores = download(scores_device.data(), scores_device.size());
  return s;
}

/// Host top-k: positions sorted by (score desc, position asc), the first min(k, n) in ascending order.
std::vector<int32_t> reference_top_k(const float* scores, int n, int k) {
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return scores[a] > scores[b]; });
  order.resize(std::min(n, k));
  std::sort(order.begin(), order.end());
  return order;
}

struct TopKCase {
  std::string name;
  int q_len = 1;
  std::vector<int> kv_lens;
  int top_k = 2048;
  int distinct_values = 0;  // > 0: scores from this many values only (ties everywhere)
};

void check_top_k_case(const TopKCase& c) {
  Rng rng;
  const int B = static_cast<int>(c.kv_lens.size());
  const int rows = B * c.q_len;
  int max_len = 1;
  for (int len : c.kv_lens) max_len = std::max(max_len, len);
  const int64_t stride = max_len + 3;
  const int64_t index_stride = c.top_k + 4;
  const std::string label = "dsa_top_k " + c.name + " [B=" + std::to_string(B) + " q_len=" + std::to_string(c.q_len) +
                            " kv_lens=" + list(c.kv_lens) + " top_k=" + std::to_string(c.top_k) +
                            " seed=" + std::to_string(rng.seed) + "]";
  std::vector<float> scores(static_cast<size_t>(rows) * stride, std::nanf(""));  // NaN where not visible
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < c.q_len; ++t) {
      float* row = &scores[static_cast<size_t>(b * c.q_len + t) * stride];
      for (int s = 0; s < visible_of(c.kv_lens[b], c.q_len, t); ++s) {
        row[s] = c.distinct_values > 0 ? static_cast<float>(rng.uniform_int(0, c.distinct_values - 1)) - 2.0f
                                       : rng.uniform(-10.0f, 10.0f);
        if (c.distinct_values == 0 && rng.uniform_int(0, 50) == 0) row[s] = -INFINITY;  // masked-like scores
      }
    }
  }
  auto scores_device = upload(scores);
  auto lens_device = upload(std::vector<int32_t>(c.kv_lens.begin(), c.kv_lens.end()));
  latte::cuda::DeviceBuffer<int32_t> indices_device(static_cast<size_t>(rows) * index_stride);
  poison(indices_device.data(), indices_device.bytes(), 0x7f);
  latte::cuda::run_dsa_top_k({.scores = scores_device.data(),
                              .scores_stride = stride,
                              .kv_lens = lens_device.data(),
                              .batch = B,
                              .q_len = c.q_len,
                              .top_k = c.top_k,
                              .indices = indices_device.data(),
                              .index_stride = index_stride},
                             nullptr);
  const std::vector<int32_t> got = download(indices_device.data(), indices_device.size());
  int bad_rows = 0;
  std::string first_bad;
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < c.q_len; ++t) {
      const int row = b * c.q_len + t;
      const int n = visible_of(c.kv_lens[b], c.q_len, t);
      std::vector<int32_t> want = reference_top_k(&scores[static_cast<size_t>(row) * stride], n, c.top_k);
      want.resize(c.top_k, -1);
      const int32_t* g = &got[static_cast<size_t>(row) * index_stride];
      bool ok = std::equal(want.begin(), want.end(), g);
      for (int64_t i = c.top_k; i < index_stride; ++i) ok = ok && g[i] == 0x7f7f7f7f;  // untouched
      if (!ok) {
        if (bad_rows++ == 0) {
          int i = 0;
          while (i < c.top_k && want[i] == g[i]) ++i;
          first_bad = "row " + std::to_string(row) + " (visible " + std::to_string(n) + "): first difference at slot " +
                      std::to_string(i) + " want " + std::to_string(i < c.top_k ? want[i] : -2) + " got " +
                      std::to_string(g[std::min<int64_t>(i, index_stride - 1)]);
        }
      }
    }
  }
  if (bad_rows == 0) {
    MESSAGE(label << ": all " << rows << " rows exact");
  } else {
    FAIL_CHECK(label << ": " << bad_rows << " of " << rows << " rows differ; " << first_bad);
  }
}

}  // namespace

TEST_CASE("dsa index scores match the float64 reference on visible positions and leave the rest untouched") {
  const std::vector<ScoreCase> cases = {
      {.name = "decode", .kv_lens = {1, 100, 4097}},
      {.name = "prefill chunk", .q_len = 70, .kv_lens = {300}},
      {.name = "paged, 5 tokens per entry", .q_len = 5, .kv_lens = {5, 1000}, .page_size = 48},
  };
  for (const ScoreCase& c : cases) {
    try {
      Rng rng;
      latte::cuda::DeviceBuffer<float> scores_device;
      latte::cuda::DeviceBuffer<int32_t> lens_device;
      const ScoreSetup s = run_scores(c, rng, scores_device, lens_device);
      std::vector<float> got_visible;
      std::vector<double> ref_visible;
      size_t written_outside = 0;
      for (size_t row = 0; row < s.visible.size(); ++row) {
        for (int64_t pos = 0; pos < s.stride; ++pos) {
          const size_t i = row * s.stride + pos;
          if (pos < s.visible[row]) {
            got_visible.push_back(s.scores[i]);
            ref_visible.push_back(s.ref[i]);
          } else if (!std::isnan(s.scores[i])) {
            ++written_outside;
          }
        }
      }
      const Comparison cmp = compare(got_visible, ref_visible, 1e-4 * rms(ref_visible));
      const std::string summary = s.label + "\n  " + cmp.describe("scores") +
                                  "\n  entries written past the visible positions: " + std::to_string(written_outside);
      if (cmp.rel_l2 < 1e-5 && !cmp.has_bad() && written_outside == 0) {
        MESSAGE(summary);
      } else {
        FAIL_CHECK(summary);
      }
    } catch (const std::exception& e) {
      FAIL_CHECK("dsa_index_scores " << c.name << " threw: " << e.what());
    }
  }
}

TEST_CASE("dsa top-k selects the largest scores, lower positions winning ties, in ascending order") {
  const std::vector<TopKCase> cases = {
      {.name = "fewer, equal and more than top_k", .kv_lens = {10, 2048, 5000}},
      {.name = "many ties", .kv_lens = {1000, 3000}, .top_k = 100, .distinct_values = 8},
      {.name = "all equal", .kv_lens = {700}, .top_k = 64, .distinct_values = 1},
      {.name = "prefill rows", .q_len = 300, .kv_lens = {3000}},
      {.name = "top_k 1", .kv_lens = {50, 1}, .top_k = 1},
  };
  for (const TopKCase& c : cases) {
    try {
      check_top_k_case(c);
    } catch (const std::exception& e) {
      FAIL_CHECK("dsa_top_k " << c.name << " threw: " << e.what());
    }
  }
}

TEST_CASE("dsa indexer scores then top-k select the reference set (up to near-ties at the threshold)") {
  const ScoreCase c{.name = "end to end", .kv_lens = {3000, 5000, 1500}};
  const int top_k = 2048;
  try {
    Rng rng;
    latte::cuda::DeviceBuffer<float> scores_device;
    latte::cuda::DeviceBuffer<int32_t> lens_device;
    const ScoreSetup s = run_scores(c, rng, scores_device, lens_device);
    const int rows = static_cast<int>(s.visible.size());
    latte::cuda::DeviceBuffer<int32_t> indices_device(static_cast<size_t>(rows) * top_k);
    poison(indices_device.data(), indices_device.bytes(), 0x7f);
    latte::cuda::run_dsa_top_k({.scores = scores_device.data(),
                                .scores_stride = s.stride,
                                .kv_lens = lens_device.data(),
                                .batch = rows,
                                .q_len = 1,
                                .top_k = top_k,
                                .indices = indices_device.data(),
                                .index_stride = top_k},
                               nullptr);
    const std::vector<int32_t> got = download(indices_device.data(), indices_device.size());
    for (int row = 0; row < rows; ++row) {
      const int n = s.visible[row];
      const double* ref = &s.ref[static_cast<size_t>(row) * s.stride];
      std::vector<int> order(n);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return ref[a] > ref[b]; });
      const int k = std::min(n, top_k);
      const double threshold = ref[order[k - 1]];
      const double near = 1e-4 * rms(std::vector<double>(ref, ref + n));
      const std::set<int> want(order.begin(), order.begin() + k);
      const std::set<int> have(got.begin() + static_cast<size_t>(row) * top_k,
                               got.begin() + static_cast<size_t>(row) * top_k + k);
      int real_mismatches = 0;
      for (int pos = 0; pos < n; ++pos) {
        if ((want.count(pos) != have.count(pos)) && std::abs(ref[pos] - threshold) > near) ++real_mismatches;
      }
      CHECK_MESSAGE(real_mismatches == 0, s.label << " row " << row << ": " << real_mismatches
                                                  << " positions selected differently away from the threshold "
                                                  << threshold);
      CHECK_MESSAGE(static_cast<int>(have.size()) == k, s.label << " row " << row << ": duplicate or invalid indices");
    }
  } catch (const std::exception& e) {
    FAIL_CHECK("dsa end to end threw: " << e.what());
  }
}
