// A brute-force reference of the sampling chain for tests, written independently of
// include/latte/sampler.hpp: double precision, std::exp/std::log, full sorts, textbook definitions.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <utility>
#include <vector>

namespace latte::test {

/// (token, probability), sorted by token id.
using ReferenceDistribution = std::vector<std::pair<int32_t, double>>;

struct ReferenceChain {
  double temperature = 1.0;
  int top_k = 0;           // 0: off
  double top_p = 1.0;      // 1: off
  double min_p = 0.0;      // 0: off
  double typical_p = 1.0;  // 1: off
};

/// Token ids sorted by decreasing logit, ties by increasing id; -inf logits left out.
inline std::vector<int32_t> reference_rank(const std::vector<double>& logits) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] != -std::numeric_limits<double>::infinity()) ids.push_back(static_cast<int32_t>(i));
  }
  std::sort(ids.begin(), ids.end(),
            [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  return ids;
}

/// softmax(logits / T) restricted to `ids`, in the order of `ids`.
inline std::vector<double> reference_softmax(const std::vector<double>& logits, const std::vector<int32_t>& ids,
                                             double temperature) {
  double max_logit = -std::numeric_limits<double>::infinity();
  for (int32_t id : ids) max_logit = std::max(max_logit, logits[id]);
  std::vector<double> p;
  double z = 0.0;
  for (int32_t id : ids) {
    p.push_back(std::exp((logits[id] - max_logit) / temperature));
    z += p.back();
  }
  for (double& v : p) v /= z;
  return p;
}

/// The distribution after temperature, top-k, top-p, min-p and typical-p (in that order, each
/// renormalising), by the textbook definitions.
inline ReferenceDistribution reference_distribution(const std::vector<double>& logits, const ReferenceChain& c) {
  std::vector<int32_t> ids = reference_rank(logits);
  if (c.top_k > 0 && static_cast<size_t>(c.top_k) < ids.size()) ids.resize(static_cast<size_t>(c.top_k));
  std::vector<double> p = reference_softmax(logits, ids, c.temperature);
  if (c.top_p < 1.0) {  // smallest prefix (most probable first) with mass >= top_p
    double cumulative = 0.0;
    size_t keep = ids.size();
    for (size_t i = 0; i < ids.size(); ++i) {
      cumulative += p[i];
      if (cumulative >= c.top_p) {
        keep = i + 1;
        break;
      }
    }
    ids.resize(keep);
    p = reference_softmax(logits, ids, c.temperature);
  }
  if (c.min_p > 0.0) {
    const double p_max = *std::max_element(p.begin(), p.end());
    std::vector<int32_t> kept;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (p[i] >= c.min_p * p_max) kept.push_back(ids[i]);
    }
    ids = kept;
    p = reference_softmax(logits, ids, c.temperature);
  }
  if (c.typical_p < 1.0) {
    double entropy = 0.0;
    for (double v : p) entropy -= v > 0.0 ? v * std::log(v) : 0.0;
    std::vector<size_t> order(ids.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    const auto deviation = [&](size_t i) { return std::abs(-std::log(p[i]) - entropy); };
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      const double da = deviation(a), db = deviation(b);
      return da < db || (da == db && a < b);  // `a < b` in rank order: higher logit, then lower id
    });
    std::vector<int32_t> kept;
    double cumulative = 0.0;
    for (size_t i : order) {
      kept.push_back(ids[i]);
      cumulative += p[i];
      if (cumulative >= c.typical_p) break;
    }
    ids = kept;
    p = reference_softmax(logits, ids, c.temperature);
  }
  ReferenceDistribution out;
  for (size_t i = 0; i < ids.size(); ++i) out.emplace_back(ids[i], p[i]);
  std::sort(out.begin(), out.end());
  return out;
}

/// Logits shaped like a language model's: a Gaussian bulk (std 2.5) and a few tokens far above it.
inline std::vector<float> realistic_logits(size_t n_vocab, std::mt19937_64& rng) {
  std::normal_distribution<float> bulk(0.0f, 2.5f);
  std::uniform_real_distribution<float> boost(6.0f, 14.0f);
  std::uniform_int_distribution<size_t> pick(0, n_vocab - 1);
  std::vector<float> logits(n_vocab);
  for (float& l : logits) l = bulk(rng);
  for (int i = 0; i < 24; ++i) logits[pick(rng)] += boost(rng);
  return logits;
}

inline std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

/// A fresh seed for a test's random inputs (report it with CAPTURE so a failure can be replayed).
inline uint64_t fresh_seed() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

}  // namespace latte::test
