// The glm-dsa lightning indexer against a float64 reference written here from DESIGN.md, through
// a host-registered backend that records the selection the model hands to attention. Below top_k
// positions the attention is dense; above, it differs from dense attention.
#include "model/presets.hpp"
#include "support/gguf_rewrite.hpp"
#include "support/random_models.hpp"
#include "support/test_options.hpp"

#include <latte/attention.hpp>
#include <latte/gguf.hpp>
#include <latte/session.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <set>

namespace {

/// Delegates to a built-in backend and records layer 0's selection rows of every step.
class RecordingBackend final : public latte::AttentionBackend {
 public:
  RecordingBackend(std::unique_ptr<latte::AttentionBackend> inner, std::vector<std::vector<int>>* rows)
      : inner_(std::move(inner)), rows_(rows) {}
  std::string_view name() const noexcept override { return "recording"; }
  latte::KvLayout kv_layout() const override { return inner_->kv_layout(); }
  void prepare(std::span<const latte::AttentionLayerWeights> l) override { inner_->prepare(l); }
  void forward(const latte::AttentionInput& in) override {
    if (in.layer == 0) {
      for (int t = 0; t < in.n_rows; ++t) {
        std::vector<int> row;  // empty = dense
        for (int j = 0; in.selection && j < in.selection_width; ++j) {
          const int32_t p = in.selection[static_cast<size_t>(t) * in.selection_width + j];
          if (p >= 0) row.push_back(p);
        }
        rows_->push_back(row);
      }
    }
    inner_->forward(in);
  }

 private:
  std::unique_ptr<latte::AttentionBackend> inner_;
  std::vector<std::vector<int>>* rows_;
};

std::vector<double> tensor(const latte::Model& m, const std::string& name) {
  const auto* t = m.file().find_tensor(name);
  REQUIRE(t);
  REQUIRE(t->type == latte::GgmlType::f32);
  const auto bytes = m.file().tensor_data(*t);
  std::vector<float> f(bytes.size() / 4);
  std::memcpy(f.data(), bytes.data(), bytes.size());
  return {f.begin(), f.end()};
}

/// y[o] = sum_i W[o][i] x[i] for a GGUF matrix {in, out}.
std::vector<double> project(const std::vector<double>& w, const std::vector<double>& x) {
  const size_t in = x.size(), out = w.size() / in;
  std::vector<double> y(out, 0.0);
  for (size_t o = 0; o < out; ++o) {
    for (size_t i = 0; i < in; ++i) y[o] += w[o * in + i] * x[i];
  }
  return y;
}

std::vector<double> rms_norm(const std::vector<double>& x, const std::vector<double>& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * w[i];
  return y;
}

/// Interleaved RoPE on the first R values of x at `pos` (no scaling in test-glm-dsa).
void rope(double* x, int R, double base, int pos) {
  for (int i = 0; i < R / 2; ++i) {
    const double th = pos * std::pow(base, -2.0 * i / R), c = std::cos(th), s = std::sin(th);
    const double a = x[2 * i], b = x[2 * i + 1];
    x[2 * i] = a * c - b * s;
    x[2 * i + 1] = a * s + b * c;
  }
}

/// Layer 0's selection for every position of `tokens`, from the formulas.
std::vector<std::vector<int>> reference_selection(const latte::Model& m, const std::vector<latte::Token>& tokens) {
  const latte::ModelConfig& c = m.config();
  const int H = c.n_embd, nI = c.indexer.n_head, dI = c.indexer.head_dim, R = c.qk_rope_head_dim;
  const auto embd = tensor(m, "token_embd.weight"), attn_norm = tensor(m, "blk.0.attn_norm.weight");
  const auto q_a = tensor(m, "blk.0.attn_q_a.weight"), q_a_norm = tensor(m, "blk.0.attn_q_a_norm.weight");
  const auto wq = tensor(m, "blk.0.indexer.attn_q_b.weight"), wk = tensor(m, "blk.0.indexer.attn_k.weight");
  const auto kn_w = tensor(m, "blk.0.indexer.k_norm.weight"), kn_b = tensor(m, "blk.0.indexer.k_norm.bias");
  const auto wp = tensor(m, "blk.0.indexer.proj.weight");
  const size_t T = tokens.size();
  std::vector<std::vector<double>> q(T), k(T), w(T);
  for (size_t t = 0; t < T; ++t) {
    std::vector<double> x(embd.begin() + tokens[t] * H, embd.begin() + (tokens[t] + 1) * H);
    const auto xn = rms_norm(x, attn_norm, c.rms_norm_eps);
    const auto qa = rms_norm(project(q_a, xn), q_a_norm, c.rms_norm_eps);
    q[t] = project(wq, qa);
    for (int h = 0; h < nI; ++h) rope(q[t].data() + h * dI, R, c.rope_freq_base, static_cast<int>(t));
    k[t] = project(wk, xn);
    double mean = std::accumulate(k[t].begin(), k[t].end(), 0.0) / dI, var = 0;
    for (double v : k[t]) var += (v - mean) * (v - mean);
    var /= dI;
    for (int i = 0; i < dI; ++i) k[t][i] = (k[t][i] - mean) / std::sqrt(var + 1e-6) * kn_w[i] + kn_b[i];
    rope(k[t].data(), R, c.rope_freq_base, static_cast<int>(t));
    w[t] = project(wp, xn);
  }
  std::vector<std::vector<int>> out(T);
  for (size_t t = 0; t < T; ++t) {
    std::vector<std::pair<double, int>> scored;
    for (size_t s = 0; s <= t; ++s) {
      double score = 0;
      for (int h = 0; h < nI; ++h) {
        double dot = 0;
        for (int i = 0; i < dI; ++i) dot += q[t][h * dI + i] * k[s][i];
        score += w[t][h] / std::sqrt(nI) * std::max(0.0, dot / std::sqrt(dI));
      }
      scored.push_back({-score, static_cast<int>(s)});
    }
    std::sort(scored.begin(), scored.end());
    for (size_t i = 0; i < scored.size() && i < static_cast<size_t>(c.indexer.top_k); ++i) {
      out[t].push_back(scored[i].second);
    }
    std::sort(out[t].begin(), out[t].end());
  }
  return out;
}

}  // namespace

TEST_CASE("the lightning indexer selects the top_k positions of a float64 reference") {
  const latte::Model model = latte::test::random_model("test-glm-dsa", {.seed = 17});
  REQUIRE(model.config().indexer.top_k == 16);
  std::vector<std::vector<int>> recorded;
  auto& registry = latte::AttentionRegistry::instance();
  registry.add(
      {.name = "recording",
       .create = [&](const latte::ModelConfig& c, latte::Device d) -> std::unique_ptr<latte::AttentionBackend> {
         return std::make_unique<RecordingBackend>(
             latte::AttentionRegistry::instance().create(latte::test::attention_backend(), c, d), &recorded);
       }});
  const auto tokens = latte::test::fresh_tokens(26, model.config().n_vocab);
  {
    latte::Session s(model, {.n_ctx = 64, .attention = "recording"});
    s.eval(std::span(tokens).first(10));        // 10 <= top_k: dense, no selection at all
    s.eval(std::span(tokens).subspan(10, 14));  // up to 24 positions: rows past 16 are sparse
    s.eval(std::span(tokens).subspan(24, 1));
    s.eval(std::span(tokens).subspan(25, 1));
  }
  registry.remove("recording");
  REQUIRE(recorded.size() == tokens.size());
  const auto expected = reference_selection(model, tokens);
  for (size_t t = 0; t < tokens.size(); ++t) {
    CAPTURE(t);
    if (t < 10) {
      CHECK(recorded[t].empty());  // the whole first step was dense
      continue;
    }
    CHECK(recorded[t] == expected[t]);
    CHECK(recorded[t].size() == std::min<size_t>(t + 1, 16));
  }
}

TEST_CASE("DSA equals dense attention up to top_k positions and differs beyond") {
  const latte::ModelConfig c = latte::model_preset("test-glm-dsa");
  auto bytes = latte::random_model_bytes(c, {.seed = 23});
  const auto sparse_file = latte::gguf::File::from_bytes(bytes);
  auto dense_bytes = latte::test::GgufRewrite(sparse_file)
                         .set_key("glm-dsa.attention.indexer.top_k", latte::gguf::Value(uint32_t{4096}))
                         .bytes();
  const latte::Model sparse = latte::Model::from_file(latte::gguf::File::from_bytes(bytes));
  const latte::Model dense = latte::Model::from_file(latte::gguf::File::from_bytes(dense_bytes));
  const auto tokens = latte::test::fresh_tokens(30, c.n_vocab);
  const auto a = latte::test::all_logits(sparse, latte::test::attention_backend(), tokens);
  const auto b = latte::test::all_logits(dense, latte::test::attention_backend(), tokens);
  const size_t V = static_cast<size_t>(c.n_vocab);
  const std::span<const float> a_head(a.data(), 16 * V), b_head(b.data(), 16 * V);
  // Positions 0..15 see at most 16 keys: the same attention (up to the summation order of expert
  // products, whose batch sizes differ when later tokens route differently).
  CHECK(latte::test::relative_error(a_head, b_head) <= 1e-6);
  const std::span<const float> a_tail(a.data() + 16 * V, 14 * V), b_tail(b.data() + 16 * V, 14 * V);
  CHECK(latte::test::relative_error(a_tail, b_tail) > 1e-4);
}
