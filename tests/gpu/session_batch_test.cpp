// Batches of sessions through the public API on one GPU: the CUDA pass writes each logit row straight
// into its session (ForwardBatch::logit_dest), so every session must hold exactly the logits it would
// have after evaluating its own tokens alone, whichever row of the batch they came from.
#include "gpu_test_support.hpp"
#include "model/presets.hpp"
#include "support/random_models.hpp"

#include <latte/batch.hpp>
#include <latte/gguf.hpp>
#include <latte/model.hpp>
#include <latte/session.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace {

latte::Model cuda_model(const char* flavour, uint64_t seed) {
  const latte::ModelConfig config = latte::model_preset(flavour);
  const auto bytes = latte::random_model_bytes(config, {.seed = seed});
  return latte::Model::from_file(latte::gguf::File::from_bytes(bytes, std::string(flavour) + ".gguf"),
                                 {.device = latte::Device::cuda(0)});
}

bool finite(std::span<const float> v) {
  for (float x : v) {
    if (!std::isfinite(x)) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("decode_batch on one GPU leaves each session the logits of decoding it alone, both backends") {
  for (const char* flavour : {"test-v2-lite", "test-glm-dsa"}) {
    const latte::Model model = cuda_model(flavour, 43);
    const int vocab = model.config().n_vocab;
    for (const char* backend : {"mla", "standard"}) {
      CAPTURE(flavour);
      CAPTURE(backend);
      const std::vector<int> lengths{4, 13, 7, 2, 21};
      std::vector<std::vector<latte::Token>> tokens;
      std::vector<std::unique_ptr<latte::Session>> alone, together;
      for (int n : lengths) {
        tokens.push_back(latte::test::fresh_tokens(n + 3, vocab));
        for (auto* set : {&alone, &together}) {
          set->push_back(std::make_unique<latte::Session>(model, latte::SessionParams{.n_ctx = 64, .attention = backend}));
          set->back()->eval(std::span(tokens.back()).first(static_cast<size_t>(n)));
        }
      }
      std::vector<double> errors;
      for (int step = 0; step < 3; ++step) {
        std::vector<latte::Token> next;
        std::vector<latte::Session*> sessions;
        for (size_t i = 0; i < lengths.size(); ++i) {
          next.push_back(tokens[i][static_cast<size_t>(lengths[i] + step)]);
          sessions.push_back(together[i].get());
          alone[i]->eval(std::span(&next.back(), 1));
        }
        latte::decode_batch(sessions, next);
        for (size_t i = 0; i < lengths.size(); ++i) {
          const std::span<const float> got = together[i]->logits(), want = alone[i]->logits();
          REQUIRE(got.size() == static_cast<size_t>(vocab));
          REQUIRE(want.size() == got.size());
          const double error = latte::test::relative_error(got, want);
          std::printf("decode_batch %-13s %-8s step %d session %zu: logits error %.3g\n", flavour, backend, step, i,
                      error);
          CHECK(finite(got));
          // A row given to another session is off by O(1). The mla backend's rows of a 2-16-row step take fp32 W_UK /
          // W_UV products where one row takes split-int8 GEMVs (~1.6e-5 of a unit's largest value); q_lat is then
          // rounded to bf16, where such a difference now and then crosses a rounding (2^-9 relative), and the next
          // blocks' routers see it: 4e-7 to 1.1e-3 per row on an H100, a run's largest 1.7e-6 to 1.1e-3 (0 with the
          // standard backend and the DSA model, which take the same kernels for one row and five).
          CHECK(error <= 1e-2);
          errors.push_back(error);
          CHECK(together[i]->n_past() == lengths[i] + step + 1);
        }
      }
      // the typical row below the bf16 level (a run's median was over 1e-5 in 1 of 8 runs): bf16 weights and
      // activations for every batched row (the CUDA-vs-CPU checks measure 2.8e-3 to 4.4e-3 for those) fail here
      std::sort(errors.begin(), errors.end());
      CHECK(errors[errors.size() / 2] <= 1e-3);
    }
  }
}

TEST_CASE("decode_batch of 24 and 100 sessions on one GPU (cuBLAS over bf16 copies, bf16 rows) matches the CPU") {
  // Steps of 17+ rows: W_UK / W_UV as batched cuBLAS products (q_nope's bf16 rows from the rope launch, the attention
  // output as bf16 from W_UV), the FFN norm's and silu's bf16 rows for the shared expert over its copies; 100 rows:
  // the rope launch's q_pe and cache rows past 64 rows, the shared expert after the routed ones. The CPU sessions
  // decode each sequence alone: an independent path in fp32 (and the reference a wrong row or a stale bf16 buffer
  // would be O(1) away from).
  const latte::ModelConfig config = latte::model_preset("test-v2-lite");
  const auto bytes = latte::random_model_bytes(config, {.seed = 53});
  const latte::Model gpu =
      latte::Model::from_file(latte::gguf::File::from_bytes(bytes, "v2.gguf"), {.device = latte::Device::cuda(0)});
  const latte::Model cpu = latte::Model::from_file(latte::gguf::File::from_bytes(bytes, "v2.gguf"));
  const int vocab = config.n_vocab;
  for (const char* backend : {"mla", "standard"}) {
    for (const int n : {24, 100}) {
      CAPTURE(backend);
      CAPTURE(n);
      std::vector<std::vector<latte::Token>> tokens;
      std::vector<std::unique_ptr<latte::Session>> on_gpu, on_cpu;
      for (int i = 0; i < n; ++i) {
        const int length = 2 + (7 * i) % 11;
        tokens.push_back(latte::test::fresh_tokens(length + 2, vocab));
        on_gpu.push_back(
            std::make_unique<latte::Session>(gpu, latte::SessionParams{.n_ctx = 32, .attention = backend}));
        on_cpu.push_back(
            std::make_unique<latte::Session>(cpu, latte::SessionParams{.n_ctx = 32, .attention = backend}));
        const auto prompt = std::span(tokens.back()).first(static_cast<size_t>(length));
        on_gpu.back()->eval(prompt);
        on_cpu.back()->eval(prompt);
      }
      std::vector<double> errors;
      for (int step = 0; step < 2; ++step) {
        std::vector<latte::Token> next;
        std::vector<latte::Session*> sessions;
        for (int i = 0; i < n; ++i) {
          next.push_back(tokens[static_cast<size_t>(i)][static_cast<size_t>(2 + (7 * i) % 11 + step)]);
          sessions.push_back(on_gpu[static_cast<size_t>(i)].get());
          on_cpu[static_cast<size_t>(i)]->eval(std::span(&next.back(), 1));
        }
        latte::decode_batch(sessions, next);
        for (int i = 0; i < n; ++i) {
          const std::span<const float> got = on_gpu[static_cast<size_t>(i)]->logits();
          const std::span<const float> want = on_cpu[static_cast<size_t>(i)]->logits();
          REQUIRE(got.size() == static_cast<size_t>(vocab));
          CHECK(finite(got));
          errors.push_back(latte::test::relative_error(got, want));
        }
      }
      std::sort(errors.begin(), errors.end());
      const auto over = std::count_if(errors.begin(), errors.end(), [](double e) { return e > 2e-2; });
      std::printf("decode_batch x%d %-8s vs cpu: logits error median %.3g, largest %.3g, %d over 2e-2\n", n, backend,
                  errors[errors.size() / 2], errors.back(), static_cast<int>(over));
      // bf16 weights and activations: 2.8e-3 to 4.4e-3 typical in the CUDA-vs-CPU checks, 2e-2 their bound; a routing
      // near-tie of the random model may put a row past it; rows given to other sessions or read from a stale buffer
      // are O(1) off
      CHECK(errors[errors.size() / 2] <= 8e-3);
      CHECK(over <= std::max<std::ptrdiff_t>(2, static_cast<std::ptrdiff_t>(errors.size()) / 20));
    }
  }
}

TEST_CASE("eval_batch on one GPU puts every logit row of logits_all sessions at its own row") {
  const latte::Model model = cuda_model("test-v2-lite", 47);
  const int vocab = model.config().n_vocab;
  // Sessions keeping all logits and one keeping the last row, fed 3, 1 and 2 tokens in one batch: six
  // logit rows of the step land in three sessions at rows 0-2, 0 and 0.
  const std::vector<int> history{6, 10, 3};
  const std::vector<int> fed{3, 1, 2};
  const std::vector<bool> all{true, true, false};
  std::vector<std::vector<latte::Token>> tokens;
  std::vector<std::unique_ptr<latte::Session>> alone, together;
  for (size_t i = 0; i < history.size(); ++i) {
    tokens.push_back(latte::test::fresh_tokens(history[i] + fed[i], vocab));
    for (auto* set : {&alone, &together}) {
      set->push_back(std::make_unique<latte::Session>(
          model, latte::SessionParams{.n_ctx = 64, .attention = "mla", .logits_all = all[i]}));
      set->back()->eval(std::span(tokens.back()).first(static_cast<size_t>(history[i])));
    }
  }
  std::vector<std::span<const latte::Token>> lists;
  std::vector<latte::Session*> sessions;
  for (size_t i = 0; i < history.size(); ++i) {
    const auto new_tokens = std::span(tokens[i]).subspan(static_cast<size_t>(history[i]));
    alone[i]->eval(new_tokens);
    lists.push_back(new_tokens);
    sessions.push_back(together[i].get());
  }
  latte::eval_batch(sessions, lists);
  for (size_t i = 0; i < history.size(); ++i) {
    CAPTURE(i);
    const int rows = all[i] ? fed[i] : 1;
    for (int r = 0; r < rows; ++r) {
      CAPTURE(r);
      const int t = all[i] ? r : fed[i] - 1;  // the token of the eval whose logits are row r
      const std::span<const float> got = together[i]->logits(t), want = alone[i]->logits(t);
      REQUIRE(got.size() == static_cast<size_t>(vocab));
      REQUIRE(want.size() == got.size());
      const double error = latte::test::relative_error(got, want);
      std::printf("eval_batch logits_all=%d session %zu token %d: logits error %.3g\n", all[i] ? 1 : 0, i, t, error);
      CHECK(finite(got));
      CHECK(error <= 1e-3);  // mla: a mixed batch measured 1e-7 against its rows run apart
    }
  }
}
