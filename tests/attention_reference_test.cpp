// Each attention backend against a float64 reference written here straight from DESIGN.md:
//   k_nope_h = W_UK_h c,  v_h = W_UV_h c,
//   o_h = softmax(scale * [q_nope_h | q_pe_h] . [k_nope_h | k_pe]) v_h    (causal, optional selection)
// over a prefill step and decode steps on one cache, dense and with a sparse selection.
#include "model/presets.hpp"
#include "support/random_models.hpp"
#include "support/test_options.hpp"

#include <latte/attention.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

namespace {

constexpr double kFp32Tolerance = 1e-5;

struct Weights {
  std::vector<float> k_b, v_b, kv_b;  // file layouts, built here from W_UK / W_UV
  std::vector<double> w_uk, w_uv;     // [N][P][L], [N][V][L]
};

Weights random_up_projections(const latte::ModelConfig& c, std::mt19937_64& rng) {
  const size_t N = static_cast<size_t>(c.n_head), L = static_cast<size_t>(c.kv_lora_rank);
  const size_t P = static_cast<size_t>(c.qk_nope_head_dim), V = static_cast<size_t>(c.v_head_dim);
  std::normal_distribution<float> d(0.0f, 1.0f / std::sqrt(static_cast<float>(L)));
  Weights w;
  w.w_uk.resize(N * P * L);
  w.w_uv.resize(N * V * L);
  for (auto& x : w.w_uk) x = d(rng);
  for (auto& x : w.w_uv) x = d(rng);
  w.k_b.resize(N * L * P);
  w.v_b.resize(N * V * L);
  w.kv_b.resize(N * (P + V) * L);
  for (size_t h = 0; h < N; ++h) {
    for (size_t p = 0; p < P; ++p) {
      for (size_t l = 0; l < L; ++l) {
        const auto x = static_cast<float>(w.w_uk[(h * P + p) * L + l]);
        w.k_b[(h * L + l) * P + p] = x;         // attn_k_b {P, L, N}
        w.kv_b[(h * (P + V) + p) * L + l] = x;  // attn_kv_b rows: head h's P K rows ...
      }
    }
    for (size_t v = 0; v < V; ++v) {
      for (size_t l = 0; l < L; ++l) {
        const auto x = static_cast<float>(w.w_uv[(h * V + v) * L + l]);
        w.v_b[(h * V + v) * L + l] = x;             // attn_v_b {L, V, N}
        w.kv_b[(h * (P + V) + P + v) * L + l] = x;  // ... then its V V rows
      }
    }
  }
  return w;
}

latte::TensorView view(const std::vector<float>& v, std::array<int64_t, 4> ne) {
  return {.name = "test",
          .type = latte::GgmlType::f32,
          .ne = ne,
          .data = reinterpret_cast<const std::byte*>(v.data()),
          .row_bytes = static_cast<size_t>(ne[0]) * 4};
}

/// Reference output [T, N, V] for query rows at positions first_position.. over cached c / k_pe.
std::vector<double> reference(const latte::ModelConfig& c, const Weights& w, const std::vector<float>& q,
                              const std::vector<float>& latent, const std::vector<float>& k_rope, int first_position,
                              int n_rows, const std::vector<std::set<int>>* selection) {
  const int N = c.n_head, L = c.kv_lora_rank, P = c.qk_nope_head_dim, R = c.qk_rope_head_dim, V = c.v_head_dim;
  const double scale = c.attention_scale();
  std::vector<double> out(static_cast<size_t>(n_rows) * N * V, 0.0);
  for (int t = 0; t < n_rows; ++t) {
    const int pos = first_position + t;
    for (int h = 0; h < N; ++h) {
      const float* qh = q.data() + (static_cast<size_t>(t) * N + h) * (P + R);
      std::vector<double> scores;
      std::vector<int> keys;
      for (int j = 0; j <= pos; ++j) {
        if (selection && !(*selection)[static_cast<size_t>(t)].count(j)) continue;
        double s = 0;
        for (int p = 0; p < P; ++p) {
          double k = 0;
          for (int l = 0; l < L; ++l)
            k += w.w_uk[(static_cast<size_t>(h) * P + p) * L + l] * latent[static_cast<size_t>(j) * L + l];
          s += qh[p] * k;
        }
        for (int r = 0; r < R; ++r) s += static_cast<double>(qh[P + r]) * k_rope[static_cast<size_t>(j) * R + r];
        scores.push_back(s * scale);
        keys.push_back(j);
      }
      double m = -INFINITY;
      for (double s : scores) m = std::max(m, s);
      double z = 0;
      for (auto& s : scores) z += s = std::exp(s - m);
      for (size_t i = 0; i < keys.size(); ++i) {
        const int j = keys[i];
        for (int v = 0; v < V; ++v) {
          double val = 0;
          for (int l = 0; l < L; ++l)
            val += w.w_uv[(static_cast<size_t>(h) * V + v) * L + l] * latent[static_cast<size_t>(j) * L + l];
          out[(static_cast<size_t>(t) * N + h) * V + v] += scores[i] / z * val;
        }
      }
    }
  }
  return out;
}

double relative(const std::vector<float>& a, const std::vector<double>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d += (a[i] - b[i]) * (a[i] - b[i]);
    n += b[i] * b[i];
  }
  return std::sqrt(d / n);
}

}  // namespace

TEST_CASE("each attention backend matches a float64 reference of MLA attention") {
  const std::string backend_name = latte::test::attention_backend();
  for (const char* preset : {"test-v3", "test-glm-flash"}) {
    CAPTURE(preset);
    const latte::ModelConfig c = latte::model_preset(preset);
    const int N = c.n_head, L = c.kv_lora_rank, P = c.qk_nope_head_dim, R = c.qk_rope_head_dim, V = c.v_head_dim;
    const uint64_t seed = std::random_device{}();
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    const Weights w = random_up_projections(c, rng);
    auto backend = latte::AttentionRegistry::instance().create(backend_name, c, latte::Device::cpu());
    const latte::AttentionLayerWeights layer{.layer = 0,
                                             .k_b = view(w.k_b, {P, L, N, 1}),
                                             .v_b = view(w.v_b, {L, V, N, 1}),
                                             .kv_b = view(w.kv_b, {L, N * (P + V), 1, 1})};
    backend->prepare(std::span(&layer, 1));
    std::vector<std::byte> cache(64 * backend->kv_layout().bytes_per_token());

    constexpr int kTotal = 26;
    std::normal_distribution<float> d;
    std::vector<float> q_all(static_cast<size_t>(kTotal) * N * (P + R)), latent(static_cast<size_t>(kTotal) * L),
        k_rope(static_cast<size_t>(kTotal) * R);
    for (auto* v : {&q_all, &latent, &k_rope}) {
      for (auto& x : *v) x = d(rng);
    }
    // Steps: a 20-token prefill, a 3-token chunk, then 3 single tokens with a sparse selection.
    int n_past = 0;
    for (const int n : {20, 3, 1, 1, 1}) {
      CAPTURE(n_past);
      const bool sparse = n_past >= 23;
      std::vector<std::set<int>> chosen(static_cast<size_t>(n));
      std::vector<int32_t> selection;
      constexpr int kWidth = 8;
      if (sparse) {
        for (int t = 0; t < n; ++t) {
          std::uniform_int_distribution<int> pick(0, n_past + t);
          while (chosen[static_cast<size_t>(t)].size() < kWidth) chosen[static_cast<size_t>(t)].insert(pick(rng));
          for (int j : chosen[static_cast<size_t>(t)]) selection.push_back(j);
        }
      }
      const auto rows = [&](const std::vector<float>& v, size_t width) {
        return std::vector<float>(v.begin() + static_cast<std::ptrdiff_t>(n_past * width),
                                  v.begin() + static_cast<std::ptrdiff_t>((n_past + n) * width));
      };
      const auto q = rows(q_all, static_cast<size_t>(N) * (P + R));
      const auto c_new = rows(latent, static_cast<size_t>(L));
      const auto k_new = rows(k_rope, static_cast<size_t>(R));
      std::vector<float> out(static_cast<size_t>(n) * N * V, std::nanf(""));
      const latte::AttentionSequence seq{.cache = cache.data(), .n_past = n_past, .first_row = 0, .n_tokens = n};
      backend->forward({.layer = 0,
                        .n_rows = n,
                        .q = q.data(),
                        .latent = c_new.data(),
                        .k_rope = k_new.data(),
                        .sequences = std::span(&seq, 1),
                        .selection = sparse ? selection.data() : nullptr,
                        .selection_width = sparse ? kWidth : 0,
                        .scale = c.attention_scale(),
                        .out = out.data()});
      const auto expected = reference(c, w, q, latent, k_rope, n_past, n, sparse ? &chosen : nullptr);
      CHECK(relative(out, expected) <= kFp32Tolerance);
      n_past += n;
    }
  }
}
