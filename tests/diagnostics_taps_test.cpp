// Activation taps: observing changes nothing, every documented tap comes out in order with its
// shape, the taps are consistent with each other and with the logits, a wrong attention backend is
// named at exactly the tap it corrupts, and dumps round-trip through the .npy format.
#include "support/random_models.hpp"
#include "support/temp_dir.hpp"

#include <latte/attention.hpp>
#include <latte/diagnostics.hpp>
#include <latte/error.hpp>
#include <latte/session.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace diag = latte::diagnostics;

namespace {

std::vector<float> logits_of(const latte::Model& model, std::span<const latte::Token> tokens,
                             const latte::TapObserver* observer) {
  latte::Session s(model, {.n_ctx = 64, .attention = "mla", .logits_all = true, .n_threads = 2});
  if (observer) s.set_tap_observer(*observer);
  s.eval(tokens);
  std::vector<float> out;
  for (int i = 0; i < static_cast<int>(tokens.size()); ++i) {
    const auto row = s.logits(i);
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

const diag::TapRecord& find_tap(const std::vector<diag::TapRecord>& taps, const std::string& name) {
  for (const auto& t : taps) {
    if (t.name == name) return t;
  }
  FAIL("no tap " << name);
  throw std::logic_error("unreachable");
}

/// mla with the output of one layer perturbed: a fault the comparison must localise.
class PerturbedBackend : public latte::AttentionBackend {
 public:
  PerturbedBackend(std::unique_ptr<latte::AttentionBackend> inner, int layer, size_t row_width)
      : inner_(std::move(inner)), layer_(layer), row_width_(row_width) {}
  std::string_view name() const noexcept override { return "test-perturbed"; }
  latte::KvLayout kv_layout() const override { return inner_->kv_layout(); }
  void prepare(std::span<const latte::AttentionLayerWeights> layers) override { inner_->prepare(layers); }
  void forward(const latte::AttentionInput& input) override {
    inner_->forward(input);
    if (input.layer != layer_) return;
    // One head of the last row is replaced by its negation: small in norm, unmistakable per tap.
    for (size_t i = 0; i < row_width_ / 4; ++i)
      input.out[(static_cast<size_t>(input.n_rows) - 1) * row_width_ + i] *= -1;
  }

 private:
  std::unique_ptr<latte::AttentionBackend> inner_;
  int layer_;
  size_t row_width_;
};

}  // namespace

TEST_CASE("observing the taps leaves the logits bitwise unchanged") {
  for (std::string_view flavour : {"test-v3", "test-glm-dsa"}) {
    CAPTURE(flavour);
    const latte::Model model = latte::test::shared_random_model(flavour);
    const auto tokens = latte::test::fresh_tokens(9, model.config().n_vocab);
    diag::TapRecorder rec;
    const latte::TapObserver observer = rec.observer();
    const auto plain = logits_of(model, tokens, nullptr);
    const auto observed = logits_of(model, tokens, &observer);
    REQUIRE(plain.size() == observed.size());
    CHECK(std::memcmp(plain.data(), observed.data(), plain.size() * sizeof(float)) == 0);
    CHECK(rec.taps().size() > 10);
  }
}

TEST_CASE("every documented tap is emitted in forward order with its shape") {
  const latte::Model model = latte::test::shared_random_model("test-v3");
  const latte::ModelConfig& c = model.config();
  const auto tokens = latte::test::fresh_tokens(5, c.n_vocab);
  const int64_t T = 5;
  const auto taps =
      diag::record_taps(model, {.n_ctx = 16, .attention = "mla", .logits_all = false, .n_threads = 1}, tokens);
  std::vector<std::pair<std::string, std::vector<int64_t>>> expected{{"token_embd", {T, c.n_embd}}};
  for (int il = 0; il < c.n_layer_main(); ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    const std::vector<std::pair<std::string, std::vector<int64_t>>> attn{
        {b + "attn_norm", {T, c.n_embd}},       {b + "q", {T, c.n_head, c.qk_head_dim()}},
        {b + "kv_latent", {T, c.kv_lora_rank}}, {b + "q_pe", {T, c.n_head, c.qk_rope_head_dim}},
        {b + "k_pe", {T, c.qk_rope_head_dim}},  {b + "attn_heads", {T, c.n_head, c.v_head_dim}},
        {b + "attn_out", {T, c.n_embd}},        {b + "ffn_norm", {T, c.n_embd}}};
    expected.insert(expected.end(), attn.begin(), attn.end());
    if (c.is_moe_layer(il)) {
      expected.push_back({b + "router_logits", {T, c.n_expert}});
      expected.push_back({b + "expert_ids", {T, c.n_expert_used}});
      expected.push_back({b + "expert_weights", {T, c.n_expert_used}});
    }
    expected.push_back({b + "ffn_out", {T, c.n_embd}});
    expected.push_back({b + "residual", {T, c.n_embd}});
  }
  expected.push_back({"output_norm", {T, c.n_embd}});
  expected.push_back({"logits", {T, c.n_vocab}});
  REQUIRE(taps.size() == expected.size());
  for (size_t i = 0; i < taps.size(); ++i) {
    CAPTURE(i);
    CHECK(taps[i].name == expected[i].first);
    CHECK(taps[i].shape == expected[i].second);
    CHECK(taps[i].data.size() == static_cast<size_t>(std::accumulate(taps[i].shape.begin(), taps[i].shape.end(),
                                                                     int64_t{1}, std::multiplies<>())));
  }
}

TEST_CASE("the taps are consistent with the residual stream and the logits") {
  const latte::Model model = latte::test::shared_random_model("test-v3");
  const latte::ModelConfig& c = model.config();
  const auto tokens = latte::test::fresh_tokens(7, c.n_vocab);
  latte::Session s(model, {.n_ctx = 16, .attention = "mla", .logits_all = false, .n_threads = 1});
  diag::TapRecorder rec;
  s.set_tap_observer(rec.observer());
  s.eval(tokens);
  const auto& taps = rec.taps();
  // residual_l = residual_{l-1} + attn_out_l + ffn_out_l (fp32 rounding of two additions).
  std::vector<float> x = find_tap(taps, "token_embd").data;
  for (int il = 0; il < c.n_layer_main(); ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    const auto& a = find_tap(taps, b + "attn_out").data;
    const auto& f = find_tap(taps, b + "ffn_out").data;
    std::vector<float> sum(x.size());
    for (size_t i = 0; i < x.size(); ++i) sum[i] = x[i] + a[i] + f[i];
    x = find_tap(taps, b + "residual").data;
    CHECK(latte::test::relative_error(sum, x) < 1e-6);
    // RoPE rotates pairs (2i, 2i+1): q_pe's pair norms are those of the rope part of q.
    const auto& q = find_tap(taps, b + "q").data;
    const auto& q_pe = find_tap(taps, b + "q_pe").data;
    const int qk = c.qk_head_dim(), R = c.qk_rope_head_dim;
    double worst = 0;
    for (size_t row = 0; row < q_pe.size() / static_cast<size_t>(R); ++row) {
      for (int i = 0; i < R; i += 2) {
        const float* before = q.data() + row * static_cast<size_t>(qk) + c.qk_nope_head_dim + i;
        const float* after = q_pe.data() + row * static_cast<size_t>(R) + i;
        const double n0 = std::hypot(before[0], before[1]), n1 = std::hypot(after[0], after[1]);
        worst = std::max(worst, std::abs(n0 - n1) / std::max(n0, 1e-6));
      }
    }
    CHECK(worst < 1e-5);
    // MoE: the chosen experts are the top by router logit only up to bias/groups; at least check ids.
    if (c.is_moe_layer(il)) {
      const auto& ids = find_tap(taps, b + "expert_ids").data;
      for (size_t r = 0; r < ids.size(); r += static_cast<size_t>(c.n_expert_used)) {
        for (int k = 0; k < c.n_expert_used; ++k) {
          CHECK(ids[r + k] >= 0);
          CHECK(ids[r + k] < c.n_expert);
          if (k > 0) CHECK(ids[r + k] > ids[r + k - 1]);
        }
      }
    }
  }
  // Without logits_all only the last row is computed: output_norm and logits have one row, and the
  // logits tap is exactly what the session returns.
  CHECK(find_tap(taps, "output_norm").shape == std::vector<int64_t>{1, c.n_embd});
  const auto& logits = find_tap(taps, "logits").data;
  const auto session_logits = s.logits();
  REQUIRE(logits.size() == session_logits.size());
  CHECK(std::memcmp(logits.data(), session_logits.data(), logits.size() * sizeof(float)) == 0);
}

TEST_CASE("a wrong attention backend is named at exactly the tap it corrupts") {
  const latte::Model model = latte::test::shared_random_model("test-v3");
  const latte::ModelConfig& c = model.config();
  const auto tokens = latte::test::fresh_tokens(6, c.n_vocab);
  const latte::SessionParams base{.n_ctx = 16, .attention = "mla", .logits_all = true, .n_threads = 1};
  const auto mla = diag::record_taps(model, base, tokens);

  latte::SessionParams standard = base;
  standard.attention = "standard";
  const auto agree = diag::compare_taps(diag::record_taps(model, standard, tokens), mla, diag::kFp32Bound);
  CHECK_MESSAGE(!agree.first_divergence, agree.summary());
  CHECK(agree.summary().starts_with("all "));

  for (int layer = 0; layer < c.n_layer_main(); ++layer) {
    CAPTURE(layer);
    latte::AttentionRegistry::instance().add(
        {.name = "test-perturbed",
         .description = "mla with one layer's output perturbed",
         .supports = [](const latte::ModelConfig&, latte::Device d) { return d.is_cpu(); },
         .create = [layer](const latte::ModelConfig& cfg, latte::Device d) -> std::unique_ptr<latte::AttentionBackend> {
           return std::make_unique<PerturbedBackend>(latte::AttentionRegistry::instance().create("mla", cfg, d), layer,
                                                     static_cast<size_t>(cfg.n_head) * cfg.v_head_dim);
         }});
    latte::SessionParams wrong = base;
    wrong.attention = "test-perturbed";
    const auto bad = diag::record_taps(model, wrong, tokens);
    latte::AttentionRegistry::instance().remove("test-perturbed");
    const auto report = diag::compare_taps(bad, mla, diag::kFp32Bound);
    REQUIRE(report.first_divergence);
    const std::string expected = "blk." + std::to_string(layer) + ".attn_heads";
    CHECK(report.taps[*report.first_divergence].name == expected);
    CHECK(report.summary().starts_with("first divergence: " + expected + ", rel err "));
    CHECK(report.summary().ends_with("upstream taps agree"));
    for (size_t i = 0; i < *report.first_divergence; ++i) CHECK(report.taps[i].rel_error == 0.0);
  }
}

TEST_CASE("glm-dsa steps with sparse attention emit each block's index selection, compared as choices") {
  const latte::Model model = latte::test::shared_random_model("test-glm-dsa");
  const latte::ModelConfig& c = model.config();
  const int top_k = c.indexer.top_k;
  const latte::SessionParams params{.n_ctx = 64, .attention = "mla", .logits_all = false, .n_threads = 2};
  auto selections = [](const std::vector<diag::TapRecord>& taps) {
    std::vector<const diag::TapRecord*> out;
    for (const diag::TapRecord& t : taps) {
      if (t.name.ends_with(".index_selection")) out.push_back(&t);
    }
    return out;
  };

  // Every query sees at most top_k positions: dense attention, no selection.
  CHECK(selections(diag::record_taps(model, params, latte::test::fresh_tokens(top_k - 2, c.n_vocab))).empty());

  const int T = top_k + 9;
  const auto taps = diag::record_taps(model, params, latte::test::fresh_tokens(T, c.n_vocab));
  const auto sel = selections(taps);
  REQUIRE(sel.size() == static_cast<size_t>(c.n_layer_main()));
  for (int il = 0; il < c.n_layer_main(); ++il) {
    CAPTURE(il);
    const diag::TapRecord& t = *sel[static_cast<size_t>(il)];
    const std::string b = "blk." + std::to_string(il) + ".";
    CHECK(t.name == b + "index_selection");
    CHECK(t.layer == il);
    REQUIRE(t.shape == std::vector<int64_t>{T, top_k});
    // Between k_pe and attn_heads, where the selection is made and used.
    const auto at = static_cast<size_t>(&t - taps.data());
    REQUIRE(at > 0);
    REQUIRE(at + 1 < taps.size());
    CHECK(taps[at - 1].name == b + "k_pe");
    CHECK(taps[at + 1].name == b + "attn_heads");
    for (int r = 0; r < T; ++r) {
      CAPTURE(r);
      const float* row = t.data.data() + static_cast<size_t>(r) * top_k;
      const int n = std::min(top_k, r + 1);  // row r (position r) sees positions 0 .. r
      for (int j = 0; j < top_k; ++j) {
        if (j >= n) {
          CHECK(row[j] == -1.0f);
          continue;
        }
        CHECK(row[j] >= 0.0f);
        CHECK(row[j] <= static_cast<float>(r));
        CHECK(row[j] == std::floor(row[j]));
        if (j > 0) CHECK(row[j] > row[j - 1]);
        if (r < top_k) CHECK(row[j] == static_cast<float>(j));
      }
    }
  }

  // A differing choice counts as such: the fraction of differing entries, not a norm.
  std::vector<diag::TapRecord> changed(taps);
  diag::TapRecord& last = changed[static_cast<size_t>(sel.back() - taps.data())];
  float& entry = last.data[static_cast<size_t>(T - 1) * top_k];
  entry = entry == 0.0f ? 1.0f : 0.0f;
  const auto report = diag::compare_taps(changed, taps, diag::kFp32Bound);
  REQUIRE(report.first_divergence);
  const diag::TapComparison& flip = report.taps[*report.first_divergence];
  CHECK(flip.name == last.name);
  CHECK(flip.rel_error == doctest::Approx(1.0 / static_cast<double>(last.data.size())));
}

TEST_CASE("tap dumps round-trip through .npy files that numpy can read") {
  latte::test::TempDir dir;
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal;
  std::vector<diag::TapRecord> taps{{.name = "blk.0.q", .layer = 0, .shape = {2, 3, 5}, .data = {}},
                                    {.name = "logits", .layer = -1, .shape = {7}, .data = {}}};
  for (auto& t : taps) {
    t.data.resize(
        static_cast<size_t>(std::accumulate(t.shape.begin(), t.shape.end(), int64_t{1}, std::multiplies<>())));
    for (float& v : t.data) v = normal(rng);
  }
  const std::vector<latte::Token> tokens{3, 1, 4};
  diag::write_tap_dump(dir.path(), taps, tokens);
  std::vector<latte::Token> read_tokens;
  const auto back = diag::read_tap_dump(dir.path(), &read_tokens);
  CHECK(read_tokens == tokens);
  REQUIRE(back.size() == taps.size());
  for (size_t i = 0; i < taps.size(); ++i) {
    CHECK(back[i].name == taps[i].name);
    CHECK(back[i].layer == taps[i].layer);
    CHECK(back[i].shape == taps[i].shape);
    CHECK(back[i].data == taps[i].data);
  }
  CHECK(diag::tap_dump_bound(dir.path()) == diag::kFp32Bound);

  // The exact bytes numpy.save writes for these shapes: magic, version 1.0, header length, the
  // dict padded to a 64-byte boundary, then little-endian float32 in C order.
  const std::string bytes = latte::test::read_text_file(dir.file("logits.npy"));
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (7,), }";
  REQUIRE(bytes.size() == 128 + 7 * 4);
  CHECK(bytes.substr(0, 8) == std::string("\x93NUMPY\x01\x00", 8));
  CHECK(static_cast<unsigned char>(bytes[8]) == 118);
  CHECK(bytes[9] == 0);
  CHECK(bytes.substr(10, dict.size()) == dict);
  CHECK(bytes[127] == '\n');
  float first = 0;
  std::memcpy(&first, bytes.data() + 128, 4);
  CHECK(first == taps[1].data[0]);
  const std::string bytes3 = latte::test::read_text_file(dir.file("blk.0.q.npy"));
  CHECK(bytes3.find("'shape': (2, 3, 5), }") != std::string::npos);
}

TEST_CASE("malformed .npy files and dumps give errors naming the file") {
  latte::test::TempDir dir;
  const std::vector<int64_t> shape{4};
  const std::vector<float> values{1, 2, 3, 4};
  diag::write_npy(dir.file("a.npy"), shape, values);
  const std::string bytes = latte::test::read_text_file(dir.file("a.npy"));
  auto error_of = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const latte::Error& e) {
      return e.what();
    }
    return "no error";
  };
  latte::test::write_text_file(dir.file("short.npy"), bytes.substr(0, bytes.size() - 3));
  CHECK(error_of([&] { (void)diag::read_npy(dir.file("short.npy")); }).find("short.npy: truncated data") !=
        std::string::npos);
  std::string i4 = bytes;
  i4.replace(i4.find("<f4"), 3, "<i4");
  latte::test::write_text_file(dir.file("int.npy"), i4);
  CHECK(error_of([&] { (void)diag::read_npy(dir.file("int.npy")); }).find("dtype '<i4'") != std::string::npos);
  std::string huge = bytes;
  huge.replace(huge.find("(4,)"), 4, "(9999999999,)");  // same header length: the padding shrinks
  huge.erase(huge.find('\n', 10) - 9, 9);
  latte::test::write_text_file(dir.file("huge.npy"), huge);
  CHECK(error_of([&] { (void)diag::read_npy(dir.file("huge.npy")); }).find("holds more than") != std::string::npos);
  // dimensions whose product passes 2^63 before the bound is reached (4294967295 x 999999999999)
  diag::write_npy(dir.file("ten.npy"), std::vector<int64_t>(10, 1), std::vector<float>{1});
  std::string wrap = latte::test::read_text_file(dir.file("ten.npy"));
  const std::string ones = "(1, 1, 1, 1, 1, 1, 1, 1, 1, 1)", wide = "(4294967295, 999999999999, 1)";
  REQUIRE(wrap.find(ones) != std::string::npos);
  wrap.replace(wrap.find(ones), ones.size(), wide);
  wrap.insert(wrap.find('\n', 10), std::string(ones.size() - wide.size(), ' '));  // the same header length
  latte::test::write_text_file(dir.file("wrap.npy"), wrap);
  CHECK(error_of([&] { (void)diag::read_npy(dir.file("wrap.npy")); }).find("holds more than") != std::string::npos);
  latte::test::write_text_file(dir.file("text.npy"), "hello world");
  CHECK(error_of([&] { (void)diag::read_npy(dir.file("text.npy")); }).find("not a .npy file") != std::string::npos);
  CHECK(error_of([&] { (void)diag::read_tap_dump(dir.file("nowhere")); }).find("index.json") != std::string::npos);
  CHECK(error_of([&] { diag::write_npy(dir.file("b.npy"), std::vector<int64_t>{3}, values); }).find("shape holds 3") !=
        std::string::npos);
}

TEST_CASE("the self-test says clearly when it cannot run") {
  const diag::SelftestResult cpu = diag::run_selftest(latte::Device::cpu());
  CHECK(!cpu.ran);
  CHECK(cpu.reason.find("GPU") != std::string::npos);
  if (latte::Device::cuda_device_count() == 0) {
    const diag::SelftestResult none = diag::run_selftest(latte::Device::cuda(0));
    CHECK(!none.ran);
    CHECK(!none.reason.empty());
    diag::ensure_selftest(latte::Device::cuda(0));  // nothing to verify: returns quietly
  }
}
