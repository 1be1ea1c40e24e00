// Block sizes of ggml's tensor types (fixed by the file format: a Q4_K block is 256 values in 144
// bytes). The GGUF layer only needs sizes, so it keeps this table next to it instead of depending on
// the dequantizers.
#include "gguf/ggml_type_layout.hpp"

#include <array>

namespace latte::gguf {
namespace {

struct Entry {
  GgmlTypeLayout layout;
  std::string_view removed;  ///< non-empty for ids ggml once used and has removed
};

// Indexed by ggml type id.
constexpr std::array<Entry, 40> table = {{
    {{"f32", 1, 4}, {}},         // 0
    {{"f16", 1, 2}, {}},         // 1
    {{"q4_0", 32, 18}, {}},      // 2
    {{"q4_1", 32, 20}, {}},      // 3
    {{}, "Q4_2"},                // 4
    {{}, "Q4_3"},                // 5
    {{"q5_0", 32, 22}, {}},      // 6
    {{"q5_1", 32, 24}, {}},      // 7
    {{"q8_0", 32, 34}, {}},      // 8
    {{"q8_1", 32, 36}, {}},      // 9
    {{"q2_K", 256, 84}, {}},     // 10
    {{"q3_K", 256, 110}, {}},    // 11
    {{"q4_K", 256, 144}, {}},    // 12
    {{"q5_K", 256, 176}, {}},    // 13
    {{"q6_K", 256, 210}, {}},    // 14
    {{"q8_K", 256, 292}, {}},    // 15
    {{"iq2_xxs", 256, 66}, {}},  // 16
    {{"iq2_xs", 256, 74}, {}},   // 17
    {{"iq3_xxs", 256, 98}, {}},  // 18
    {{"iq1_s", 256, 50}, {}},    // 19
    {{"iq4_nl", 32, 18}, {}},    // 20
    {{"iq3_s", 256, 110}, {}},   // 21
    {{"iq2_s", 256, 82}, {}},    // 22
    {{"iq4_xs", 256, 136}, {}},  // 23
    {{"i8", 1, 1}, {}},          // 24
    {{"i16", 1, 2}, {}},         // 25
    {{"i32", 1, 4}, {}},         // 26
    {{"i64", 1, 8}, {}},         // 27
    {{"f64", 1, 8}, {}},         // 28
    {{"iq1_m", 256, 56}, {}},    // 29
    {{"bf16", 1, 2}, {}},        // 30
    {{}, "Q4_0_4_4"},            // 31
    {{}, "Q4_0_4_8"},            // 32
    {{}, "Q4_0_8_8"},            // 33
    {{"tq1_0", 256, 54}, {}},    // 34
    {{"tq2_0", 256, 66}, {}},    // 35
    {{}, "IQ4_NL_4_4"},          // 36
    {{}, "IQ4_NL_4_8"},          // 37
    {{}, "IQ4_NL_8_8"},          // 38
    {{"mxfp4", 32, 17}, {}},     // 39
}};

}  // namespace

std::optional<GgmlTypeLayout> ggml_type_layout(uint32_t raw_type_id) noexcept {
  if (raw_type_id >= table.size() || !table[raw_type_id].removed.empty()) return std::nullopt;
  return table[raw_type_id].layout;
}

std::string_view ggml_removed_type_name(uint32_t raw_type_id) noexcept {
  return raw_type_id < table.size() ? table[raw_type_id].removed : std::string_view{};
}

}  // namespace latte::gguf
