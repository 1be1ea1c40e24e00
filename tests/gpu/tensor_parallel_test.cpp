// Tensor parallelism on CUDA (cuda/tensor_parallel_cuda.hpp): a model split over 2 GPUs gives the
// logits of the same model on one GPU, for every test flavour, both attention backends and both MoE
// splits; greedy continuations match; batched decode, truncation and graphs behave as on one GPU; and
// asking for more GPUs than exist is a clear error. Cases that need 2 GPUs say so and pass vacuously
// with fewer (the error case runs with any count).
//
// Tolerances: the ranks run the one-GPU kernels on their heads and FFN columns, so the only new
// rounding is the fp32 sum of the ranks' shares (in another order than one GPU's accumulation) and,
// through it, bf16 roundings of activations that land on the other side; as in model_forward_test.cpp
// every position but max(1, 5%) must agree within 2e-2: a MoE routing or DSA selection near-tie may flip
// one (the ranks emit no taps, so the flip-aware replay of model_forward_test.cpp does not apply;
// measured on two H200s: every position within the bound except one of 54 on glm-dsa sparse with mla).
#include "cuda/tensor_parallel_cuda.hpp"
#include "gpu_test_support.hpp"
#include "model/model_state.hpp"
#include "model/presets.hpp"
#include "parallel/shard_plan.hpp"
#include "support/random_models.hpp"

#include <latte/batch.hpp>
#include <latte/error.hpp>
#include <latte/gguf.hpp>
#include <latte/model.hpp>
#include <latte/session.hpp>

#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace {

using latte::test::gpu::all_finite;
using latte::test::gpu::run_session;

constexpr double kBf16LogitsTolerance = 2e-2;  // normalised logits error per position (see above)
/// Positions of `n` that may fall outside the bound (a flipped near-tie).
size_t allowed_outside(size_t n) { return std::max<size_t>(1, n / 20); }

int gpu_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    n = 0;
  }
  return n;
}

/// False, with a message, when fewer than 2 GPUs are visible.
bool have_two_gpus(const char* test) {
  const int n = gpu_count();
  if (n >= 2) return true;
  std::printf("SKIPPED (%d CUDA device%s, 2 needed): %s\n", n, n == 1 ? "" : "s", test);
  MESSAGE("skipped: fewer than 2 CUDA devices");
  return false;
}

latte::Model load(std::span<const std::byte> bytes, const std::string& name, latte::ModelParams params) {
  std::fprintf(stderr, "tp test: loading %s with tensor_parallel %d (%s MoE) on cuda:%d\n", name.c_str(),
               params.tensor_parallel, std::string(latte::detail::moe_split_name(params.moe_split)).c_str(),
               params.device.index);
  return latte::Model::from_file(latte::gguf::File::from_bytes(bytes, name + ".gguf"), std::move(params));
}


/// Fraction of positions (rows of `vocab` logits) whose own normalised error is within `tol`.
double fraction_within(std::span<const float> a, std::span<const float> b, int vocab, double tol) {
  if (a.size() != b.size() || a.empty()) return 0.0;
  const size_t n = a.size() / static_cast<size_t>(vocab);
  size_t good = 0;
  for (size_t i = 0; i < n; ++i) {
    const auto row = [&](std::span<const float> v) { return v.subspan(i * vocab, static_cast<size_t>(vocab)); };
    good += latte::test::relative_error(row(a), row(b)) <= tol ? 1 : 0;
  }
  return static_cast<double>(good) / static_cast<double>(n);
}


/// Greedy continuation of `n` tokens, and the smallest top-2 logit margin seen on the way.
constexpr latte::MoeSplit kMoeSplits[] = {latte::MoeSplit::expert_parallel, latte::MoeSplit::tensor_parallel};

}  // namespace

TEST_CASE("tensor-parallel CUDA: TP=2 logits equal TP=1 on every flavour, both backends, both MoE splits") {
  if (!have_two_gpus("TP=2 vs TP=1 logits")) return;
  for (const std::string_view flavour_view : latte::test::kTestFlavours) {
    const std::string flavour(flavour_view);
    const latte::ModelConfig config = latte::model_preset(flavour);
    const auto bytes = latte::random_model_bytes(config, {.seed = 17});
    const latte::Model one = load(bytes, flavour, {.device = latte::Device::cuda(0)});
    const int vocab = config.n_vocab;
    const int top_k = config.has_indexer() ? config.indexer.top_k : 1 << 30;
    struct Case {
      const char* name;
      int prompt, decode;
    };
    // dense: within glm-dsa's top_k; sparse: beyond it (the indexer selects); long: mla prefill of
    // >= 16 tokens runs decompressed.
    std::vector<Case> cases{{"dense", std::min(12, top_k - 4), 4}};
    cases.push_back(config.has_indexer() ? Case{"sparse", 3 * top_k, 6} : Case{"long", 40, 4});
    // TP=1 references first, one per case and backend; then each MoE split's TP=2 model.
    struct Run {
      const Case* c;
      const char* backend;
      uint64_t seed;
      std::vector<latte::Token> tokens;
      std::vector<float> reference;
    };
    std::vector<Run> runs;
    for (const Case& c : cases) {
      for (const char* backend : {"mla", "standard"}) {
        Run run{.c = &c, .backend = backend, .seed = 0, .tokens = {}, .reference = {}};
        run.tokens = latte::test::fresh_tokens(c.prompt + c.decode, vocab, &run.seed);
        const std::span<const latte::Token> all(run.tokens);
        run.reference = run_session(one, backend, all.first(static_cast<size_t>(c.prompt)),
                                    all.subspan(static_cast<size_t>(c.prompt)));
        runs.push_back(std::move(run));
      }
    }
    for (const latte::MoeSplit moe : kMoeSplits) {
      const latte::Model two =
          load(bytes, flavour, {.device = latte::Device::cuda(0), .tensor_parallel = 2, .moe_split = moe});
      const char* split = latte::detail::moe_split_name(moe).data();
      for (const Run& run : runs) {
        const Case& c = *run.c;
        CAPTURE(flavour);
        CAPTURE(split);
        CAPTURE(c.name);
        CAPTURE(run.backend);
        CAPTURE(run.seed);
        std::fprintf(stderr, "tp test: %s %s %s %s\n", flavour.c_str(), split, c.name, run.backend);
        const std::span<const latte::Token> all(run.tokens);
        const auto logits = run_session(two, run.backend, all.first(static_cast<size_t>(c.prompt)),
                                        all.subspan(static_cast<size_t>(c.prompt)));
        const double error = latte::test::relative_error(logits, run.reference);
        const double within = fraction_within(logits, run.reference, vocab, kBf16LogitsTolerance);
        std::printf(
            "TP2 vs TP1  %-15s %-16s %-6s %-8s prompt %3d + decode %d: logits error %.3g, %.0f%% of "
            "positions within %.0e\n",
            flavour.c_str(), split, c.name, run.backend, c.prompt, c.decode, error, 100 * within, kBf16LogitsTolerance);
        CHECK(all_finite(logits));
        const size_t positions = logits.size() / static_cast<size_t>(vocab);
        const auto outside = static_cast<size_t>(std::lround((1.0 - within) * static_cast<double>(positions)));
        CHECK(outside <= allowed_outside(positions));
      }
    }
  }
}

TEST_CASE("tensor-parallel CUDA: a greedy continuation of 16 tokens on test-v3 equals TP=1's") {
  if (!have_two_gpus("greedy continuation")) return;
  const latte::ModelConfig config = latte::model_preset("test-v3");
  const auto bytes = latte::random_model_bytes(config, {.seed = 11});
  const latte::Model one = load(bytes, "test-v3", {.device = latte::Device::cuda(0)});
  for (const char* backend : {"mla", "standard"}) {
    // Well-conditioned: among a few fixed prompts, the first whose TP=1 continuation keeps the top-2
    // margin above 0.5 at every step (the rounding differences of TP=2 are ~0.01 on these logits).
    std::vector<latte::Token> prompt, expected;
    float best = -1;
    for (uint32_t p = 0; p < 16; ++p) {
      std::vector<latte::Token> candidate(8);
      for (int i = 0; i < 8; ++i) {
        candidate[static_cast<size_t>(i)] = static_cast<latte::Token>((p * 131 + i * 37 + 5) % config.n_vocab);
      }
      float margin = 0;
      auto reference = latte::test::gpu::greedy(one, backend, candidate, 16, &margin);
      if (margin > best) {
        best = margin;
        prompt = candidate;
        expected = std::move(reference);
      }
      if (margin > 0.5f) break;
    }
    for (const latte::MoeSplit moe : kMoeSplits) {
      CAPTURE(backend);
      CAPTURE(latte::detail::moe_split_name(moe));
      const latte::Model two =
          load(bytes, "test-v3", {.device = latte::Device::cuda(0), .tensor_parallel = 2, .moe_split = moe});
      const auto got = latte::test::gpu::greedy(two, backend, prompt, 16, nullptr);
      const size_t same = static_cast<size_t>(
          std::mismatch(got.begin(), got.end(), expected.begin(), expected.end()).first - got.begin());
      std::printf("TP2 greedy %-8s %-16s: smallest TP1 top-2 margin %.3f, first %zu of 16 tokens equal\n", backend,
                  latte::detail::moe_split_name(moe).data(), best, same);
      CHECK(got == expected);
    }
  }
}

TEST_CASE("tensor-parallel CUDA: batched decode over TP sessions equals each session alone") {
  if (!have_two_gpus("batched decode")) return;
  for (const char* flavour : {"test-v2-lite", "test-glm-dsa"}) {
    const latte::ModelConfig config = latte::model_preset(flavour);
    const auto bytes = latte::random_model_bytes(config, {.seed = 5});
    const latte::Model two = load(bytes, flavour, {.device = latte::Device::cuda(0), .tensor_parallel = 2});
    for (const char* backend : {"mla", "standard"}) {
      CAPTURE(flavour);
      CAPTURE(backend);
      // Three histories (the last beyond glm-dsa's top_k), then three decode steps.
      const std::vector<int> lengths{5, 11, 3 * std::max(8, config.indexer.top_k)};
      std::vector<std::vector<latte::Token>> prompts;
      for (int n : lengths) prompts.push_back(latte::test::fresh_tokens(n + 3, config.n_vocab));
      std::vector<std::unique_ptr<latte::Session>> alone, together;
      for (size_t i = 0; i < lengths.size(); ++i) {
        for (auto* set : {&alone, &together}) {
          set->push_back(
              std::make_unique<latte::Session>(two, latte::SessionParams{.n_ctx = 128, .attention = backend}));
          set->back()->eval(std::span(prompts[i]).first(static_cast<size_t>(lengths[i])));
        }
      }
      for (int step = 0; step < 3; ++step) {
        std::vector<float> single, batched;
        std::vector<latte::Token> next;
        std::vector<latte::Session*> sessions;
        for (size_t i = 0; i < lengths.size(); ++i) {
          const latte::Token t = prompts[i][static_cast<size_t>(lengths[i] + step)];
          alone[i]->eval(std::span(&t, 1));
          const auto l = alone[i]->logits();
          single.insert(single.end(), l.begin(), l.end());
          next.push_back(t);
          sessions.push_back(together[i].get());
        }
        latte::decode_batch(sessions, next);
        for (latte::Session* s : sessions) {
          const auto l = s->logits();
          batched.insert(batched.end(), l.begin(), l.end());
        }
        const double error = latte::test::relative_error(batched, single);
        std::printf("TP2 batched vs single %-13s %-8s step %d: logits error %.3g\n", flavour, backend, step, error);
        CHECK(all_finite(batched));
        CHECK(error <= 1e-3);  // same kernels; only split-KV plans and reduction orders may differ
        for (size_t i = 0; i < lengths.size(); ++i) CHECK(together[i]->n_past() == lengths[i] + step + 1);
      }
    }
  }
}

TEST_CASE("tensor-parallel CUDA: truncating and continuing, and graphs against eager launches") {
  if (!have_two_gpus("truncate and graphs")) return;
  const latte::ModelConfig config = latte::model_preset("test-glm-dsa");
  const auto bytes = latte::random_model_bytes(config, {.seed = 23});
  const latte::Model two = load(bytes, "test-glm-dsa", {.device = latte::Device::cuda(0), .tensor_parallel = 2});
  const auto tokens = latte::test::fresh_tokens(60, config.n_vocab);
  const std::span<const latte::Token> all(tokens);
  for (const char* backend : {"mla", "standard"}) {
    CAPTURE(backend);
    // 20 prompt tokens, 40 decode steps: steps 3.. replay captured graphs (NCCL inside), and the
    // indexer turns sparse on the way. Two ranks' sums are exact whatever NCCL's algorithm.
    ::setenv("LATTE_CUDA_GRAPHS", "0", 1);
    const auto eager = run_session(two, backend, all.first(20), all.subspan(20));
    ::unsetenv("LATTE_CUDA_GRAPHS");
    const auto graphs = run_session(two, backend, all.first(20), all.subspan(20));
    const double error = latte::test::relative_error(graphs, eager);
    std::printf("TP2 graphs vs eager %-8s: logits error %.3g\n", backend, error);
    CHECK(error <= 1e-6);

    // Truncate back into the prompt and continue with other tokens: the rank caches follow the session,
    // so it equals a fresh session fed the kept tokens and the new ones, as on one GPU (the bounds and
    // the control of check_truncation, shared with session_truncate_test.cpp).
    latte::test::gpu::check_truncation(two, backend, all.first(30), 12,
                                       latte::test::fresh_tokens(18, config.n_vocab), std::string("TP2 ") + backend);
  }
}

TEST_CASE("tensor-parallel CUDA: the output head split by vocabulary gives the replicated head's logits") {
  if (!have_two_gpus("split output head")) return;
  const latte::ModelConfig config = latte::model_preset("test-v3");
  const auto bytes = latte::random_model_bytes(config, {.seed = 29});
  const latte::Model replicated = load(bytes, "test-v3", {.device = latte::Device::cuda(0), .tensor_parallel = 2});
  ::setenv("LATTE_TP_OUTPUT", "split", 1);
  const latte::Model split = load(bytes, "test-v3", {.device = latte::Device::cuda(0), .tensor_parallel = 2});
  ::unsetenv("LATTE_TP_OUTPUT");
  REQUIRE(config.n_vocab % 2 == 0);
  CHECK_FALSE(replicated.state().cuda_tensor_parallel->split_output);
  CHECK(split.state().cuda_tensor_parallel->split_output);
  const auto tokens = latte::test::fresh_tokens(44, config.n_vocab);
  const std::span<const latte::Token> all(tokens);
  for (const char* backend : {"mla", "standard"}) {
    CAPTURE(backend);
    // 40 prompt positions (the head as a GEMM over 40 rows), then 4 decode steps (one row each).
    const auto want = run_session(replicated, backend, all.first(40), all.subspan(40));
    const auto got = run_session(split, backend, all.first(40), all.subspan(40));
    const double error = latte::test::relative_error(got, want);
    std::printf("TP2 split vs replicated output head %-8s: logits error %.3g\n", backend, error);
    CHECK(all_finite(got));
    // The same rows of the head either way; only the GEMM's blocking over a half-height matrix may
    // differ (fp32 accumulation order), far below bf16 noise and far from a misplaced slice (~1).
    CHECK(error <= 1e-4);
  }
}

TEST_CASE("tensor-parallel CUDA: more ranks than GPUs is an error naming the GPUs found") {
  const int n = gpu_count();
  const auto bytes = latte::random_model_bytes(latte::model_preset("test-v2-lite"), {.seed = 3});
  for (const auto& [first, tp] : {std::pair{0, n + 1}, std::pair{n - 1, 2}}) {
    CAPTURE(first);
    CAPTURE(tp);
    try {
      (void)load(bytes, "test-v2-lite", {.device = latte::Device::cuda(first), .tensor_parallel = tp});
      FAIL("tensor_parallel beyond the visible GPUs should fail");
    } catch (const latte::Error& e) {
      const std::string what = e.what();
      std::printf("TP=%d from cuda:%d with %d GPU(s): %s\n", tp, first, n, what.c_str());
      CHECK(e.code() == latte::ErrorCode::invalid_argument);
      CHECK(what.find(std::to_string(n) + " CUDA device") != std::string::npos);
      CHECK(what.find("tensor_parallel = " + std::to_string(tp)) != std::string::npos);
    }
  }
}
