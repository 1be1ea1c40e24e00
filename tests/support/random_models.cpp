#include "support/random_models.hpp"

#include "model/presets.hpp"

#include <latte/gguf.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <random>

namespace latte::test {

Model random_model(const ModelConfig& config, const RandomModelOptions& options) {
  auto bytes = random_model_bytes(config, options);
  return Model::from_file(gguf::File::from_bytes(bytes, config.name + ".gguf"));
}

Model random_model(std::string_view preset, const RandomModelOptions& options) {
  return random_model(model_preset(preset), options);
}

Model shared_random_model(std::string_view preset) {
  static std::mutex mutex;
  static std::map<std::string, Model, std::less<>> models;
  std::lock_guard lock(mutex);
  auto it = models.find(preset);
  if (it == models.end()) it = models.emplace(std::string(preset), random_model(preset)).first;
  return it->second;
}

std::vector<Token> fresh_tokens(int n, int n_vocab, uint64_t* seed_out) {
  static std::atomic<uint64_t> counter{0};
  const uint64_t seed = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
                        (counter.fetch_add(1) * 0x9E3779B97F4A7C15ull);
  if (seed_out) *seed_out = seed;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<Token> dist(0, n_vocab - 1);
  std::vector<Token> t(static_cast<size_t>(n));
  for (auto& x : t) x = dist(rng);
  return t;
}

double relative_error(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    diff += d * d;
    norm += static_cast<double>(b[i]) * b[i];
  }
  if (norm == 0.0) return std::numeric_limits<double>::infinity();
  return std::sqrt(diff / norm);
}

std::vector<float> prefill_then_decode(const Model& model, const std::string& backend, std::span<const Token> prefill,
                                       std::span<const Token> decode, int n_threads) {
  Session s(model, {.n_ctx = 512, .attention = backend, .n_threads = n_threads});
  std::vector<float> out;
  s.eval(prefill);
  out.insert(out.end(), s.logits().begin(), s.logits().end());
  for (Token t : decode) {
    s.eval(std::span(&t, 1));
    out.insert(out.end(), s.logits().begin(), s.logits().end());
  }
  return out;
}

std::vector<float> all_logits(const Model& model, const std::string& backend, std::span<const Token> tokens,
                              int n_threads) {
  Session s(model, {.n_ctx = 512, .attention = backend, .logits_all = true, .n_threads = n_threads});
  s.eval(tokens);
  std::vector<float> out;
  for (int i = 0; i < static_cast<int>(tokens.size()); ++i) {
    auto l = s.logits(i);
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

}  // namespace latte::test
