// `latte bench`: prompt-processing and generation speed of a model through the public API, as a
// llama-bench-like table, each figure next to its physical floor (bench_floor.hpp).
//
//   latte bench --model m.gguf -p 512 -n 128 -d 0,4096 --attention mla,standard --batch 1,8 -r 3
//
// Tests, for every attention backend and depth D (untimed prefill of D random tokens first):
//   ppP @ dD   one eval of P random tokens (the session chunks it as usual)
//   tgN @ dD   N evals of one token each
// and, for every --batch B > 1: B sessions each prefilled (untimed, eval_batch) with P random
// tokens, then N decode_batch steps; reported as aggregate generated t/s ("pp512+tg128 x8").
// Every test runs once untimed (warm-up), then -r times; t/s is the mean ± sample sd over reps.
// --tp 1,2 runs every test for each tensor-parallel degree (the model loaded once per degree, and per
// --tp-moe split for degrees > 1) and ends with one scaling line per test and degree: speedup =
// TP=N t/s / TP=1 t/s, efficiency = speedup / N. The floor of a TP=N row uses N times the measured
// bandwidth (every rank reads its share of the weights from its own memory).
#include "bench_floor.hpp"
#include "command.hpp"
#include "core/environment.hpp"
#include "token_list.hpp"

#include <latte/attention.hpp>
#include <latte/batch.hpp>
#include <latte/device.hpp>
#include <latte/error.hpp>
#include <latte/model.hpp>
#include <latte/session.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#ifdef LATTE_WITH_CUDA
#include "cuda/copy_bandwidth.hpp"
#include "kernel_bench.hpp"
#endif

namespace latte::cli {
namespace {

constexpr int kChunk = 256;  // the session's prefill chunk (tokens per forward call)

void print_usage() {
  std::fputs(
      "usage: latte bench --model FILE.gguf [-p 512] [-n 128] [-d 0] [--attention auto] [--batch 1]\n"
      "                   [-r 5] [--device cpu|cuda:N] [--threads N] [--seed S] [--json] [--kernels]\n"
      "                   [--tp 1,2] [--tp-moe expert,tensor]\n"
      "Times prompt processing (ppP: one eval of P tokens) and generation (tgN: N one-token evals)\n"
      "after an untimed prefill of DEPTH tokens (@ dDEPTH), on random valid token ids. -p, -n, -d,\n"
      "--attention and --batch take comma-separated lists. --batch B > 1 adds a batched test: B\n"
      "sessions prefilled with P-token prompts, then N decode_batch steps (aggregate generated t/s).\n"
      "Each test: one warm-up run, then -r timed runs (t/s mean ± sd). Next to each figure: the floor\n"
      "(bytes the step must move / measured copy bandwidth) and the fraction of it reached.\n"
      "--json prints one JSON object instead of the table. --kernels (CUDA devices) also times the\n"
      "kernel-bench cases at the model's shapes (only those with -p 0 -n 0).\n"
      "--tp N,M,...: run the tests for each tensor-parallel degree (cuda:N uses GPUs N..N+degree-1) and\n"
      "print the scaling against the first degree (speedup, efficiency = speedup / degree ratio).\n"
      "--tp-moe expert,tensor: how degrees > 1 split the routed experts (default expert).\n",
      stdout);
}

std::vector<int> parse_int_list(const std::string& option, const std::string& text, int min_value) {
  std::vector<int> out;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const int v = parse_int_option(option, item);
    if (v < min_value) {
      throw Error(ErrorCode::invalid_argument,
                  option + ": " + std::to_string(v) + " is below the minimum " + std::to_string(min_value));
    }
    out.push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::vector<std::string> parse_name_list(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    out.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

struct Options {
  std::string model_path;
  std::vector<int> prompts{512}, gens{128}, depths{0}, batches{1};
  std::vector<std::string> attentions{"auto"};
  int reps = 5;
  std::string device = "cpu";
  int threads = 0;
  uint64_t seed = 42;
  bool json = false;
  bool kernels = false;
  std::vector<int> tps{1};                                      ///< tensor-parallel degrees
  std::vector<MoeSplit> moe_splits{MoeSplit::expert_parallel};  ///< for degrees > 1
};

/// One row of the table.
struct TestResult {
  int tp = 1;                                ///< tensor-parallel degree
  MoeSplit moe = MoeSplit::expert_parallel;  ///< with tp > 1
  std::string attention{};                   ///< resolved backend name
  std::string name{};                        ///< "pp512", "tg128 @ d4096", "pp512+tg128 x8"
  int n_prompt = 0, n_gen = 0, depth = 0, batch = 1;
  std::vector<double> tps{};  ///< per timed rep, tokens per second
  double floor_bytes = 0;     ///< bytes the timed part must move at least
  double floor_tokens = 0;    ///< tokens the timed part produces (t/s numerator)
  [[nodiscard]] double mean() const { return std::accumulate(tps.begin(), tps.end(), 0.0) / tps.size(); }
  [[nodiscard]] double sd() const {
    if (tps.size() < 2) return 0;
    const double m = mean();
    double ss = 0;
    for (double x : tps) ss += (x - m) * (x - m);
    return std::sqrt(ss / static_cast<double>(tps.size() - 1));
  }
};

class Bench {
 public:
  Bench(const Options& o, Model model, double bandwidth)
      : opts_(o), model_(std::move(model)), weights_(count_weight_bytes(model_)), bandwidth_(bandwidth), rng_(o.seed) {}

  const WeightBytes& weights() const { return weights_; }
  double bandwidth() const { return bandwidth_; }

  std::vector<TestResult> run_all(const std::function<void(const TestResult&)>& on_result) {
    std::vector<TestResult> results;
    for (const std::string& attention : opts_.attentions) {
      for (int depth : opts_.depths) {
        for (int p : opts_.prompts) {
          if (p > 0 && std::count(opts_.batches.begin(), opts_.batches.end(), 1)) {
            results.push_back(run_prompt(attention, p, depth));
            on_result(results.back());
          }
        }
        for (int n : opts_.gens) {
          if (n > 0 && std::count(opts_.batches.begin(), opts_.batches.end(), 1)) {
            results.push_back(run_generation(attention, n, depth));
            on_result(results.back());
          }
        }
      }
      for (int b : opts_.batches) {
        if (b < 2) continue;
        for (int p : opts_.prompts) {
          for (int n : opts_.gens) {
            if (n == 0) continue;
            results.push_back(run_batched(attention, b, std::max(p, 1), n));
            on_result(results.back());
          }
        }
      }
    }
    return results;
  }

 private:
  std::vector<Token> random_tokens(int n) {
    std::uniform_int_distribution<Token> pick(0, model_.config().n_vocab - 1);
    std::vector<Token> t(static_cast<size_t>(n));
    for (Token& x : t) x = pick(rng_);
    return t;
  }

  // every test's context (depth + p, depth + n, p + n) fits an int: parse_options checked the largest
  SessionParams session_params(const std::string& attention, int n_ctx, int threads) const {
    return {.n_ctx = std::max(n_ctx, 1), .attention = attention, .n_threads = threads};
  }

  /// Untimed prefill of `depth` random tokens.
  void prefill(Session& s, int depth) {
    if (depth > 0) s.eval(random_tokens(depth));
  }

  template <class Body>
  void timed_reps(TestResult& r, double tokens, Body&& body) {
    body();  // warm-up: pages the weights in, sizes the caches
    for (int rep = 0; rep < opts_.reps; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      body();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      r.tps.push_back(tokens / s);
    }
    r.floor_tokens = tokens;
  }

  static std::string at_depth(int depth) { return depth > 0 ? " @ d" + std::to_string(depth) : ""; }

  TestResult run_prompt(const std::string& attention, int p, int depth) {
    Session s(model_, session_params(attention, depth + p, opts_.threads));
    TestResult r{.attention = s.backend_name(),
                 .name = "pp" + std::to_string(p) + at_depth(depth),
                 .n_prompt = p,
                 .depth = depth};
    const KvBytes kv = count_kv_bytes(model_, r.attention);
    for (int start = 0; start < p; start += kChunk) {  // each chunk reads the weights and the cache once
      const int len = std::min(kChunk, p - start);
      r.floor_bytes += weights_.per_step(len) + kv.bytes_read(depth + start + len);
    }
    prefill(s, depth);
    timed_reps(r, p, [&] {
      s.truncate(depth);
      s.eval(random_tokens(p));
    });
    return r;
  }

  TestResult run_generation(const std::string& attention, int n, int depth) {
    Session s(model_, session_params(attention, depth + n, opts_.threads));
    TestResult r{
        .attention = s.backend_name(), .name = "tg" + std::to_string(n) + at_depth(depth), .n_gen = n, .depth = depth};
    const KvBytes kv = count_kv_bytes(model_, r.attention);
    for (int i = 0; i < n; ++i) r.floor_bytes += weights_.per_step(1) + kv.bytes_read(depth + i + 1);
    prefill(s, depth);
    timed_reps(r, n, [&] {
      s.truncate(depth);
      const std::vector<Token> tokens = random_tokens(n);
      for (const Token& t : tokens) s.eval(std::span(&t, 1));
    });
    return r;
  }

  TestResult run_batched(const std::string& attention, int batch, int p, int n) {
    // Only sessions[0]'s thread pool works in a batch: the others get one thread each.
    std::vector<std::unique_ptr<Session>> sessions;
    std::vector<Session*> ptrs;
    for (int i = 0; i < batch; ++i) {
      sessions.push_back(
          std::make_unique<Session>(model_, session_params(attention, p + n, i == 0 ? opts_.threads : 1)));
      ptrs.push_back(sessions.back().get());
    }
    TestResult r{.attention = sessions[0]->backend_name(),
                 .name = "pp" + std::to_string(p) + "+tg" + std::to_string(n) + " x" + std::to_string(batch),
                 .n_prompt = p,
                 .n_gen = n,
                 .batch = batch};
    const KvBytes kv = count_kv_bytes(model_, r.attention);
    for (int i = 0; i < n; ++i) r.floor_bytes += weights_.per_step(batch) + batch * kv.bytes_read(p + i + 1);
    std::vector<std::vector<Token>> prompts;
    std::vector<std::span<const Token>> lists;
    for (int i = 0; i < batch; ++i) prompts.push_back(random_tokens(p));
    for (const auto& t : prompts) lists.emplace_back(t);
    eval_batch(ptrs, lists);
    timed_reps(r, static_cast<double>(batch) * n, [&] {
      for (Session* s : ptrs) s->truncate(p);
      for (int i = 0; i < n; ++i) decode_batch(ptrs, random_tokens(batch));
    });
    return r;
  }

  const Options& opts_;
  Model model_;
  WeightBytes weights_;
  double bandwidth_;  // bytes per second, read + write
  std::mt19937_64 rng_;
};

std::string human_size(double bytes) {
  char buf[32];
  if (bytes >= 1 << 30) {
    std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / (1 << 30));
  } else {
    std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / (1 << 20));
  }
  return buf;
}

std::string human_count(double n) {
  char buf[32];
  if (n >= 1e9) {
    std::snprintf(buf, sizeof buf, "%.2f B", n / 1e9);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f M", n / 1e6);
  }
  return buf;
}

double floor_tps(const TestResult& r, double bandwidth) { return r.floor_tokens / (r.floor_bytes / bandwidth); }

/// The longest context a test of the lists needs (the largest sums), and which options ask for it.
struct ContextNeed {
  int64_t positions;
  std::string what;  ///< e.g. "-d and -p (4096 + 512)"
};
std::vector<ContextNeed> context_needs(const Options& o) {
  auto largest = [](const std::vector<int>& v) { return static_cast<int64_t>(*std::max_element(v.begin(), v.end())); };
  auto need = [](int64_t a, int64_t b, const std::string& options) {
    return ContextNeed{a + b, options + " (" + std::to_string(a) + " + " + std::to_string(b) + ")"};
  };
  const int64_t d = largest(o.depths), p = largest(o.prompts), n = largest(o.gens);
  std::vector<ContextNeed> needs = {need(d, p, "-d and -p"), need(d, n, "-d and -n")};
  if (largest(o.batches) > 1) needs.push_back(need(std::max<int64_t>(p, 1), n, "-p and -n"));  // prompts of 1 or more
  return needs;
}

Options parse_options(std::span<const std::string> argv, bool& help) {
  Args args(argv);
  Options o;
  help = args.flag({"--help", "-h"});
  if (help) return o;
  if (auto v = args.take({"--model", "-m"})) o.model_path = *v;
  if (auto v = args.take({"-p", "--n-prompt"})) o.prompts = parse_int_list("-p", *v, 0);
  if (auto v = args.take({"-n", "--n-gen"})) o.gens = parse_int_list("-n", *v, 0);
  if (auto v = args.take({"-d", "--depth"})) o.depths = parse_int_list("-d", *v, 0);
  if (auto v = args.take({"--batch", "-b"})) o.batches = parse_int_list("--batch", *v, 1);
  if (auto v = args.take({"--attention", "-a"})) o.attentions = parse_name_list(*v);
  if (auto v = args.take({"-r", "--repetitions"})) o.reps = parse_int_list("-r", *v, 1).at(0);
  if (auto v = args.take({"--device"})) o.device = *v;
  if (auto v = args.take({"--threads", "-t"})) o.threads = parse_int_list("--threads", *v, 0).at(0);
  if (auto v = args.take({"--seed"})) o.seed = static_cast<uint64_t>(parse_int_list("--seed", *v, 0).at(0));
  if (auto v = args.take({"--tp"})) o.tps = parse_int_list("--tp", *v, 1);
  if (auto v = args.take({"--tp-moe"})) {
    o.moe_splits.clear();
    for (const std::string& name : parse_name_list(*v)) {
      if (name == "expert") {
        o.moe_splits.push_back(MoeSplit::expert_parallel);
      } else if (name == "tensor") {
        o.moe_splits.push_back(MoeSplit::tensor_parallel);
      } else {
        throw Error(ErrorCode::invalid_argument, "--tp-moe: expert or tensor, got '" + name + "'");
      }
    }
  }
  o.json = args.flag({"--json"});
  o.kernels = args.flag({"--kernels"});
  const auto rest = args.positionals();
  if (!rest.empty()) throw Error(ErrorCode::invalid_argument, "bench: unexpected argument '" + rest[0] + "'");
  if (o.model_path.empty()) throw Error(ErrorCode::invalid_argument, "bench: --model is required");
  const bool any_prompt = std::any_of(o.prompts.begin(), o.prompts.end(), [](int p) { return p > 0; });
  const bool any_gen = std::any_of(o.gens.begin(), o.gens.end(), [](int n) { return n > 0; });
  if (!any_prompt && !any_gen && !o.kernels) {
    throw Error(ErrorCode::invalid_argument, "bench: -p and -n are all 0: nothing to run");
  }
  // every test's context fits a session, checked before the model loads
  for (const ContextNeed& need : context_needs(o)) context_positions(need.positions, "bench: " + need.what);
  return o;
}

/// A bench measures the model within the context it was trained for: a test that needs more positions than
/// {arch}.context_length is refused (a prompt of 10^8 tokens would otherwise run for days on a CPU).
void check_trained_context(const Options& o, int trained) {
  if (trained <= 0) return;
  for (const ContextNeed& need : context_needs(o)) {
    if (need.positions > trained) {
      throw Error(ErrorCode::context_overflow, "bench: " + need.what + " needs " + std::to_string(need.positions) +
                                                   " positions, more than the model's trained context of " +
                                                   std::to_string(trained) + " (its context_length)");
    }
  }
}

int run_bench(std::span<const std::string> argv) {
  bool help = false;
  const Options o = parse_options(argv, help);
  if (help) {
    print_usage();
    return 0;
  }
  const Device device = Device::parse(o.device);
  if (o.kernels && o.json) throw Error(ErrorCode::invalid_argument, "bench: --kernels prints a table; drop --json");
  if (o.kernels && !device.is_cuda()) {
    throw Error(ErrorCode::invalid_argument, "bench: --kernels times CUDA kernels and needs --device cuda:N");
  }
#ifndef LATTE_WITH_CUDA
  if (o.kernels) throw Error(ErrorCode::unsupported, "bench: --kernels needs a build with CUDA (LATTE_CUDA=ON)");
#endif
  Model model = Model::load(o.model_path,
                            {.device = device, .tensor_parallel = o.tps.front(), .moe_split = o.moe_splits.front()});
  for (const std::string& a : o.attentions) (void)resolve_attention_backend(a, model.config(), device);
  check_trained_context(o, model.config().context_length);
  [[maybe_unused]] const bool any_test = std::any_of(o.prompts.begin(), o.prompts.end(), [](int p) { return p > 0; }) ||
                                         std::any_of(o.gens.begin(), o.gens.end(), [](int n) { return n > 0; });
#ifdef LATTE_WITH_CUDA
  if (o.kernels && !any_test) {  // -p 0 -n 0 --kernels: only the kernels, at the model's shapes
    return run_kernel_bench_cases(kernel_bench_shapes(model.config()), {.device = device.index});
  }
#endif
  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  double bandwidth = 0;
  std::string bandwidth_source;
  if (device.is_cuda()) {
#ifdef LATTE_WITH_CUDA
    bandwidth = cuda::measure_copy_bandwidth(device.index);
    bandwidth_source = "device-to-device cudaMemcpy, 1 GiB";
#endif
  } else {
    bandwidth = measure_host_copy_bandwidth(threads);
    bandwidth_source = "host memcpy, 128 MiB, " + std::to_string(threads) + " thread" + (threads > 1 ? "s" : "");
  }

  const ModelConfig& c = model.config();
  const std::string model_name = std::string(architecture_name(c.arch)) + " " +
                                 (c.name.empty() ? std::filesystem::path(o.model_path).stem().string() : c.name);
  // One run per degree (and MoE split for degrees > 1); the first reuses the model loaded above.
  struct Degree {
    int tp;
    MoeSplit moe;
  };
  std::vector<Degree> degrees;
  for (int tp : o.tps) {
    if (tp == 1) {
      degrees.push_back({1, MoeSplit::expert_parallel});
    } else {
      for (MoeSplit moe : o.moe_splits) degrees.push_back({tp, moe});
    }
  }
  auto degree_device = [&](const Degree& d) {
    if (d.tp == 1) return device.to_string();
    // cuda:0-1 (GPUs 0 and 1), cpu x2 (two in-process ranks); "tpMoE": experts split by width
    const std::string ranks = device.is_cuda() ? device.to_string() + "-" + std::to_string(device.index + d.tp - 1)
                                               : device.to_string() + " x" + std::to_string(d.tp);
    return ranks + (d.moe == MoeSplit::tensor_parallel ? " tpMoE" : "");
  };
  Bench bench(o, model, bandwidth);
  const WeightBytes& w = bench.weights();
  const std::string size = human_size(w.all), params = human_count(static_cast<double>(w.n_params));
  const std::string environment = latte::detail::environment_summary();  // the LATTE_* settings besides the defaults
  if (!o.json) {
    std::printf("copy bandwidth: %.1f GB/s (read + write; %s)\n", bandwidth / 1e9, bandwidth_source.c_str());
    std::printf(
        "active weights per decoded token: %.1f MiB (%d of %d routed experts, shared, dense, attention, "
        "head, one embedding row)\n\n",
        w.per_step(1) / (1 << 20), w.n_expert_used, w.n_expert);
    if (!environment.empty()) std::printf("environment: %s\n\n", environment.c_str());
    std::printf("| %-28s | %10s | %9s | %-7s | %-9s | %-22s | %18s | %10s | %7s |\n", "model", "size", "params",
                "device", "attention", "test", "t/s", "floor t/s", "floor %");
    std::printf("| %s | %s: | %s: | %s | %s | %s | %s: | %s: | %s: |\n", std::string(28, '-').c_str(),
                std::string(9, '-').c_str(), std::string(8, '-').c_str(), std::string(7, '-').c_str(),
                std::string(9, '-').c_str(), std::string(22, '-').c_str(), std::string(17, '-').c_str(),
                std::string(9, '-').c_str(), std::string(6, '-').c_str());
    std::fflush(stdout);
  }
  std::vector<TestResult> results;
  for (size_t di = 0; di < degrees.size(); ++di) {
    const Degree& d = degrees[di];
    const std::string device_name = degree_device(d);
    const double degree_bandwidth = bandwidth * d.tp;
    auto print_row = [&](const TestResult& r) {
      if (o.json) return;
      char tps[64];
      std::snprintf(tps, sizeof tps, "%.2f ± %.2f", r.mean(), r.sd());
      const double floor = floor_tps(r, degree_bandwidth);
      std::printf("| %-28s | %10s | %9s | %-7s | %-9s | %-22s | %18s | %10.2f | %6.1f%% |\n", model_name.c_str(),
                  size.c_str(), params.c_str(), device_name.c_str(), r.attention.c_str(), r.name.c_str(), tps, floor,
                  100.0 * r.mean() / floor);
      std::fflush(stdout);
    };
    std::vector<TestResult> part;
    if (di == 0 && d.tp == o.tps.front()) {
      part = bench.run_all(print_row);
    } else {
      if (!o.json) {
        std::fprintf(stderr, "bench: loading %s with tensor_parallel = %d (%s MoE)\n", o.model_path.c_str(), d.tp,
                     d.moe == MoeSplit::tensor_parallel ? "tensor-parallel" : "expert-parallel");
      }
      Bench degree_bench(o, Model::load(o.model_path, {.device = device, .tensor_parallel = d.tp, .moe_split = d.moe}),
                         bandwidth);
      part = degree_bench.run_all(print_row);
    }
    for (TestResult& r : part) {
      r.tp = d.tp;
      r.moe = d.moe;
      results.push_back(std::move(r));
    }
  }
  // Scaling of every test against the same test at the first degree.
  auto split_label = [](const TestResult& r) {
    if (r.tp == 1) return "";
    return r.moe == MoeSplit::tensor_parallel ? " (tensor-parallel MoE)" : " (expert-parallel MoE)";
  };
  if (!o.json && degrees.size() > 1) {
    std::printf("\n");
    for (const TestResult& r : results) {
      if (r.tp == degrees.front().tp && r.moe == degrees.front().moe) continue;
      for (const TestResult& base : results) {
        if (base.tp != degrees.front().tp || base.moe != degrees.front().moe || base.name != r.name ||
            base.attention != r.attention) {
          continue;
        }
        const double speedup = r.mean() / base.mean();
        const double ratio = static_cast<double>(r.tp) / base.tp;
        char efficiency[48] = "";  // speedup / degree ratio; none between two splits of one degree
        if (r.tp != base.tp)
          std::snprintf(efficiency, sizeof efficiency, ", efficiency %.0f%%", 100.0 * speedup / ratio);
        std::printf("scaling %-9s %-22s TP=%d%s %.2f t/s / TP=%d%s %.2f t/s: speedup %.2fx%s\n", r.attention.c_str(),
                    r.name.c_str(), r.tp, split_label(r), r.mean(), base.tp, split_label(base), base.mean(), speedup,
                    efficiency);
      }
    }
  }

  if (o.json) {
    nlohmann::json j{{"model", model_name},
                     {"file", o.model_path},
                     {"size_bytes", w.all},
                     {"params", w.n_params},
                     {"device", device.to_string()},
                     {"threads", threads},
                     {"copy_bandwidth_bytes_per_s", bandwidth},
                     {"bandwidth_source", bandwidth_source},
                     {"active_weight_bytes_per_token", w.per_step(1)},
                     {"repetitions", o.reps},
                     {"seed", o.seed},
                     {"environment", environment},
                     {"tests", nlohmann::json::array()}};
    for (const TestResult& r : results) {
      const double floor = floor_tps(r, bandwidth * r.tp);
      j["tests"].push_back({{"tensor_parallel", r.tp},
                            {"moe_split", r.moe == MoeSplit::tensor_parallel ? "tensor" : "expert"},
                            {"attention", r.attention},
                            {"test", r.name},
                            {"n_prompt", r.n_prompt},
                            {"n_gen", r.n_gen},
                            {"depth", r.depth},
                            {"batch", r.batch},
                            {"tokens_per_s", r.mean()},
                            {"tokens_per_s_sd", r.sd()},
                            {"samples_tokens_per_s", r.tps},
                            {"floor_bytes", r.floor_bytes},
                            {"floor_tokens_per_s", floor},
                            {"floor_fraction", r.mean() / floor}});
    }
    std::printf("%s\n", j.dump(2).c_str());
  }
#ifdef LATTE_WITH_CUDA
  if (o.kernels) {
    if (!o.json) std::printf("\nkernels at this model's shapes:\n");
    return run_kernel_bench_cases(kernel_bench_shapes(model.config()), {.device = device.index});
  }
#endif
  return 0;
}

const Registration reg{{"bench", "time prompt processing and generation against the memory floor", run_bench}};

}  // namespace
}  // namespace latte::cli
