// `latte inspect FILE.gguf`: the header, metadata, tensor table and totals of a GGUF file. Only the
// header is read (the file is memory-mapped and tensor data is never touched), so a 400 GB model
// answers as fast as a small one. An invalid file exits with status 1 and `error: <what and where>`.
#include "command.hpp"
#include "gguf_report.hpp"
#include "model_report.hpp"
#include "parallel/shard_plan.hpp"

#include <latte/error.hpp>
#include <latte/gguf.hpp>
#include <latte/model.hpp>

#include <iostream>

namespace latte::cli {
namespace {

constexpr const char* usage =
    "usage: latte inspect FILE.gguf [--json] [--tensors | --no-tensors] [--array-items N] [--audit]\n"
    "  --json           machine-readable output\n"
    "  --no-tensors     leave out the tensor table (totals are still printed)\n"
    "  --array-items N  show the first N elements of metadata arrays (default 8)\n"
    "  --audit          map every tensor onto the architecture and list it; exit 1 when the file does\n"
    "                   not fit (a supported model's config and audit summary are shown by default)\n"
    "  --tp N           print the tensor-parallel plan for N ranks (each tensor's split, bytes per rank);\n"
    "                   exit 1 naming the tensor when the model cannot be split N ways\n"
    "  --tp-moe MODE    how the plan divides routed experts: expert (whole experts, default) or tensor\n";

struct InspectOptions {
  std::string path;
  bool json = false;
  bool tensors = true;
  size_t array_items = 8;
  bool audit = false;
  int tp = 0;  // 0: no plan
  MoeSplit tp_moe = MoeSplit::expert_parallel;
};

InspectOptions parse_options(std::span<const std::string> args) {
  Args parser(args);
  InspectOptions options;
  options.json = parser.flag({"--json"});
  options.audit = parser.flag({"--audit"});
  const bool with_tensors = parser.flag({"--tensors"});
  const bool without_tensors = parser.flag({"--no-tensors"});
  if (with_tensors && without_tensors) throw Error(ErrorCode::invalid_argument, "--tensors and --no-tensors conflict");
  options.tensors = !without_tensors;
  if (auto items = parser.take({"--array-items"})) {
    try {
      size_t used = 0;
      options.array_items = std::stoul(*items, &used);
      if (used != items->size()) throw std::invalid_argument(*items);
    } catch (const std::exception&) {
      throw Error(ErrorCode::invalid_argument, "--array-items needs a count, got '" + *items + "'");
    }
  }
  if (auto tp = parser.take({"--tp"})) {
    try {
      size_t used = 0;
      options.tp = std::stoi(*tp, &used);
      if (used != tp->size() || options.tp < 1) throw std::invalid_argument(*tp);
    } catch (const std::exception&) {
      throw Error(ErrorCode::invalid_argument, "--tp needs a positive rank count, got '" + *tp + "'");
    }
  }
  if (auto moe = parser.take({"--tp-moe"})) {
    if (*moe == "expert") {
      options.tp_moe = MoeSplit::expert_parallel;
    } else if (*moe == "tensor") {
      options.tp_moe = MoeSplit::tensor_parallel;
    } else {
      throw Error(ErrorCode::invalid_argument, "--tp-moe is expert or tensor, got '" + *moe + "'");
    }
  }
  const auto positionals = parser.positionals();
  if (positionals.size() != 1) throw Error(ErrorCode::invalid_argument, std::string("expected one file\n") + usage);
  options.path = positionals[0];
  return options;
}

int run_inspect(std::span<const std::string> args) {
  for (const auto& a : args) {
    if (a == "--help" || a == "-h") {
      std::cout << usage;
      return 0;
    }
  }
  const InspectOptions options = parse_options(args);
  const auto file = gguf::File::open(options.path);
  if (options.tp > 0) {
    // The plan only: header and tensor table, no tensor data.
    const ModelConfig config = ModelConfig::from_gguf(file);
    const auto plan = detail::plan_tensor_parallel(file, config, {.world_size = options.tp, .moe = options.tp_moe});
    if (options.json) {
      nlohmann::ordered_json report;
      report["tensor_parallel"] = plan.world_size;
      report["moe_split"] = std::string(detail::moe_split_name(plan.moe));
      report["heads_per_rank"] = plan.heads_per_rank;
      report["experts_per_rank"] = plan.experts_per_rank;
      report["rank_bytes"] = plan.rank_bytes;
      report["total_bytes"] = plan.total_bytes;
      auto& tensors = report["tensors"] = nlohmann::ordered_json::array();
      for (const auto& t : plan.tensors) {
        nlohmann::ordered_json entry;
        entry["name"] = t.name;
        entry["split"] = std::string(detail::shard_kind_name(t.kind));
        entry["rank_bytes"] = t.rank_bytes;
        tensors.push_back(std::move(entry));
      }
      std::cout << report.dump(2) << "\n";
    } else {
      std::cout << plan.describe(options.tensors);
    }
    return 0;
  }
  const TensorTotals totals = tensor_totals(file);
  if (options.json) {
    nlohmann::ordered_json report = header_json(file);
    report["metadata"] = metadata_json(file, options.array_items);
    if (options.tensors) report["tensors"] = tensors_json(file);
    report["totals"] = totals_json(totals);
    bool fits = true;
    if (options.audit || is_supported_model(file)) {
      report["model"] = model_json(file, options.audit);
      fits = report["model"].contains("audit") && report["model"]["audit"]["ok"].get<bool>();
    }
    // Metadata strings are arbitrary bytes: invalid UTF-8 becomes U+FFFD rather than an exception.
    std::cout << report.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
    return options.audit && !fits ? 1 : 0;
  }
  print_header_text(std::cout, file);
  print_metadata_text(std::cout, file, options.array_items);
  if (options.tensors) print_tensors_text(std::cout, file);
  print_totals_text(std::cout, totals);
  if (options.audit || is_supported_model(file)) {
    const bool fits = print_model_text(std::cout, file, options.audit);
    if (options.audit && !fits) return 1;
  }
  return 0;
}

const Registration registration{{"inspect", "print a GGUF file's header, metadata and tensors", run_inspect}};

}  // namespace
}  // namespace latte::cli
