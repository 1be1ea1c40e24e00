// Sections of `latte inspect`'s report on a GGUF file, each printable as text or as JSON. The command
// composes them; further sections (a weight audit, a tensor-parallel plan) slot in the same way.
//
//   auto file = latte::gguf::File::open(path);
//   latte::cli::print_header_text(std::cout, file);  latte::cli::print_totals_text(std::cout, tensor_totals(file));
#pragma once

#include <latte/gguf.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace latte::cli {

/// Parameters and bytes of the tensors of one ggml type.
struct TypeTotals {
  GgmlType type = GgmlType::f32;
  uint64_t tensors = 0;
  uint64_t parameters = 0;  ///< elements
  uint64_t bytes = 0;
};

/// Sums over all tensors of a file, with a per-type breakdown sorted by bytes (largest first).
struct TensorTotals {
  uint64_t tensors = 0;
  uint64_t parameters = 0;  ///< elements
  uint64_t bytes = 0;
  std::vector<TypeTotals> by_type;
};

/// Totals of `file`'s tensors.
TensorTotals tensor_totals(const gguf::File& file);

/// "3.79 MiB", "512 B".
std::string human_bytes(uint64_t bytes);
/// "671.03 B", "15.7 M", "812".
std::string human_count(uint64_t count);

/// A metadata value as one line of text. Arrays show their first `array_items` elements and their
/// length; strings longer than `max_string_bytes` are cut with their length given.
std::string value_text(const gguf::Value& value, size_t array_items, size_t max_string_bytes = 120);

// ---- text sections ----
void print_header_text(std::ostream& out, const gguf::File& file);
void print_metadata_text(std::ostream& out, const gguf::File& file, size_t array_items);
void print_tensors_text(std::ostream& out, const gguf::File& file);
void print_totals_text(std::ostream& out, const TensorTotals& totals);

// ---- JSON sections (the same content, arrays cut to `array_items` elements) ----
nlohmann::ordered_json header_json(const gguf::File& file);
nlohmann::ordered_json metadata_json(const gguf::File& file, size_t array_items);
nlohmann::ordered_json tensors_json(const gguf::File& file);
nlohmann::ordered_json totals_json(const TensorTotals& totals);

}  // namespace latte::cli
