// CPU against CUDA, tap by tap: the CUDA pass emits the CPU pass's taps (same names, shapes, order),
// and on test-v3 and test-glm-dsa random models every tap agrees within the bf16 bound once the CUDA
// run's discrete decisions are replayed on the CPU. A MoE router's top-k and glm-dsa's indexer top-k
// are discrete: where two scores are closer than the bf16 noise, CPU and CUDA may choose differently
// and everything downstream differs by O(1). So the CPU reference runs with CUDA's expert_ids and
// index_selection forced (tests/support/decision_replay.hpp), each forced choice that differs from the
// CPU's own must be a near-tie of the CPU's scores (model/forced_decisions.hpp), and then no tap may
// diverge. Each case prints its verdict and how many decisions flipped.
#include "forced_comparison.hpp"

#include "model/presets.hpp"
#include "model/random_model.hpp"
#include "support/random_models.hpp"

#include <latte/diagnostics.hpp>
#include <latte/error.hpp>
#include <latte/gguf.hpp>
#include <latte/model.hpp>
#include <latte/session.hpp>

#include <doctest/doctest.h>

#include <cstdlib>

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
    // observe: 0 none, 1 every tap, 2 only the taps the fused step emits (residual, expert choices)
    auto run = [&](int observe) {
      latte::Session s(m.gpu, {.n_ctx = 512, .attention = backend, .logits_all = true});  // as run_recording
      diag::TapRecorder rec;
      if (observe == 1) s.set_tap_observer(rec.observer());
      int residuals = 0;
      if (observe == 2) {
        s.set_tap_observer({.wants = [](std::string_view name) { return name.ends_with(".residual"); },
                            .on_tap = [&](const latte::Tap&) { ++residuals; }});
      }
      std::vector<float> out;
      s.eval(std::span(tokens.data(), 6));
      for (size_t i = 6; i < tokens.size(); ++i) {  // decode steps: graphs without an observer
        s.eval(std::span(&tokens[i], 1));
        const auto l = s.logits();
        out.insert(out.end(), l.begin(), l.end());
      }
      if (observe == 2) CHECK(residuals == 4 * m.cpu.config().n_layer_main());  // 4 steps, every block
      return out;
    };
    const auto plain = run(0);
    const auto observed = run(1);
    REQUIRE(plain.size() == observed.size());
    CHECK(plain == observed);
    // The fused decode step (where it runs: mla) agrees with the layered path to its precision, and an
    // observer of the taps it emits changes nothing in it.
    ::setenv("LATTE_FUSED_DECODE", "1", 1);
    const auto fused = run(0);
    const auto fused_observed = run(2);
    // the same steps again, each path's expert choices recorded (taps the fused step emits)
    const std::span<const latte::Token> prompt(tokens.data(), 6), decode(tokens.data() + 6, tokens.size() - 6);
    auto fused_run = latte::test::gpu::run_recording(m.gpu, backend, prompt, decode);
    ::unsetenv("LATTE_FUSED_DECODE");
    auto layered_run = latte::test::gpu::run_recording(m.gpu, backend, prompt, decode);
    REQUIRE(fused.size() == plain.size());
    CHECK(fused == fused_observed);
    const double fused_error = latte::test::relative_error(fused, plain);
    CAPTURE(fused_error);
    const int flip = layered_run.decisions->first_difference(*fused_run.decisions);
    if (flip < 0) {
      CHECK(fused_error < 5e-3);  // the layered mla decode rounds q_lat to bf16 for the tensor cores
    } else {
      // A router near-tie the two paths' roundings settle differently (the logits after it differ by O(1)):
      // then each path must agree with the CPU reference run with its own choices, each a near-tie of the
      // CPU's scores.
      std::printf(
          "fused vs layered %s: expert choices differ from position %d (logits error %.3g): each checked "
          "against the CPU with its choices replayed\n",
          backend.c_str(), flip, fused_error);
      const latte::ModelConfig& config = m.cpu.config();
      const int positions = static_cast<int>(tokens.size());
      for (auto* r : {&layered_run, &fused_run}) {
        const auto reference = latte::test::gpu::forced_reference(m.cpu, prompt, decode, *r);
        CHECK(latte::test::gpu::check_forced(*r, reference, r == &fused_run ? "fused" : "layered", config, positions,
                                             2e-2));
      }
    }
  }
}

TEST_CASE("CPU vs CUDA taps: with CUDA's decisions replayed on the CPU, every tap agrees within the bf16 bound") {
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
      for (const std::string backend : {"mla", "standard"}) {
        CAPTURE(c.preset);
        CAPTURE(backend);
        CAPTURE(decode);
        CAPTURE(seed);
        // CUDA: the prompt in one eval, then (decode) one more token; the taps of the last step only,
        // the decisions of both.
        diag::TapRecorder gpu_taps;
        latte::test::DecisionRecorder decisions(gpu_taps.observer());
        {
          latte::Session s(m.gpu, {.n_ctx = 512, .attention = backend, .logits_all = true});
          s.set_tap_observer(decisions.observer());
          s.eval(prompt);
          if (decode) {
            gpu_taps.clear();
            s.eval(std::span(&tokens.back(), 1));
          }
        }
        // CPU: the same steps with those decisions forced.
        latte::detail::ForcedDecisions& forced = decisions.decisions();
        diag::TapRecorder cpu_taps;
        const latte::TapObserver cpu_observer = cpu_taps.observer();
        latte::test::CpuStepRun cpu(m.cpu, "mla", 512);
        (void)cpu.eval(prompt, &forced, decode ? nullptr : &cpu_observer);
        if (decode) (void)cpu.eval(std::span(&tokens.back(), 1), &forced, &cpu_observer);

        const std::vector<diag::TapRecord>& gpu = gpu_taps.taps();
        const std::vector<diag::TapRecord>& reference = cpu_taps.taps();
        const diag::ComparisonReport report = diag::compare_taps(gpu, reference, diag::kBf16Bound);
        std::printf("taps cpu:mla vs cuda:%-8s %-12s %-7s %s\n", backend.c_str(), c.preset,
                    decode ? "decode" : "prefill", report.summary().c_str());
        std::printf("    decisions replayed on the CPU: %s\n", forced.summary().c_str());
        if (report.first_divergence) {
          for (const diag::TapComparison& t : report.taps) {
            std::printf("  %-28s rel err %-10.3g cos %.6f %s\n", t.name.c_str(), t.rel_error, t.cosine, t.note.c_str());
          }
        }
        INFO(report.summary());
        INFO(forced.summary());
        CHECK(report.taps.size() == reference.size());
        CHECK_FALSE(report.first_divergence.has_value());
        CHECK(forced.failures().empty());
        const int n_positions = n_prompt + (decode ? 1 : 0);
        CHECK(forced.n_checked(latte::detail::DecisionKind::experts) ==
              latte::test::gpu::expected_checks(config, n_positions, latte::detail::DecisionKind::experts));
        CHECK(forced.n_checked(latte::detail::DecisionKind::selection) ==
              latte::test::gpu::expected_checks(config, n_positions, latte::detail::DecisionKind::selection));
      }
    }
  }
}
