// latte::Sampler — picks the next token from a logits vector through a fixed chain of transforms.
//
//   latte::Sampler sampler({.temperature = 0.7f, .top_p = 0.9f, .seed = 42});
//   latte::Token t = sampler.sample(session.logits());
//
// The chain, always in this order (each step is skipped when its parameter says "off"):
//   1. logit bias        l[t] += logit_bias[t]                       (-inf bans a token)
//   2. penalties         over the last penalty_last_n tokens of the history, for each distinct token
//                        t seen c times: repetition (l > 0 ? l / repeat_penalty : l * repeat_penalty,
//                        the CTRL / llama.cpp rule), then frequency and presence (OpenAI rule):
//                        l -= c * frequency_penalty + presence_penalty
//   3. temperature       temperature == 0: greedy — the largest logit, ties to the lowest id (steps
//                        4-7 and the random draw are skipped, no random number is consumed);
//                        otherwise p ~ exp((l - max l) / temperature)
//   4. top-k             keep the k largest logits (ties to the lower id)
//   5. top-p             keep the smallest set of most probable tokens whose mass is >= top_p
//   6. min-p             keep tokens with p >= min_p * p_max
//   7. typical-p         locally typical sampling: order tokens by |-log p - H| (H the entropy of the
//                        remaining distribution) and keep the smallest prefix with mass >= typical_p
//   8. draw              u = top 24 bits of the next xoshiro256** output / 2^24; walk the remaining
//                        tokens in increasing id order and return the first whose cumulative weight
//                        exceeds u times the total weight
// Probabilities are renormalised over the survivors after every step. Every ordering is total
// (ties broken by token id), sums run in a fixed order in double precision, and exp() is computed
// by latte's own branch-free routine, so a seed gives the same tokens on every platform and
// compiler. That needs exact IEEE operation sequences: GCC contracts a*b+c into an FMA across
// statements by default, so the latte CMake target passes -ffp-contract=off to its users; add it
// yourself when using this header without CMake (Clang and MSVC do not contract across statements).
// A Sampler is not thread-safe; use one per generation stream.
#pragma once

#include <latte/detail/sampler_kernels.hpp>
#include <latte/detail/sampler_math.hpp>
#include <latte/error.hpp>
#include <latte/token.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace latte {

/// The sampling chain's parameters. Defaults: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05,
/// typical-p and all penalties off, seed 0. Out-of-range values make the Sampler constructor throw
/// Error(invalid_argument) naming the field and the value.
struct SamplerParams {
  float temperature = 0.8f;                ///< >= 0, finite; 0 means greedy (argmax)
  int32_t top_k = 40;                      ///< >= 0; 0 (or >= the vocabulary size) disables top-k
  float top_p = 0.95f;                     ///< in (0, 1]; 1 disables top-p
  float min_p = 0.05f;                     ///< in [0, 1]; 0 disables min-p
  float typical_p = 1.0f;                  ///< in (0, 1]; 1 disables typical sampling
  float repeat_penalty = 1.0f;             ///< > 0, finite; 1 disables the repetition penalty
  float frequency_penalty = 0.0f;          ///< finite (negative rewards repetition); 0 disables it
  float presence_penalty = 0.0f;           ///< finite (negative rewards repetition); 0 disables it
  int32_t penalty_last_n = 64;             ///< penalty window in tokens: 0 disables penalties, -1 = whole history
  std::map<Token, float> logit_bias = {};  ///< token -> additive bias; ids >= 0; finite or -inf (ban)
  uint64_t seed = 0;                       ///< random stream; the same seed gives the same tokens
};

/// Draws tokens from logits; see the header comment for the exact chain. The Sampler keeps the token
/// history that the penalties read: sample() appends the token it returns, accept() appends tokens
/// that did not come from sample() (typically the prompt).
class Sampler {
 public:
  /// Validates `params`; throws Error(invalid_argument) naming the first bad field and its value.
  explicit Sampler(SamplerParams params = {}) : params_(std::move(params)), rng_(params_.seed) { validate(params_); }

  /// Samples one token id in [0, logits.size()) and appends it to the history. Throws
  /// Error(invalid_argument) when `logits` is empty, holds a NaN or +inf, when every logit is -inf
  /// after bias and penalties, or when a logit_bias or history token is outside the vocabulary.
  Token sample(std::span<const float> logits) {
    prepare(logits);
    const Token token = choose();
    push_history(token);
    return token;
  }

  /// One token of the distribution sample() draws from.
  struct TokenProbability {
    Token token;
    float probability;
  };

  /// The distribution sample() would draw from for these logits after steps 1-7: the surviving
  /// tokens in increasing id order with their renormalised probabilities (greedy: the argmax with
  /// probability 1). Consumes no random number and records nothing. Throws like sample().
  std::vector<TokenProbability> probabilities(std::span<const float> logits) {
    prepare(logits);
    if (params_.temperature == 0.0f) return {{greedy(), 1.0f}};
    if (!truncate()) select_positive_dense(0.0f);
    std::sort(candidates_.begin(), candidates_.end(),
              [](const Candidate& a, const Candidate& b) { return a.id < b.id; });
    double total = 0.0;
    for (const Candidate& c : candidates_) total += c.weight;
    std::vector<TokenProbability> out;
    out.reserve(candidates_.size());
    for (const Candidate& c : candidates_) {
      if (c.weight > 0.0f) out.push_back({c.id, static_cast<float>(static_cast<double>(c.weight) / total)});
    }
    return out;
  }

  /// Appends `token` (>= 0) to the penalty history without sampling.
  void accept(Token token) {
    if (token < 0) throw Error(ErrorCode::invalid_argument, "Sampler::accept: token id " + describe(token) + " < 0");
    push_history(token);
  }
  /// Appends every token of `tokens` to the penalty history.
  void accept(std::span<const Token> tokens) {
    for (Token token : tokens) accept(token);
  }

  /// Clears the history and restarts the random stream from the seed, as a fresh Sampler would.
  void reset() {
    history_.clear();
    rng_ = SamplerRng(params_.seed);
  }

  /// The parameters this Sampler was built with.
  [[nodiscard]] const SamplerParams& params() const noexcept { return params_; }

  /// The tokens the penalties currently look at, oldest first (at most penalty_last_n of them).
  [[nodiscard]] std::span<const Token> penalty_window() const noexcept {
    if (params_.penalty_last_n < 0) return history_;
    const size_t n = std::min(history_.size(), static_cast<size_t>(params_.penalty_last_n));
    return std::span<const Token>(history_).last(n);
  }

 private:
  /// One surviving token: its logit after bias and penalties, its unnormalised probability
  /// exp((logit - max) / temperature) and its id.
  struct Candidate {
    float logit;
    float weight;
    Token id;
  };
  static bool ranks_before(const Candidate& a, const Candidate& b) noexcept {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  }

  static constexpr int kBinsPerUnit = 4;     // histogram bins per unit of scaled logit (top-p search)
  static constexpr int kBins = 256;          // bins cover scaled logits in [-63.75, 0]; the last one the rest
  static constexpr size_t kDrawBlock = 256;  // tokens per partial sum when drawing from the full vocabulary
  static constexpr size_t kScanBlock = 64;   // logits tested at once by the top-k scan

  // Shortest text that reads back as `value` ("1.01", "nan", "-inf", "42").
  template <typename T>
  static std::string describe(T value) {
    char text[64];
    const auto result = std::to_chars(text, text + sizeof(text), value);
    return std::string(text, result.ptr);
  }
  static void fail(const std::string& message) { throw Error(ErrorCode::invalid_argument, message); }

  static void validate(const SamplerParams& p) {
    const auto field = [](const char* name, float value, const char* range) {
      return std::string("SamplerParams.") + name + " = " + describe(value) + " is outside " + range;
    };
    if (!(p.temperature >= 0.0f) || std::isinf(p.temperature)) fail(field("temperature", p.temperature, "[0, inf)"));
    if (p.top_k < 0) fail("SamplerParams.top_k = " + describe(p.top_k) + " is negative");
    if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) fail(field("top_p", p.top_p, "(0, 1]"));
    if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) fail(field("min_p", p.min_p, "[0, 1]"));
    if (!(p.typical_p > 0.0f && p.typical_p <= 1.0f)) fail(field("typical_p", p.typical_p, "(0, 1]"));
    if (!(p.repeat_penalty > 0.0f) || std::isinf(p.repeat_penalty))
      fail(field("repeat_penalty", p.repeat_penalty, "(0, inf)"));
    if (!std::isfinite(p.frequency_penalty)) fail(field("frequency_penalty", p.frequency_penalty, "the finite floats"));
    if (!std::isfinite(p.presence_penalty)) fail(field("presence_penalty", p.presence_penalty, "the finite floats"));
    if (p.penalty_last_n < -1) fail("SamplerParams.penalty_last_n = " + describe(p.penalty_last_n) + " is below -1");
    for (const auto& [token, bias] : p.logit_bias) {
      if (token < 0) fail("SamplerParams.logit_bias has negative token id " + describe(token));
      if (std::isnan(bias) || bias == std::numeric_limits<float>::infinity())
        fail("SamplerParams.logit_bias[" + describe(token) + "] = " + describe(bias) + " is not finite or -inf");
    }
  }

  void push_history(Token token) {
    history_.push_back(token);
    // Keep memory bounded: drop tokens that can no longer enter the window (amortised O(1)).
    const int32_t n = params_.penalty_last_n;
    if (n >= 0 && history_.size() > 2 * static_cast<size_t>(n) + 64) {
      history_.erase(history_.begin(), history_.end() - n);
    }
  }

  bool penalties_active() const noexcept {
    const SamplerParams& p = params_;
    const bool any = p.repeat_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
    return any && p.penalty_last_n != 0 && !history_.empty();
  }

  // Steps 1-2 and the max. The caller's logits are checked in place and used directly unless a bias
  // or a penalty applies; then they are copied to modified_logits_ and changed there.
  void prepare(std::span<const float> logits) {
    const size_t n = logits.size();
    if (n == 0) fail("Sampler::sample: the logits span is empty");
    if (n > static_cast<size_t>(std::numeric_limits<Token>::max()))
      fail("Sampler::sample: " + describe(n) + " logits exceed the largest token id");
    bool bad = false;  // NaN or +inf somewhere: found in the same pass, located only on failure
    max_logit_ = detail::max_and_check(logits.data(), n, bad);
    if (bad) {
      for (size_t i = 0; i < n; ++i) {
        if (!(logits[i] < std::numeric_limits<float>::infinity()))
          fail("Sampler::sample: logits[" + describe(i) + "] = " + describe(logits[i]) + " (NaN and +inf are invalid)");
      }
    }
    logits_ = logits;
    if (!params_.logit_bias.empty() || penalties_active()) {
      modified_logits_.assign(logits.begin(), logits.end());
      for (const auto& [token, bias] : params_.logit_bias) {
        if (static_cast<size_t>(token) >= n)
          fail("SamplerParams.logit_bias token " + describe(token) + " is outside the vocabulary of " + describe(n));
        modified_logits_[static_cast<size_t>(token)] += bias;
      }
      if (penalties_active()) apply_penalties(n);
      logits_ = modified_logits_;
      max_logit_ = detail::max_of(modified_logits_.data(), n);
    }
    if (max_logit_ == -std::numeric_limits<float>::infinity())
      fail("Sampler::sample: every one of the " + describe(n) + " logits is -inf after bias and penalties");
  }

  void apply_penalties(size_t n) {
    const SamplerParams& p = params_;
    const std::span<const Token> window = penalty_window();
    scratch_tokens_.assign(window.begin(), window.end());
    std::sort(scratch_tokens_.begin(), scratch_tokens_.end());
    for (size_t i = 0; i < scratch_tokens_.size();) {
      const Token token = scratch_tokens_[i];
      size_t count = 0;
      while (i < scratch_tokens_.size() && scratch_tokens_[i] == token) ++i, ++count;
      if (static_cast<size_t>(token) >= n)
        fail("Sampler::sample: history token " + describe(token) + " is outside the vocabulary of " + describe(n));
      float& logit = modified_logits_[static_cast<size_t>(token)];
      if (p.repeat_penalty != 1.0f) logit = logit > 0.0f ? logit / p.repeat_penalty : logit * p.repeat_penalty;
      logit -= static_cast<float>(count) * p.frequency_penalty + p.presence_penalty;
    }
  }

  // The first index holding the maximum is the lowest id among ties.
  Token greedy() const noexcept {
    return static_cast<Token>(detail::first_index_of(logits_.data(), logits_.size(), max_logit_));
  }

  Token choose() {
    if (params_.temperature == 0.0f) return greedy();
    return truncate() ? draw_candidates() : draw_dense();
  }

  // Steps 4-7. Returns true with the survivors in candidates_, or false when no step truncates
  // (the whole vocabulary survives and is drawn from densely).
  bool truncate() {
    const size_t n = logits_.size();
    const SamplerParams& p = params_;
    inv_temperature_ = 1.0f / p.temperature;
    const bool top_k_on = p.top_k > 0 && static_cast<size_t>(p.top_k) < n;
    if (top_k_on) {
      select_top_k(static_cast<size_t>(p.top_k));
      if (p.top_p < 1.0f) keep_top_p_of_sorted();
    } else if (p.top_p < 1.0f) {
      select_top_p_dense();
    } else if (p.min_p > 0.0f || p.typical_p < 1.0f) {
      select_positive_dense(p.min_p);
    } else {
      return false;
    }
    if (p.min_p > 0.0f) keep_min_p();
    if (p.typical_p < 1.0f) keep_typical();
    return true;
  }

  float scaled(float logit) const noexcept { return (logit - max_logit_) * inv_temperature_; }
  float weight_of(float logit) const noexcept { return detail::exp_nonpositive(scaled(logit)); }

  // Step 4: the k best (logit desc, id asc) finite logits, sorted in that order. One pass keeping
  // a buffer of at most 2k entries that is cut back to k by nth_element when full; blocks of
  // kScanBlock logits with none above the current k-th best are skipped with one vector test.
  void select_top_k(size_t k) {
    candidates_.clear();
    candidates_.reserve(2 * k);
    float threshold = -std::numeric_limits<float>::infinity();  // the k-th best logit seen so far
    const size_t n = logits_.size();
    const float* logits = logits_.data();
    for (size_t begin = 0; begin < n; begin += kScanBlock) {
      const size_t end = std::min(n, begin + kScanBlock);
      if (!detail::any_above(logits + begin, end - begin, threshold)) continue;
      for (size_t i = begin; i < end; ++i) {
        if (!(logits[i] > threshold)) continue;  // equal logits lose: their id is larger than any kept one
        candidates_.push_back({logits[i], 0.0f, static_cast<Token>(i)});
        if (candidates_.size() == 2 * k) {
          std::nth_element(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(k - 1),
                           candidates_.end(), ranks_before);
          candidates_.resize(k);
          threshold = candidates_[k - 1].logit;
        }
      }
    }
    std::sort(candidates_.begin(), candidates_.end(), ranks_before);
    if (candidates_.size() > k) candidates_.resize(k);
    for (Candidate& c : candidates_) c.weight = weight_of(c.logit);
  }

  // Step 5 on candidates sorted by ranks_before: keep the shortest prefix with mass >= top_p.
  void keep_top_p_of_sorted() {
    double total = 0.0;
    for (const Candidate& c : candidates_) total += c.weight;
    const double target = static_cast<double>(params_.top_p) * total;
    double cumulative = 0.0;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      cumulative += candidates_[i].weight;
      if (cumulative >= target) {
        candidates_.resize(i + 1);
        return;
      }
    }
  }

  // Step 5 over the whole vocabulary without sorting it. One vectorised pass computes every weight
  // and its histogram bin (kBinsPerUnit bins per unit of scaled logit, the last bin taking all
  // below); the bins are walked from the top until their mass reaches top_p * total, every token of
  // a higher bin is kept, and the crossing bin is resolved by refine_crossing().
  void select_top_p_dense() {
    const size_t n = logits_.size();
    weights_.resize(n);
    bins_.resize(n);
    detail::exp_weights_and_bins(logits_.data(), weights_.data(), bins_.data(), n, max_logit_, inv_temperature_,
                                 static_cast<float>(kBinsPerUnit), static_cast<uint8_t>(kBins - 1));
    // Four interleaved histograms break the store-to-load chain of consecutive equal bins.
    double mass[4][kBins] = {};
    uint32_t count[kBins] = {};
    const float* w = weights_.data();
    const uint8_t* bin = bins_.data();
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
      for (size_t lane = 0; lane < 4; ++lane) mass[lane][bin[i + lane]] += w[i + lane], ++count[bin[i + lane]];
    }
    for (; i < n; ++i) mass[0][bin[i]] += w[i], ++count[bin[i]];
    double bin_mass[kBins];
    double total = 0.0;
    for (int b = 0; b < kBins; ++b) {
      bin_mass[b] = (mass[0][b] + mass[1][b]) + (mass[2][b] + mass[3][b]);
      total += bin_mass[b];
    }
    const double target = static_cast<double>(params_.top_p) * total;
    double above = 0.0;  // mass of the bins above the crossing bin
    int crossing = kBins - 1;
    for (int b = 0; b < kBins; ++b) {
      if (above + bin_mass[b] >= target) {
        crossing = b;
        break;
      }
      above += bin_mass[b];
    }
    size_t above_count = 0;
    for (int b = 0; b < crossing; ++b) above_count += count[b];
    candidates_.clear();
    boundary_.clear();
    candidates_.reserve(above_count + count[crossing]);
    boundary_.reserve(count[crossing]);
    const auto crossing_bin = static_cast<uint8_t>(crossing);
    for (size_t j = 0; j < n; ++j) {
      if (bin[j] > crossing_bin) continue;
      const Candidate c{logits_[j], w[j], static_cast<Token>(j)};
      if (bin[j] < crossing_bin) {
        candidates_.push_back(c);
      } else if (c.weight > 0.0f) {
        boundary_.push_back(c);
      }
    }
    refine_crossing(static_cast<float>(crossing), 1.0f, above, target);
  }

  // Resolves the crossing bin of select_top_p_dense: boundary_ holds its tokens, which span bin
  // coordinates [lo, lo + width) (bin coordinate = -scaled logit * kBinsPerUnit); `above` is the
  // mass already kept. While the bin is large, it is split into kSubBins sub-bins (the mapping stays
  // monotonic under rounding, so ranks are preserved) and only the crossing sub-bin is kept for the
  // next round; finally the few remaining tokens are sorted and taken in rank order until the kept
  // mass reaches `target`.
  void refine_crossing(float lo, float width, double above, double target) {
    constexpr size_t kSortLimit = 512;  // sort directly below this many tokens
    constexpr int kSubBins = 256;
    for (int round = 0; round < 3 && boundary_.size() > kSortLimit; ++round) {
      const float scale = static_cast<float>(kSubBins) / width;
      const auto sub_bin = [&](const Candidate& c) {
        float x = -scaled(c.logit) * static_cast<float>(kBinsPerUnit);
        x = (x - lo) * scale;
        x = x < 0.0f ? 0.0f : x;
        x = x < static_cast<float>(kSubBins - 1) ? x : static_cast<float>(kSubBins - 1);
        return static_cast<int>(x);
      };
      double mass[kSubBins] = {};
      for (const Candidate& c : boundary_) mass[sub_bin(c)] += c.weight;
      int crossing = kSubBins - 1;
      for (int b = 0; b < kSubBins; ++b) {
        if (above + mass[b] >= target) {
          crossing = b;
          break;
        }
        above += mass[b];
      }
      size_t kept = 0;
      for (const Candidate& c : boundary_) {
        const int b = sub_bin(c);
        if (b < crossing) {
          candidates_.push_back(c);
        } else if (b == crossing) {
          boundary_[kept++] = c;
        }
      }
      boundary_.resize(kept);
      lo += static_cast<float>(crossing) * width / static_cast<float>(kSubBins);
      width /= static_cast<float>(kSubBins);
    }
    std::sort(boundary_.begin(), boundary_.end(), ranks_before);
    for (const Candidate& c : boundary_) {
      candidates_.push_back(c);
      above += c.weight;
      if (above >= target) break;
    }
  }

  // Dense start for min-p / typical-p without top-k and top-p: every token with weight >= min_p
  // (the largest weight is exactly 1) and, when min_p is 0, every token of nonzero weight.
  void select_positive_dense(float min_p) {
    const size_t n = logits_.size();
    weights_.resize(n);
    detail::exp_weights(logits_.data(), weights_.data(), n, max_logit_, inv_temperature_);
    candidates_.clear();
    const float* w = weights_.data();
    for (size_t i = 0; i < n; ++i) {
      if (w[i] > 0.0f && w[i] >= min_p) candidates_.push_back({logits_[i], w[i], static_cast<Token>(i)});
    }
  }

  // Step 6: keep p >= min_p * p_max, i.e. weight >= min_p * max weight (order preserved).
  void keep_min_p() {
    float max_weight = 0.0f;
    for (const Candidate& c : candidates_) max_weight = std::max(max_weight, c.weight);
    const float threshold = params_.min_p * max_weight;
    std::erase_if(candidates_, [threshold](const Candidate& c) { return c.weight < threshold; });
  }

  // Step 7. With w_i = exp(s_i), s_i the scaled logit and Z = sum w: -log p_i = log Z - s_i and
  // H = log Z - sum p_j s_j, so |-log p_i - H| = |s_i - sum p_j s_j|; no logarithm is needed.
  void keep_typical() {
    double total = 0.0;
    double weighted = 0.0;
    for (const Candidate& c : candidates_) {
      total += c.weight;
      weighted += static_cast<double>(c.weight) * static_cast<double>(scaled(c.logit));
    }
    const double mean_scaled = weighted / total;
    const auto deviation = [&](const Candidate& c) {
      return std::abs(static_cast<double>(scaled(c.logit)) - mean_scaled);
    };
    std::sort(candidates_.begin(), candidates_.end(), [&](const Candidate& a, const Candidate& b) {
      const double da = deviation(a);
      const double db = deviation(b);
      return da < db || (da == db && ranks_before(a, b));
    });
    const double target = static_cast<double>(params_.typical_p) * total;
    double cumulative = 0.0;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      cumulative += candidates_[i].weight;
      if (cumulative >= target) {
        candidates_.resize(i + 1);
        return;
      }
    }
  }

  // Step 8 over candidates_: increasing id order, first cumulative weight > u * total.
  Token draw_candidates() {
    std::sort(candidates_.begin(), candidates_.end(),
              [](const Candidate& a, const Candidate& b) { return a.id < b.id; });
    double total = 0.0;
    for (const Candidate& c : candidates_) total += c.weight;
    const double target = static_cast<double>(rng_.uniform()) * total;
    double cumulative = 0.0;
    Token last_positive = candidates_.front().id;
    for (const Candidate& c : candidates_) {
      if (c.weight <= 0.0f) continue;
      cumulative += c.weight;
      last_positive = c.id;
      if (cumulative > target) return c.id;
    }
    return last_positive;  // only reachable through rounding at u close to 1
  }

  // Step 8 over the whole vocabulary (no truncation): weights in one vectorised pass, partial
  // sums per block of kDrawBlock tokens, then the block and the token inside it.
  Token draw_dense() {
    const size_t n = logits_.size();
    weights_.resize(n);
    detail::exp_weights(logits_.data(), weights_.data(), n, max_logit_, inv_temperature_);
    const float* w = weights_.data();
    const size_t blocks = (n + kDrawBlock - 1) / kDrawBlock;
    block_sums_.resize(blocks);
    double total = 0.0;
    for (size_t b = 0; b < blocks; ++b) {
      block_sums_[b] = detail::sum_of(w + b * kDrawBlock, std::min(kDrawBlock, n - b * kDrawBlock));
      total += block_sums_[b];
    }
    const double target = static_cast<double>(rng_.uniform()) * total;
    double cumulative = 0.0;
    for (size_t b = 0; b < blocks; ++b) {
      if (cumulative + block_sums_[b] <= target) {
        cumulative += block_sums_[b];
        continue;
      }
      const size_t end = std::min(n, (b + 1) * kDrawBlock);
      for (size_t i = b * kDrawBlock; i < end; ++i) {
        cumulative += w[i];
        if (w[i] > 0.0f && cumulative > target) return static_cast<Token>(i);
      }
    }
    size_t last = n - 1;  // rounding fallback at u close to 1: the last token of nonzero weight
    while (w[last] <= 0.0f) --last;
    return static_cast<Token>(last);
  }

  SamplerParams params_;
  SamplerRng rng_;
  std::vector<Token> history_;  // tokens seen, oldest first (trimmed to what the window can reach)
  // Per-call working memory, kept to avoid reallocating for every token.
  std::span<const float> logits_;       // [n_vocab] logits after bias and penalties (caller's or modified_logits_)
  std::vector<float> modified_logits_;  // [n_vocab] copy changed by bias and penalties, when any apply
  std::vector<float> weights_;          // [n_vocab] exp((logit - max) / temperature), dense paths only
  std::vector<uint8_t> bins_;           // [n_vocab] top-p histogram bin of each token, dense top-p only
  std::vector<double> block_sums_;      // [ceil(n_vocab / kDrawBlock)] dense draw partial sums
  std::vector<Candidate> candidates_;   // survivors of the truncation steps
  std::vector<Candidate> boundary_;     // tokens of the top-p crossing bin
  std::vector<Token> scratch_tokens_;   // sorted copy of the penalty window
  float max_logit_ = 0.0f;
  float inv_temperature_ = 1.0f;
};

}  // namespace latte
