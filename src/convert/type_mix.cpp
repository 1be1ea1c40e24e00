#include "convert/type_mix.hpp"

#include <latte/error.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <string>

namespace latte::convert {
namespace {

struct MixEntry {
  TypeMix mix;
  std::string_view name;
  uint32_t file_type;  // LLAMA_FTYPE_*
};
constexpr MixEntry mixes[] = {
    {TypeMix::f32, "f32", 0},        {TypeMix::f16, "f16", 1},        {TypeMix::bf16, "bf16", 32},
    {TypeMix::q8_0, "q8_0", 7},      {TypeMix::q4_k, "q4_k", 14},     {TypeMix::q5_k, "q5_k", 16},
    {TypeMix::q6_k, "q6_k", 18},     {TypeMix::q4_k_m, "q4_k_m", 15}, {TypeMix::q5_k_m, "q5_k_m", 17},
    {TypeMix::iq4_nl, "iq4_nl", 25}, {TypeMix::iq4_xs, "iq4_xs", 30},
};

// ggml_n_dims: trailing dimensions of 1 do not count.
size_t n_dims(std::span<const uint64_t> ne) {
  size_t n = ne.size();
  while (n > 1 && ne[n - 1] == 1) --n;
  return n;
}

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

// The block index N of "blk.N.<...>".
int layer_of(std::string_view name, const TypeMixContext& context) {
  constexpr std::string_view prefix = "blk.";
  int layer = -1;
  if (name.starts_with(prefix)) {
    const char* begin = name.data() + prefix.size();
    const char* end = name.data() + name.size();
    const auto [ptr, ec] = std::from_chars(begin, end, layer);
    if (ec != std::errc() || ptr == end || *ptr != '.') layer = -1;
  }
  if (layer < 0 || layer >= context.n_layer) {
    throw Error(ErrorCode::invalid_argument, "tensor '" + std::string(name) + "': no block index in [0, " +
                                                 std::to_string(context.n_layer) + ") for the per-layer type rule");
  }
  return layer;
}

// llama.cpp's use_more_bits: the first and last eighth of the layers, and every third one between.
bool use_more_bits(int layer, int n_layer) {
  return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

// A block type whose block does not divide the row falls back like llama-quantize does.
GgmlType fit_row(GgmlType type, uint64_t row) {
  const auto block = [](GgmlType t) { return type_traits(t).block_values; };
  if (row % block(type) == 0) return type;
  GgmlType fallback = GgmlType::f16;
  switch (type) {
    case GgmlType::q4_k:
      fallback = GgmlType::q5_0;
      break;
    case GgmlType::q5_k:
      fallback = GgmlType::q5_1;
      break;
    case GgmlType::q6_k:
      fallback = GgmlType::q8_0;
      break;
    case GgmlType::iq4_xs:
      fallback = GgmlType::iq4_nl;
      break;
    default:
      break;
  }
  return row % block(fallback) == 0 ? fallback : GgmlType::f16;
}

GgmlType base_type(TypeMix mix) {
  switch (mix) {
    case TypeMix::f32:
      return GgmlType::f32;
    case TypeMix::f16:
      return GgmlType::f16;
    case TypeMix::bf16:
      return GgmlType::bf16;
    case TypeMix::q8_0:
      return GgmlType::q8_0;
    case TypeMix::q4_k:
    case TypeMix::q4_k_m:
      return GgmlType::q4_k;
    case TypeMix::q5_k:
    case TypeMix::q5_k_m:
      return GgmlType::q5_k;
    case TypeMix::q6_k:
      return GgmlType::q6_k;
    case TypeMix::iq4_nl:
      return GgmlType::iq4_nl;
    case TypeMix::iq4_xs:
      return GgmlType::iq4_xs;
  }
  return GgmlType::f32;
}

}  // namespace

TypeMix parse_type_mix(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const auto& m : mixes) {
    if (m.name == lower) return m.mix;
  }
  std::string choices;
  for (const auto& m : mixes) choices += (choices.empty() ? "" : ", ") + std::string(m.name);
  throw Error(ErrorCode::invalid_argument, "unknown --type '" + std::string(name) + "' (choices: " + choices + ")");
}

std::string_view type_mix_name(TypeMix mix) noexcept {
  for (const auto& m : mixes) {
    if (m.mix == mix) return m.name;
  }
  return "?";
}

uint32_t llama_file_type(TypeMix mix) noexcept {
  for (const auto& m : mixes) {
    if (m.mix == mix) return m.file_type;
  }
  return 0;
}

bool keeps_f32(std::string_view name, std::span<const uint64_t> ne) {
  return n_dims(ne) <= 1 || name.ends_with("_norm.weight") || !name.ends_with(".weight") ||
         contains(name, "ffn_gate_inp.weight") || contains(name, "indexer.proj.weight");
}

GgmlType choose_tensor_type(TypeMix mix, std::string_view name, std::span<const uint64_t> ne,
                            const TypeMixContext& context) {
  if (keeps_f32(name, ne)) return GgmlType::f32;
  const uint64_t row = ne.empty() ? 1 : ne[0];
  GgmlType type = base_type(mix);
  switch (mix) {
    case TypeMix::f32:
    case TypeMix::f16:
    case TypeMix::bf16:
      return type;
    case TypeMix::q8_0:
      return fit_row(type, row);  // the converter falls back to F16
    case TypeMix::q4_k:
    case TypeMix::q5_k:
    case TypeMix::q6_k:
    case TypeMix::iq4_nl:
    case TypeMix::iq4_xs:
      return fit_row(type, row);
    case TypeMix::q4_k_m:
    case TypeMix::q5_k_m:
      break;
  }

  // *_M mixes: llama_tensor_get_type's choices for these architectures.
  if (name == "output.weight") {
    return row % 256 == 0 ? GgmlType::q6_k : fit_row(GgmlType::q8_0, row);
  }
  if (name.ends_with(".attn_kv_b.weight") || name.ends_with(".attn_v.weight")) {
    // The value up-projection of the legacy fused layout (one per layer, counted in file order).
    if (context.n_expert == 8) {
      type = GgmlType::q8_0;
    } else if (use_more_bits(layer_of(name, context), context.n_layer)) {
      type = GgmlType::q6_k;
    }
  } else if (contains(name, "ffn_down")) {
    if (use_more_bits(layer_of(name, context), context.n_layer)) type = GgmlType::q6_k;
  } else if (name.ends_with(".attn_output.weight")) {
    if (context.n_expert == 8 && mix == TypeMix::q4_k_m) type = GgmlType::q5_k;
  }
  return fit_row(type, row);
}

}  // namespace latte::convert
