// `latte inspect FILE.gguf`: the header, metadata, tensor table and totals of a GGUF file. Only the
// header is read (the file is memory-mapped and tensor data is never touched), so a 400 GB model
// answers as fast as a small one. An invalid file exits with status 1 and `error: <what and where>`.
#include "command.hpp"
#include "gguf_report.hpp"

#include <latte/error.hpp>
#include <latte/gguf.hpp>

#include <iostream>

namespace latte::cli {
namespace {

constexpr const char* usage =
    "usage: latte inspect FILE.gguf [--json] [--tensors | --no-tensors] [--array-items N]\n"
    "  --json           machine-readable output\n"
    "  --no-tensors     leave out the tensor table (totals are still printed)\n"
    "  --array-items N  show the first N elements of metadata arrays (default 8)\n";

struct InspectOptions {
  std::string path;
  bool json = false;
  bool tensors = true;
  size_t array_items = 8;
};

InspectOptions parse_options(std::span<const std::string> args) {
  Args parser(args);
  InspectOptions options;
  options.json = parser.flag({"--json"});
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
  const TensorTotals totals = tensor_totals(file);
  if (options.json) {
    nlohmann::ordered_json report = header_json(file);
    report["metadata"] = metadata_json(file, options.array_items);
    if (options.tensors) report["tensors"] = tensors_json(file);
    report["totals"] = totals_json(totals);
    // Metadata strings are arbitrary bytes: invalid UTF-8 becomes U+FFFD rather than an exception.
    std::cout << report.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
    return 0;
  }
  print_header_text(std::cout, file);
  print_metadata_text(std::cout, file, options.array_items);
  if (options.tensors) print_tensors_text(std::cout, file);
  print_totals_text(std::cout, totals);
  return 0;
}

const Registration registration{{"inspect", "print a GGUF file's header, metadata and tensors", run_inspect}};

}  // namespace
}  // namespace latte::cli
