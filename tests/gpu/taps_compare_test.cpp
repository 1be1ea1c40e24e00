// CPU against CUDA, tap by tap: the CUDA pass emits the CPU pass's taps (same names, shapes, order),
// and on test-v3 and test-glm-dsa random models the first tap beyond the bf16 bound is either none or
// downstream of a MoE routing flip. A flip is discrete: where two experts' scores are closer than the
// bf16 noise, CPU and CUDA pick different experts and everything after differs by O(1); that is not a
// kernel error. The same holds for glm-dsa's sparse selection (index_selection): a position whose
// index score ties the top_k-th within bf16 noise is swapped, so a divergence downstream of a
// selection that differs in a few positions per row is a selection flip. Any other first divergence
// is an error. Each case prints its verdict and the first divergence.
#include "model/presets.hpp"
#include "model/random_model.hpp"
#include "support/random_models.hpp"

#include <latte/diagnostics.hpp>
#include <latte/error.hpp>
#include <latte/gguf.hpp>
#include <latte/model.hpp>
#include <latte/session.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace diag = latte::diagnostics;

struct TapModels {
  latte::Model cpu;
  latte::Model gpu;
};

TapModels& tap_models(const std::string& preset) {
  static std::map<std::string, std::unique_ptr<TapModels>> cache;
  auto it = cache.find(preset);
  if (it == cache.end()) {
    const auto bytes = latte::random_model_bytes(latte::model_preset(preset), {.seed = 23});
    latte::Model cpu = latte::Model::from_file(latte::gguf::File::from_bytes(bytes, preset + ".gguf"));
    latte::Model gpu = latte::Model::from_file(latte::gguf::File::from_bytes(bytes, preset + ".gguf"),
                                               {.device = latte::Device::cuda(0)});
    it = cache.emplace(preset, std::make_unique<TapModels>(TapModels{cpu, gpu})).first;
  }
  return *it->second;
}

/// The taps of a prompt evaluated in one call, then (`decode` true) only those of one more token
/// evaluated after it, so the decode kernels are compared too.
std::vector<diag::TapRecord> taps_of(const latte::Model& model, const std::string& backend,
                                     std::span<const latte::Token> prompt, std::optional<latte::Token> decode) {
  latte::Session s(model, {.n_ctx = 512, .attention = backend, .logits_all = true});
  diag::TapRecorder rec;
  s.set_tap_observer(rec.observer());
  s.eval(prompt);
  if (decode) {
    rec.clear();
    s.eval(std::span(&*decode, 1));
  }
  return rec.taps();
}

bool ends_with(std::string_view name, std::string_view suffix) {
  return name.size() >= suffix.size() && name.substr(name.size() - suffix.size()) == suffix;
}

/// The most positions that one row of index_selection tap `a` ([T, top_k], -1 padded) selects and the
/// same row of `b` does not.
int most_swapped(const diag::TapRecord& a, const diag::TapRecord& b) {
  REQUIRE(a.shape == b.shape);
  REQUIRE(a.shape.size() == 2);
  const auto width = static_cast<size_t>(a.shape[1]);
  int most = 0;
  for (size_t row = 0; row * width < a.data.size(); ++row) {
    const std::set<float> chosen(b.data.begin() + static_cast<std::ptrdiff_t>(row * width),
                                 b.data.begin() + static_cast<std::ptrdiff_t>((row + 1) * width));
    int only_a = 0;
    for (size_t j = 0; j < width; ++j) {
      const float pos = a.data[row * width + j];
      only_a += pos >= 0 && chosen.count(pos) == 0 ? 1 : 0;
    }
    most = std::max(most, only_a);
  }
  return most;
}

/// The relative error of attention-output tap `heads_a` against `heads_b` ([T, ...]) over the rows
/// whose index selections (`sel_a`, `sel_b`, [T, top_k]) are identical; 0 when there are none.
double same_selection_error(const diag::TapRecord& sel_a, const diag::TapRecord& sel_b, const diag::TapRecord& heads_a,
                            const diag::TapRecord& heads_b) {
  REQUIRE(heads_a.shape == heads_b.shape);
  REQUIRE(heads_a.shape.front() == sel_a.shape.front());
  const auto rows = static_cast<size_t>(sel_a.shape.front());
  const size_t sel_width = sel_a.data.size() / rows, width = heads_a.data.size() / rows;
  double diff2 = 0, ref2 = 0;
  for (size_t r = 0; r < rows; ++r) {
    if (!std::equal(sel_a.data.begin() + static_cast<std::ptrdiff_t>(r * sel_width),
                    sel_a.data.begin() + static_cast<std::ptrdiff_t>((r + 1) * sel_width),
                    sel_b.data.begin() + static_cast<std::ptrdiff_t>(r * sel_width))) {
      continue;
    }
    for (size_t j = r * width; j < (r + 1) * width; ++j) {
      const double d = static_cast<double>(heads_a.data[j]) - heads_b.data[j];
      diff2 += d * d;
      ref2 += static_cast<double>(heads_b.data[j]) * heads_b.data[j];
    }
  }
  return ref2 > 0 ? std::sqrt(diff2 / ref2) : (diff2 > 0 ? INFINITY : 0.0);
}

const diag::TapRecord* find_tap(const std::vector<diag::TapRecord>& taps, std::string_view name) {
  const auto it = std::find_if(taps.begin(), taps.end(), [&](const diag::TapRecord& x) { return x.name == name; });
  return it == taps.end() ? nullptr : &*it;
}

struct Verdict {
  bool agree = true;          ///< every tap within the bound
  bool routing_flip = false;  ///< the first divergence is at or after an expert or indexer choice that differs
  std::string text;
};

/// Classifies a comparison: a divergence at or downstream of an expert_ids tap with any differing
/// entry (even one flip among many, below the bound) is a routing flip; likewise downstream of an
/// index_selection tap (glm-dsa): the indexer's top_k is discrete, and index scores that differ by
/// bf16 rounding swap a position at the boundary, which moves that row's attention output by a
/// fraction of order 1/sqrt(top_k). Only a few swaps per row count as such a flip (a wrong indexer
/// changes most of a row's selection), and the block's attn_heads must still agree within the bound
/// on the rows whose selections are identical (a wrong sparse attention kernel fails there).
Verdict classify(const diag::ComparisonReport& r, const std::vector<diag::TapRecord>& a,
                 const std::vector<diag::TapRecord>& b) {
  Verdict v;
  v.text = r.summary();
  if (!r.first_divergence) return v;
  v.agree = false;
  for (size_t i = 0; i <= *r.first_divergence; ++i) {
    const diag::TapComparison& t = r.taps[i];
    const bool experts = ends_with(t.name, ".expert_ids");
    const bool selection = ends_with(t.name, ".index_selection");
    if (!(experts || selection) || t.rel_error == 0 || !t.note.empty()) continue;
    if (selection) {
      const diag::TapRecord* other = find_tap(b, t.name);
      REQUIRE(other != nullptr);
      const int swapped = most_swapped(a[i], *other);
      const int allowed = std::max<int>(1, static_cast<int>(a[i].shape.back()) / 4);
      v.text += " -- " + t.name + ": at most " + std::to_string(swapped) + " positions of a row differ";
      if (swapped > allowed) break;  // not a near-tie: a real divergence
      const std::string heads =
          t.name.substr(0, t.name.size() - std::string_view("index_selection").size()) + "attn_heads";
      const diag::TapRecord* heads_a = find_tap(a, heads);
      const diag::TapRecord* heads_b = find_tap(b, heads);
      REQUIRE(heads_a != nullptr);
      REQUIRE(heads_b != nullptr);
      const double same = same_selection_error(a[i], *other, *heads_a, *heads_b);
      v.text += "; " + heads + " rel err " + std::to_string(same) + " on the rows with the same selection";
      if (same > r.bound) break;  // the attention itself differs
    }
    v.routing_flip = true;
    v.text += std::string(experts ? " -- routing flip at " : " -- sparse selection flip at ") + t.name + " (" +
              std::to_string(t.rel_error) + " of the choices differ)";
    break;
  }
  return v;
}

}  // namespace

TEST_CASE("CUDA taps have the CPU taps' names, shapes and order") {
  TapModels& m = tap_models("test-v3");
  uint64_t seed = 0;
  const auto tokens = latte::test::fresh_tokens(6, m.cpu.config().n_vocab, &seed);
  CAPTURE(seed);
  for (const std::string backend : {"mla", "standard"}) {
    CAPTURE(backend);
    const auto cpu = taps_of(m.cpu, "mla", tokens, std::nullopt);
    const auto gpu = taps_of(m.gpu, backend, tokens, std::nullopt);
    REQUIRE(gpu.size() == cpu.size());
    for (size_t i = 0; i < cpu.size(); ++i) {
      CAPTURE(cpu[i].name);
      CHECK(gpu[i].name == cpu[i].name);
      CHECK(gpu[i].layer == cpu[i].layer);
      CHECK(gpu[i].shape == cpu[i].shape);
      CHECK(gpu[i].data.size() == cpu[i].data.size());
    }
    // A filtered observer gets only what it asks for.
    latte::Session s(m.gpu, {.n_ctx = 64, .attention = backend, .logits_all = true});
    std::vector<std::string> seen;
    s.set_tap_observer({.wants = [](std::string_view n) { return n == "blk.1.attn_heads" || n == "logits"; },
                        .on_tap = [&](const latte::Tap& t) { seen.emplace_back(t.name); }});
    s.eval(tokens);
    CHECK(seen == std::vector<std::string>{"blk.1.attn_heads", "logits"});
  }
}

TEST_CASE("CUDA logits are the same with and without a tap observer") {
  TapModels& m = tap_models("test-v3");
  uint64_t seed = 0;
  const auto tokens = latte::test::fresh_tokens(9, m.cpu.config().n_vocab, &seed);
  CAPTURE(seed);
  for (const std::string backend : {"mla", "standard"}) {
    CAPTURE(backend);
    auto run = [&](bool observe) {
      latte::Session s(m.gpu, {.n_ctx = 64, .attention = backend, .logits_all = true});
      diag::TapRecorder rec;
      if (observe) s.set_tap_observer(rec.observer());
      std::vector<float> out;
      s.eval(std::span(tokens.data(), 6));
      for (size_t i = 6; i < tokens.size(); ++i) {  // decode steps: graphs without an observer
        s.eval(std::span(&tokens[i], 1));
        const auto l = s.logits();
        out.insert(out.end(), l.begin(), l.end());
      }
      return out;
    };
    const auto plain = run(false);
    const auto observed = run(true);
    REQUIRE(plain.size() == observed.size());
    CHECK(plain == observed);
  }
}

TEST_CASE("CPU vs CUDA taps: the first divergence beyond the bf16 bound is none or a routing flip") {
  struct Case {
    const char* preset;
    int prompt;
  };
  // test-v3: 40 prompt tokens take the flash-attention prefill path; test-glm-dsa: beyond top_k, so
  // the indexer's sparse selection is in play.
  for (const Case c : {Case{"test-v3", 40}, Case{"test-glm-dsa", 0}}) {
    TapModels& m = tap_models(c.preset);
    const latte::ModelConfig& config = m.cpu.config();
    const int n_prompt = c.prompt > 0 ? c.prompt : 3 * config.indexer.top_k;
    uint64_t seed = 0;
    const auto tokens = latte::test::fresh_tokens(n_prompt + 1, config.n_vocab, &seed);
    const std::span<const latte::Token> prompt(tokens.data(), static_cast<size_t>(n_prompt));
    for (const bool decode : {false, true}) {
      const std::optional<latte::Token> next = decode ? std::optional(tokens.back()) : std::nullopt;
      const auto reference = taps_of(m.cpu, "mla", prompt, next);
      for (const std::string backend : {"mla", "standard"}) {
        CAPTURE(c.preset);
        CAPTURE(backend);
        CAPTURE(decode);
        CAPTURE(seed);
        const auto gpu = taps_of(m.gpu, backend, prompt, next);
        const diag::ComparisonReport report = diag::compare_taps(gpu, reference, diag::kBf16Bound);
        const Verdict v = classify(report, gpu, reference);
        std::printf("taps cpu:mla vs cuda:%-8s %-12s %-7s %s\n", backend.c_str(), c.preset,
                    decode ? "decode" : "prefill", v.text.c_str());
        if (!v.agree && !v.routing_flip) {
          for (const diag::TapComparison& t : report.taps) {
            std::printf("  %-28s rel err %-10.3g cos %.6f %s\n", t.name.c_str(), t.rel_error, t.cosine, t.note.c_str());
          }
        }
        CHECK(report.taps.size() == reference.size());
        CHECK_MESSAGE((v.agree || v.routing_flip), v.text);
      }
    }
  }
}
