// `latte diagnose`: runs one prompt through two computations (or one and a dump) and names the first
// activation tap where they part ways; `--selftest` checks the GPU kernels against the CPU.
//
//   latte diagnose --model m.gguf --prompt "Hello" --compare cpu:mla,cpu:standard
//   latte diagnose --model m.gguf --prompt "Hello" --compare cpu:mla,tp:2        (tensor parallel, 2 ranks)
//   latte diagnose --model m.gguf --prompt "Hello" --compare cpu:mla,cuda:mla --replay-decisions
//   latte diagnose --model m.gguf --tokens "1 2 3" --dump taps/      (then numpy.load("taps/logits.npy"))
//   latte diagnose --model m.gguf --against hf-taps/                 (a tools/oracle/dump_taps.py dump)
//   latte diagnose --selftest [--model m.gguf] [--device cuda:0] [--list]
//
// Exit status: 0 every tap agrees (selftest: passed), 2 a divergence (selftest: a mismatch), 3 the
// self-test could not run (no CUDA device or a CPU-only build), 1 an error.
#include "command.hpp"
#include "diagnostics/decision_replay.hpp"
#include "token_list.hpp"

#include <latte/attention.hpp>
#include <latte/device.hpp>
#include <latte/diagnostics.hpp>
#include <latte/error.hpp>
#include <latte/model.hpp>
#include <latte/session.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace {

namespace diag = latte::diagnostics;

constexpr int kExitAgree = 0;
constexpr int kExitDiverge = 2;
constexpr int kExitSelftestUnavailable = 3;

void print_usage() {
  std::fputs(
      "usage: latte diagnose --model FILE.gguf (--prompt TEXT | --tokens \"ID ...\")\n"
      "                      [--compare A,B [--replay-decisions]] [--dump DIR] [--against DIR] [--bound X]\n"
      "                      [--threads N]\n"
      "       latte diagnose --selftest [--model FILE.gguf] [--device cuda:N] [--list]\n"
      "Runs the prompt through A and B (each cpu:mla, cpu:standard, cuda:mla, cuda:standard, DEVICE:NAME\n"
      "for any registered attention backend, or tp:N[:NAME] for CPU tensor parallelism over N in-process\n"
      "ranks, backend mla unless NAME is given; default cpu:mla,cpu:standard) and prints every activation tap\n"
      "in forward order with its relative error and cosine similarity, then the first tap whose error\n"
      "exceeds the bound (fp32 1e-4; 2e-2 when a side runs on CUDA or the dump is bf16).\n"
      "  --replay-decisions  run B first, then A (a cpu side) with B's MoE expert choices and DSA index\n"
      "                 selections forced; each forced choice that differs from A's own must be a near-tie\n"
      "                 of A's scores (else exit 2). Compares a bf16 pass with the fp32 reference tap by tap\n"
      "                 even where near-tied scores make the two passes choose differently.\n"
      "  --dump DIR     write A's taps as DIR/<tap>.npy and DIR/index.json\n"
      "  --against DIR  compare A with a dump (its tokens are used unless --prompt/--tokens is given)\n"
      "  --inject-attention-fault LAYER  register the backend 'faulty-mla' (mla with layer LAYER's output\n"
      "                 scaled by 1.5), to check that diagnose finds a known fault\n"
      "  --selftest     run every GPU kernel family against a float64 CPU reference on random data at the\n"
      "                 shapes of --model (its config and weight types), else of the built-in presets\n"
      "  --list         with --selftest: print the cases (no GPU needed)\n"
      "Exit status: 0 all taps agree, 2 divergence (selftest: mismatch), 3 selftest cannot run, 1 error.\n",
      stdout);
}

/// A side of the comparison: "cpu:mla" -> device cpu, backend mla; "cuda:1:standard" -> cuda:1;
/// "tp:2" / "tp:2:standard" -> CPU tensor parallelism over 2 in-process ranks (backend mla by default).
struct Side {
  std::string text;
  latte::Device device;
  std::string attention;
  int tensor_parallel = 1;
};

Side parse_side(const std::string& text) {
  if (text.starts_with("tp:")) {
    const size_t colon = text.find(':', 3);
    const std::string count = text.substr(3, colon == std::string::npos ? std::string::npos : colon - 3);
    const std::string backend = colon == std::string::npos ? "mla" : text.substr(colon + 1);
    int n = 0;
    const bool digits = !count.empty() && count.size() <= 4 &&
                        std::all_of(count.begin(), count.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (digits) n = std::stoi(count);
    if (n < 1 || backend.empty()) {
      throw latte::Error(latte::ErrorCode::invalid_argument,
                         "--compare: '" + text + "' is not tp:N or tp:N:BACKEND with N >= 1 ranks (e.g. tp:2:mla)");
    }
    return {.text = text, .device = latte::Device::cpu(), .attention = backend, .tensor_parallel = n};
  }
  const size_t last = text.rfind(':');
  if (last == std::string::npos || last == 0 || last + 1 == text.size()) {
    throw latte::Error(latte::ErrorCode::invalid_argument,
                       "--compare: '" + text + "' is not DEVICE:BACKEND (e.g. cpu:mla, cuda:standard)");
  }
  return {.text = text, .device = latte::Device::parse(text.substr(0, last)), .attention = text.substr(last + 1)};
}

bool involves_cuda(const Side& s) { return s.device.is_cuda(); }

/// mla with one layer's output scaled: a known, localised fault for testing diagnose itself.
class FaultyBackend : public latte::AttentionBackend {
 public:
  FaultyBackend(std::unique_ptr<latte::AttentionBackend> inner, int layer) : inner_(std::move(inner)), layer_(layer) {}
  std::string_view name() const noexcept override { return "faulty-mla"; }
  latte::KvLayout kv_layout() const override { return inner_->kv_layout(); }
  void prepare(std::span<const latte::AttentionLayerWeights> layers) override { inner_->prepare(layers); }
  void forward(const latte::AttentionInput& input) override {
    inner_->forward(input);
    if (input.layer != layer_) return;
    const size_t n = static_cast<size_t>(input.n_rows) * n_out_per_row_;
    for (size_t i = 0; i < n; ++i) input.out[i] *= 1.5f;
  }
  void set_row_width(size_t w) { n_out_per_row_ = w; }

 private:
  std::unique_ptr<latte::AttentionBackend> inner_;
  int layer_;
  size_t n_out_per_row_ = 0;
};

void register_faulty_backend(int layer) {
  latte::AttentionRegistry::instance().add(
      {.name = "faulty-mla",
       .description = "mla with one layer's output scaled by 1.5 (fault injection for latte diagnose)",
       .supports = [](const latte::ModelConfig&, latte::Device d) { return d.is_cpu(); },
       .create = [layer](const latte::ModelConfig& c, latte::Device d) -> std::unique_ptr<latte::AttentionBackend> {
         auto b = std::make_unique<FaultyBackend>(latte::AttentionRegistry::instance().create("mla", c, d), layer);
         b->set_row_width(static_cast<size_t>(c.n_head) * static_cast<size_t>(c.v_head_dim));
         return b;
       }});
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(shape[i]);
  }
  s += ']';
  return s;
}

int print_report(const diag::ComparisonReport& report, const std::vector<diag::TapRecord>& a, const std::string& what) {
  std::printf("%s\n%-26s %-18s %-10s %-9s\n", what.c_str(), "tap", "shape", "rel err", "cosine");
  for (size_t i = 0; i < report.taps.size(); ++i) {
    const diag::TapComparison& t = report.taps[i];
    std::printf("%-26s %-18s %-10.3g %-9.6f %s%s%s\n", t.name.c_str(), shape_text(a[i].shape).c_str(), t.rel_error,
                t.cosine, t.agrees ? "ok" : "DIVERGES", t.note.empty() ? "" : "  ", t.note.c_str());
  }
  std::printf("%s\n", report.summary().c_str());
  return report.first_divergence ? kExitDiverge : kExitAgree;
}

int run_selftest_command(const std::string& device_text, const std::optional<std::string>& model_path, bool list) {
  const latte::Device device = latte::Device::parse(device_text);
  // The model is only read for its config and weight types: load it on the CPU (a memory map).
  std::optional<latte::Model> model;
  if (model_path) model = latte::Model::load(*model_path);
  if (list) {
    std::fputs(diag::selftest_case_list(model ? &*model : nullptr).c_str(), stdout);
    return kExitAgree;
  }
  const diag::SelftestResult r = model ? diag::run_selftest(device, *model) : diag::run_selftest(device);
  if (!r.ran) {
    std::printf("selftest not run: %s\n", r.reason.c_str());
    return kExitSelftestUnavailable;
  }
  std::fputs(r.table.c_str(), stdout);
  std::printf("selftest %s\n", r.passed ? "passed" : "FAILED");
  return r.passed ? kExitAgree : kExitDiverge;
}

int run_diagnose(std::span<const std::string> argv) {
  latte::cli::Args args(argv);
  if (args.flag({"--help", "-h"})) {
    print_usage();
    return 0;
  }
  const bool selftest = args.flag({"--selftest"});
  const bool list = args.flag({"--list"});
  const bool replay = args.flag({"--replay-decisions"});
  const std::string device = args.take({"--device"}).value_or("cuda:0");
  const auto model_path = args.take({"--model", "-m"});
  const auto prompt = args.take({"--prompt", "-p"});
  const auto tokens_text = args.take({"--tokens", "-t"});
  const auto compare = args.take({"--compare"});
  const auto dump_dir = args.take({"--dump"});
  const auto against_dir = args.take({"--against"});
  const auto bound_text = args.take({"--bound"});
  const auto fault_layer = args.take({"--inject-attention-fault"});
  const int threads = latte::cli::parse_int_option("--threads", args.take({"--threads"}).value_or("0"));
  if (!args.positionals().empty())
    throw latte::Error(latte::ErrorCode::invalid_argument, "unexpected argument " + args.positionals()[0]);
  if (list && !selftest) throw latte::Error(latte::ErrorCode::invalid_argument, "--list goes with --selftest");
  if (selftest) return run_selftest_command(device, model_path, list);

  if (!model_path) throw latte::Error(latte::ErrorCode::invalid_argument, "--model is required");
  if (prompt && tokens_text)
    throw latte::Error(latte::ErrorCode::invalid_argument, "give --prompt or --tokens, not both");
  if (fault_layer) register_faulty_backend(latte::cli::parse_int_option("--inject-attention-fault", *fault_layer));

  std::vector<diag::TapRecord> reference;
  std::vector<latte::Token> dump_tokens;
  if (against_dir) reference = diag::read_tap_dump(*against_dir, &dump_tokens);

  std::vector<Side> sides;
  if (compare) {
    const size_t comma = compare->find(',');
    if (comma == std::string::npos) {
      throw latte::Error(latte::ErrorCode::invalid_argument, "--compare: expected A,B (e.g. cpu:mla,cpu:standard)");
    }
    sides = {parse_side(compare->substr(0, comma)), parse_side(compare->substr(comma + 1))};
  } else {
    sides = {parse_side("cpu:mla")};
    if (!against_dir && !dump_dir) sides.push_back(parse_side("cpu:standard"));
  }

  // Loading the model (once per device) tells us the tokenizer.
  std::vector<latte::Model> models;
  for (const Side& s : sides) {
    models.push_back(latte::Model::load(*model_path, {.device = s.device, .tensor_parallel = s.tensor_parallel}));
  }
  std::vector<latte::Token> tokens;
  if (tokens_text) {
    tokens = latte::cli::parse_token_list(*tokens_text);
  } else if (prompt) {
    tokens = models[0].tokenizer().encode(*prompt, {.add_special = true});
  } else if (!dump_tokens.empty()) {
    tokens = dump_tokens;
  } else {
    throw latte::Error(latte::ErrorCode::invalid_argument, "--prompt or --tokens is required");
  }
  if (tokens.empty()) throw latte::Error(latte::ErrorCode::invalid_argument, "the prompt encodes to no tokens");
  if (against_dir && !dump_tokens.empty() && tokens != dump_tokens) {
    throw latte::Error(latte::ErrorCode::invalid_argument, "the tokens differ from those of the dump " + *against_dir +
                                                               " (omit --prompt/--tokens to use them)");
  }

  std::vector<std::vector<diag::TapRecord>> runs;
  std::optional<latte::detail::DecisionRecorder> decisions;
  if (replay) {
    if (!compare || sides.size() != 2 || !sides[0].device.is_cpu()) {
      throw latte::Error(latte::ErrorCode::invalid_argument,
                         "--replay-decisions needs --compare A,B with A on the cpu (e.g. cpu:mla,cuda:mla)");
    }
    // B first, its decisions recorded; then A as one CPU step with those decisions forced.
    diag::TapRecorder b_taps;
    decisions.emplace(b_taps.observer());
    latte::Session b(models[1], {.n_ctx = static_cast<int>(tokens.size()),
                                 .attention = sides[1].attention,
                                 .logits_all = true,
                                 .n_threads = threads});
    b.set_tap_observer(decisions->observer());
    b.eval(tokens);
    diag::TapRecorder a_taps;
    const latte::TapObserver a_observer = a_taps.observer();
    latte::detail::CpuStepRun a(models[0], sides[0].attention, static_cast<int>(tokens.size()), threads);
    (void)a.eval(tokens, &decisions->decisions(), &a_observer);
    runs = {a_taps.taps(), b_taps.taps()};
  } else {
    for (size_t i = 0; i < sides.size(); ++i) {
      latte::SessionParams params;
      params.attention = sides[i].attention;
      params.n_threads = threads;
      runs.push_back(diag::record_taps(models[i], params, tokens));
    }
  }
  if (dump_dir) {
    diag::write_tap_dump(*dump_dir, runs[0], tokens);
    std::printf("wrote %zu taps of %s to %s\n", runs[0].size(), sides[0].text.c_str(), dump_dir->c_str());
  }

  double bound = diag::kFp32Bound;
  if (std::any_of(sides.begin(), sides.end(), involves_cuda)) bound = diag::kBf16Bound;
  int status = kExitAgree;
  if (bound_text) {
    bound = latte::cli::parse_double_option("--bound", *bound_text);
    if (!(bound > 0)) {
      throw latte::Error(latte::ErrorCode::invalid_argument, "--bound: '" + *bound_text + "' is not a positive number");
    }
  }
  if (sides.size() == 2) {
    const auto report = diag::compare_taps(runs[1], runs[0], bound);
    status =
        print_report(report, runs[1],
                     sides[1].text + " against " + sides[0].text + " (" + std::to_string(tokens.size()) + " tokens)");
    if (decisions) {
      const latte::detail::ForcedDecisions& forced = decisions->decisions();
      std::printf("decisions of %s replayed on %s: %s\n", sides[1].text.c_str(), sides[0].text.c_str(),
                  forced.summary().c_str());
      if (!forced.failures().empty()) status = kExitDiverge;
    }
  }
  if (against_dir) {
    double dump_bound = bound_text ? bound : diag::kFp32Bound;
    if (!bound_text) {
      // The dump says how it was computed; anything but float32 gets the bf16 bound.
      if (std::any_of(sides.begin(), sides.end(), involves_cuda)) dump_bound = diag::kBf16Bound;
      dump_bound = std::max(dump_bound, diag::tap_dump_bound(*against_dir));
    }
    const auto report = diag::compare_taps(runs[0], reference, dump_bound);
    const int s = print_report(report, runs[0], sides[0].text + " against the dump " + *against_dir);
    if (s != kExitAgree) status = s;
  }
  return status;
}

const latte::cli::Registration reg{
    {"diagnose", "find the first activation tap where two computations diverge; GPU self-test", run_diagnose}};

}  // namespace
