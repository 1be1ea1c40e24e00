// Test helpers for model-level tests: random-weight models built in memory from a preset, fresh
// random token sequences, and the normalised error used throughout.
//
//   latte::Model m = latte::test::random_model("test-v3");
//   double e = latte::test::relative_error(a, b);  // ||a - b|| / ||b||
#pragma once

#include "model/random_model.hpp"

#include <latte/model.hpp>
#include <latte/session.hpp>
#include <latte/token.hpp>

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace latte::test {

/// The test flavours every agreement test runs on.
inline constexpr std::string_view kTestFlavours[] = {"test-v2-lite", "test-v3", "test-glm-dsa", "test-glm-flash"};

/// A random-weight model for `config`, written to memory and loaded from there.
Model random_model(const ModelConfig& config, const RandomModelOptions& options = {});
/// Same, for a named preset.
Model random_model(std::string_view preset, const RandomModelOptions& options = {});

/// `n` token ids uniform in [0, n_vocab), different for every call (seeded from a process-wide
/// counter and the clock); the seed is reported through doctest's INFO on failure by callers.
std::vector<Token> fresh_tokens(int n, int n_vocab, uint64_t* seed_out = nullptr);

/// ||a - b||_2 / ||b||_2, computed in double; +inf when the sizes differ or b is zero.
double relative_error(std::span<const float> a, std::span<const float> b);

/// Logits of the last token after feeding `prefill` in one eval and then each of `decode` one by
/// one; returns every step's last logits concatenated (prefill's, then one per decoded token).
std::vector<float> prefill_then_decode(const Model& model, const std::string& backend, std::span<const Token> prefill,
                                       std::span<const Token> decode, int n_threads = 0);

/// Logits of every position of `tokens` fed as one eval (logits_all).
std::vector<float> all_logits(const Model& model, const std::string& backend, std::span<const Token> tokens,
                              int n_threads = 0);

}  // namespace latte::test
