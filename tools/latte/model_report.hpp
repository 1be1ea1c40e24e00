// The model section of `latte inspect`: the ModelConfig read from the metadata and the weight audit
// (which tensors map onto the architecture, which are skipped, missing, mis-shaped or unexpected).
//
//   bool ok = latte::cli::print_model_text(std::cout, file, /*list_tensors=*/false);
#pragma once

#include <latte/gguf.hpp>

#include <nlohmann/json.hpp>

#include <ostream>

namespace latte::cli {

/// Whether the file's general.architecture is one latte runs (then inspect shows the model section).
bool is_supported_model(const gguf::File& file);

/// Prints the config and the audit. With `list_tensors`, every mapped and skipped tensor too.
/// Returns false when the config or the tensors do not fit (the reasons are printed).
bool print_model_text(std::ostream& out, const gguf::File& file, bool list_tensors);

/// The same as JSON: {"config": {...}, "audit": {"ok": ..., "mapped": [...], ...}} or {"error": "..."}.
nlohmann::ordered_json model_json(const gguf::File& file, bool list_tensors);

}  // namespace latte::cli
