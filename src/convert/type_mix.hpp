// The per-tensor element type of a converted (or synthetic) model: `latte convert --type`. The rule
// follows llama.cpp's converter (what stays F32) and llama-quantize's llama_tensor_get_type (which
// tensors of a *_M mix get more bits, and the fallbacks for rows that are not a whole number of
// blocks); docs/convert.md states it in full.
//
//   auto mix = latte::convert::parse_type_mix("q4_k_m");
//   latte::GgmlType t = latte::convert::choose_tensor_type(mix, "blk.3.ffn_down_exps.weight", ne, {.n_layer = 27});
#pragma once

#include <latte/quant.hpp>

#include <cstdint>
#include <span>
#include <string_view>

namespace latte::convert {

/// The `--type` choices.
enum class TypeMix {
  f32,     ///< everything F32
  f16,     ///< weights F16; norms, biases, router and indexer projection F32
  bf16,    ///< as f16 with BF16
  q8_0,    ///< weights Q8_0 (F16 when a row is not a multiple of 32)
  q4_k,    ///< every quantizable weight Q4_K ("pure")
  q5_k,    ///< every quantizable weight Q5_K ("pure")
  q6_k,    ///< every quantizable weight Q6_K ("pure")
  q4_k_m,  ///< Q4_K with Q6_K for output and some ffn_down layers (llama.cpp's Q4_K_M)
  q5_k_m,  ///< Q5_K with Q6_K for output and some ffn_down layers (llama.cpp's Q5_K_M)
  iq4_nl,  ///< every quantizable weight IQ4_NL ("pure")
  iq4_xs,  ///< every quantizable weight IQ4_XS ("pure"; IQ4_NL where a row is not a multiple of 256)
};

/// Parses "f32", "q4_k_m", "Q4_K_M", ... Throws Error(invalid_argument) listing the choices.
TypeMix parse_type_mix(std::string_view name);
/// The lower-case name ("q4_k_m").
std::string_view type_mix_name(TypeMix mix) noexcept;
/// The value of general.file_type llama.cpp writes for this mix (LLAMA_FTYPE_*: 0 all F32,
/// 1 F16, 7 Q8_0, 14 Q4_K_S, 15 Q4_K_M, 16 Q5_K_S, 17 Q5_K_M, 18 Q6_K, 25 IQ4_NL, 30 IQ4_XS, 32 BF16).
uint32_t llama_file_type(TypeMix mix) noexcept;

/// Model-wide facts the rule depends on.
struct TypeMixContext {
  int n_layer = 0;   ///< blocks in the file (block_count, MTP blocks included)
  int n_expert = 0;  ///< routed experts per MoE block
};

/// The element type of tensor `name` (a GGUF name such as "blk.3.attn_k_b.weight") with shape `ne`
/// (ne[0] innermost; trailing dims of 1 may be present or not). Throws Error(invalid_argument) when
/// a per-layer rule applies to a name without a valid "blk.N." prefix.
GgmlType choose_tensor_type(TypeMix mix, std::string_view name, std::span<const uint64_t> ne,
                            const TypeMixContext& context);

/// Whether llama-quantize would leave this tensor unquantized (and the converter writes it F32):
/// 1-D tensors, *_norm.weight, biases (names not ending in ".weight"), ffn_gate_inp and the DSA
/// indexer's proj.
bool keeps_f32(std::string_view name, std::span<const uint64_t> ne);

}  // namespace latte::convert
