// Block layout of ggml tensor types, as the GGUF reader and writer need it: values per block and bytes
// per block, by raw type id. Private to latte.
//
//   auto layout = latte::gguf::ggml_type_layout(raw_id);   // nullopt for unknown or removed ids
//   uint64_t bytes = n_values / layout->block_values * layout->block_bytes;
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace latte::gguf {

/// Values and bytes per block of one ggml type.
struct GgmlTypeLayout {
  std::string_view name;  ///< ggml's name: "f32", "q4_K", ...
  uint32_t block_values;  ///< values per block (1 for plain types)
  uint32_t block_bytes;   ///< bytes per block
};

/// Layout of the type with id `raw_type_id`; nullopt for ids ggml never defined or has removed.
std::optional<GgmlTypeLayout> ggml_type_layout(uint32_t raw_type_id) noexcept;

/// The name ggml gave an id it has since removed ("Q4_2"), or empty for ids it never defined.
std::string_view ggml_removed_type_name(uint32_t raw_type_id) noexcept;

}  // namespace latte::gguf
