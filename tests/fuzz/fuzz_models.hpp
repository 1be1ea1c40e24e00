// The tiny models the fuzzers and their seed writer share: every tensor of the architecture with
// widths of a few values, so that a whole GGUF file or session state is a few KB.
#pragma once

#include "model/presets.hpp"
#include "model/random_model.hpp"

#include <latte/gguf.hpp>
#include <latte/model.hpp>

#include <cstddef>
#include <string_view>
#include <vector>

namespace latte::fuzz {

/// `preset` (a "test-*" preset) shrunk to widths of 4..16 values and a 32-token vocabulary.
inline ModelConfig tiny_config(std::string_view preset) {
  ModelConfig c = model_preset(preset);
  c.n_vocab = 32;
  c.n_embd = 16;
  c.n_head = 2;
  c.q_lora_rank = c.q_lora_rank > 0 ? 8 : 0;
  c.kv_lora_rank = 8;
  c.qk_nope_head_dim = 4;
  c.qk_rope_head_dim = 4;
  c.v_head_dim = 4;
  c.n_ff = 16;
  c.n_ff_expert = 8;
  c.rope_scaling.original_context_length = c.rope_scaling.original_context_length > 0 ? 64 : 0;
  if (c.has_indexer()) c.indexer = {.n_head = 2, .head_dim = 8, .top_k = 4};
  return c;
}

/// The GGUF image of the tiny model of `preset` (same bytes on every call).
inline std::vector<std::byte> tiny_model_bytes(std::string_view preset, KvBLayout layout = KvBLayout::split) {
  return random_model_bytes(tiny_config(preset), {.seed = 3, .kv_b_layout = layout});
}

/// The state-file fuzzer's model: tiny test-v3 (deepseek2, MoE, MTP block).
inline Model state_fuzz_model() { return Model::from_file(gguf::File::from_bytes(tiny_model_bytes("test-v3"))); }

/// The session parameters the state-file fuzzer and its seeds use.
inline constexpr int kStateFuzzContext = 64;

}  // namespace latte::fuzz
