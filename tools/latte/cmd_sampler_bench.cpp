// `latte sampler-bench`: time Sampler::sample() on language-model-shaped random logits.
//
//   latte sampler-bench --vocab 155136 --iterations 2000
//
// For each chain it prints the median and 90th percentile time of one sample() call (µs) over
// `iterations` calls cycling through 16 logit vectors, and the floor: the median time of one
// read-only pass over the same logits (a float sum), which is what any sampler must at least do.
#include "command.hpp"

#include <latte/error.hpp>
#include <latte/sampler.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Chain {
  const char* name;
  latte::SamplerParams params;
};

struct Timing {
  double median_us;
  double p90_us;
};

Timing summarize(std::vector<double>& samples_us) {
  std::sort(samples_us.begin(), samples_us.end());
  return {samples_us[samples_us.size() / 2], samples_us[samples_us.size() * 9 / 10]};
}

// Logits shaped like a language model's: a Gaussian bulk (std 2.5) and a few tokens far above it.
std::vector<std::vector<float>> make_logits(size_t vocab, size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> bulk(0.0f, 2.5f);
  std::uniform_real_distribution<float> boost(6.0f, 14.0f);
  std::uniform_int_distribution<size_t> pick(0, vocab - 1);
  std::vector<std::vector<float>> all(count, std::vector<float>(vocab));
  for (auto& logits : all) {
    for (float& l : logits) l = bulk(rng);
    for (int i = 0; i < 24; ++i) logits[pick(rng)] += boost(rng);
  }
  return all;
}

// A positive count from option `name`'s text; Error(invalid_argument) otherwise.
size_t parse_count(const std::string& name, const std::string& text) {
  size_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value == 0)
    throw latte::Error(latte::ErrorCode::invalid_argument, name + " must be a positive integer, got '" + text + "'");
  return value;
}

int run_sampler_bench(std::span<const std::string> raw) {
  latte::cli::Args args(raw);
  if (args.flag({"--help", "-h"})) {
    std::printf(
        "usage: latte sampler-bench [--vocab N]... [--iterations N]\n"
        "  --vocab N        vocabulary size; repeatable (default: 155136 and 129280)\n"
        "  --iterations N   sample() calls timed per chain (default 2000)\n");
    return 0;
  }
  std::vector<size_t> vocabs;
  while (auto v = args.take({"--vocab"})) vocabs.push_back(parse_count("--vocab", *v));
  if (vocabs.empty()) vocabs = {155136, 129280};
  const size_t iterations = parse_count("--iterations", args.take({"--iterations"}).value_or("2000"));
  if (!args.positionals().empty())
    throw latte::Error(latte::ErrorCode::invalid_argument, "sampler-bench takes no positional arguments");

  const std::vector<Chain> chains{
      {"greedy (temperature 0)", {.temperature = 0.0f}},
      {"default (T 0.8, top-k 40, top-p 0.95, min-p 0.05)", {}},
      {"default + repeat/frequency/presence penalties",
       {.repeat_penalty = 1.1f, .frequency_penalty = 0.2f, .presence_penalty = 0.2f}},
      {"top-p 0.95 over the full vocabulary (no top-k)",
       {.temperature = 0.7f, .top_k = 0, .top_p = 0.95f, .min_p = 0.0f}},
      {"min-p 0.05 only", {.top_k = 0, .top_p = 1.0f, .min_p = 0.05f}},
      {"temperature only (draw from the full vocabulary)",
       {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f}},
  };
  for (size_t vocab : vocabs) {
    const auto logits = make_logits(vocab, 16, 1234);
    std::vector<double> times(iterations);
    volatile float sink = 0.0f;
    for (size_t i = 0; i < iterations; ++i) {  // the floor: one read of the logits
      const auto& l = logits[i % logits.size()];
      const auto start = Clock::now();
      float lanes[16] = {};  // independent accumulators so the pass runs at load bandwidth
      for (size_t j = 0; j + 16 <= l.size(); j += 16) {
        for (size_t k = 0; k < 16; ++k) lanes[k] += l[j + k];
      }
      for (float v : lanes) sink = sink + v;
      times[i] = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    }
    const Timing floor = summarize(times);
    std::printf("vocab %zu: floor (one pass reading %zu KiB of logits) median %.1f us\n", vocab,
                vocab * sizeof(float) / 1024, floor.median_us);
    for (const Chain& chain : chains) {
      latte::Sampler sampler(chain.params);
      for (int w = 0; w < 20; ++w) sampler.sample(logits[static_cast<size_t>(w) % logits.size()]);  // warm up
      for (size_t i = 0; i < iterations; ++i) {
        const auto& l = logits[i % logits.size()];
        if (i % 64 == 0) sampler.reset();  // keep the penalty window realistic
        const auto start = Clock::now();
        const latte::Token t = sampler.sample(l);
        times[i] = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
        sink = sink + static_cast<float>(t);
      }
      const Timing t = summarize(times);
      std::printf("  %-52s median %7.1f us  p90 %7.1f us  (%.1fx floor)\n", chain.name, t.median_us, t.p90_us,
                  t.median_us / floor.median_us);
    }
  }
  return 0;
}

const latte::cli::Registration reg{
    {"sampler-bench", "time Sampler::sample() on 155k/129k-token random logits", run_sampler_bench}};

}  // namespace
