// The fused products keep a documented column order: [query part | c, k_pe] for the first
// attention projection and [gate | up] for the SiLU FFNs. Checked against separate naive products.
#include "model/deepseek2.hpp"
#include "support/random_models.hpp"

#include <latte/attention.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>

namespace {

std::vector<double> values(const latte::TensorView& t) {
  REQUIRE(t.type == latte::GgmlType::f32);
  std::vector<float> f(static_cast<size_t>(t.ne[0] * t.n_rows()));
  std::memcpy(f.data(), t.data, f.size() * 4);
  return {f.begin(), f.end()};
}

/// x [T, in] times W^T for W a GGUF matrix {in, out} -> [T, out].
std::vector<double> naive(const std::vector<double>& w, const std::vector<float>& x, size_t in) {
  const size_t T = x.size() / in, out = w.size() / in;
  std::vector<double> y(T * out, 0.0);
  for (size_t t = 0; t < T; ++t) {
    for (size_t o = 0; o < out; ++o) {
      for (size_t i = 0; i < in; ++i) y[t * out + o] += w[o * in + i] * x[t * in + i];
    }
  }
  return y;
}

std::vector<float> random_rows(size_t n) {
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

double max_relative(const float* got, size_t stride, const std::vector<double>& want, size_t T, size_t width) {
  double worst = 0, norm = 0;
  for (double v : want) norm = std::max(norm, std::abs(v));
  for (size_t t = 0; t < T; ++t) {
    for (size_t j = 0; j < width; ++j) worst = std::max(worst, std::abs(got[t * stride + j] - want[t * width + j]));
  }
  return worst / norm;
}

}  // namespace

TEST_CASE("the fused attention input projection holds the query part first, then c|k_pe") {
  using latte::detail::AttentionInputPart;
  CHECK(latte::detail::kAttentionInputFusionOrder[0] == AttentionInputPart::query);
  CHECK(latte::detail::kAttentionInputFusionOrder[1] == AttentionInputPart::latent_and_rope);
  const latte::TaskRunner serial;
  for (const char* preset : {"test-v3", "test-v2-lite"}) {  // with and without q_lora
    CAPTURE(preset);
    const latte::Model m = latte::test::shared_random_model(preset);
    const latte::ModelConfig& c = m.config();
    const auto& layer = m.state().weights.layers[0];
    const auto layout = latte::detail::attention_input_layout(c);
    const size_t query_width =
        c.q_lora_rank > 0 ? static_cast<size_t>(c.q_lora_rank) : static_cast<size_t>(c.n_head * c.qk_head_dim());
    CHECK(layout.query_offset == 0);
    CHECK(layout.latent_offset == static_cast<int>(query_width));
    CHECK(layout.width == static_cast<int>(query_width) + c.kv_lora_rank + c.qk_rope_head_dim);

    constexpr size_t T = 3;
    const size_t H = static_cast<size_t>(c.n_embd);
    const auto x = random_rows(T * H);
    std::vector<float> out(T * static_cast<size_t>(layout.width));
    latte::detail::project_attention_input(serial, c, layer, x.data(), T, out.data());
    const auto query = naive(values(c.q_lora_rank > 0 ? layer.attn_q_a : layer.attn_q), x, H);
    const auto kv = naive(values(layer.attn_kv_a_mqa), x, H);
    CHECK(max_relative(out.data() + layout.query_offset, static_cast<size_t>(layout.width), query, T, query_width) <
          1e-5);
    CHECK(max_relative(out.data() + layout.latent_offset, static_cast<size_t>(layout.width), kv, T,
                       static_cast<size_t>(c.kv_lora_rank + c.qk_rope_head_dim)) < 1e-5);
  }
}

TEST_CASE("the fused SiLU FFN runs gate rows first, then up rows") {
  using latte::detail::GateUpPart;
  CHECK(latte::detail::kGateUpFusionOrder[0] == GateUpPart::gate);
  CHECK(latte::detail::kGateUpFusionOrder[1] == GateUpPart::up);
  const latte::Model m = latte::test::shared_random_model("test-v2-lite");
  const auto& layer = m.state().weights.layers[0];  // the dense lead block
  const size_t H = static_cast<size_t>(m.config().n_embd), F = static_cast<size_t>(m.config().n_ff);
  constexpr size_t T = 2;
  const auto x = random_rows(T * H);
  std::vector<float> out(T * H, 0.0f), hidden;
  latte::detail::gated_ffn({}, layer.ffn_gate, layer.ffn_up, layer.ffn_down, x.data(), T, static_cast<int>(H),
                           out.data(), static_cast<int>(H), hidden);
  const auto gate = naive(values(layer.ffn_gate), x, H), up = naive(values(layer.ffn_up), x, H);
  std::vector<float> h(T * F);
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<float>(gate[i] / (1.0 + std::exp(-gate[i])) * up[i]);
  const auto expected = naive(values(layer.ffn_down), h, F);
  CHECK(max_relative(out.data(), H, expected, T, H) < 1e-5);
}
