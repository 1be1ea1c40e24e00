// The weight map: which GGUF tensors an architecture expects (names, shapes, alternatives), and the
// role-named views of a loaded model's tensors that the forward pass reads.
//
//   auto specs = latte::detail::expected_tensors(config);           // what a file must hold
//   auto weights = latte::detail::map_weights(file, config);        // views into the mapping
#pragma once

#include <latte/attention.hpp>
#include <latte/model.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace latte::gguf {
class File;
}

namespace latte::detail {

/// Views of one inference block's tensors, by role. Absent optional tensors are empty views.
/// Shapes in ggml order (ne[0] first): H hidden, N heads, Lq, L, P, R, V as in DESIGN.md,
/// F expert width, E experts, S shared experts.
struct LayerWeights {
  TensorView attn_norm;         // {H}
  TensorView attn_q_a;          // {H, Lq}              (q_lora models)
  TensorView attn_q_a_norm;     // {Lq}
  TensorView attn_q_b;          // {Lq, N(P+R)}
  TensorView attn_q;            // {H, N(P+R)}          (models without q_lora)
  TensorView attn_kv_a_mqa;     // {H, L+R}
  TensorView attn_kv_a_norm;    // {L}
  TensorView attn_k_b;          // {P, L, N}            split layout
  TensorView attn_v_b;          // {L, V, N}
  TensorView attn_kv_b;         // {L, N(P+V)}          legacy fused layout
  TensorView attn_output;       // {NV, H}
  TensorView ffn_norm;          // {H}
  TensorView ffn_gate;          // {H, F_dense}         dense blocks
  TensorView ffn_up;            // {H, F_dense}
  TensorView ffn_down;          // {F_dense, H}
  TensorView ffn_gate_inp;      // {H, E}               MoE blocks
  TensorView exp_probs_b;       // {E}                  optional selection bias
  TensorView ffn_gate_exps;     // {H, F, E}
  TensorView ffn_up_exps;       // {H, F, E}
  TensorView ffn_gate_up_exps;  // {H, 2F, E}         alternative: per expert F gate rows then F up rows
  TensorView ffn_down_exps;     // {F, H, E}
  TensorView ffn_gate_shexp;    // {H, F*S}
  TensorView ffn_up_shexp;      // {H, F*S}
  TensorView ffn_down_shexp;    // {F*S, H}
  TensorView indexer_attn_q_b;  // {Lq, nI*dI}        glm-dsa lightning indexer
  TensorView indexer_attn_k;    // {H, dI}
  TensorView indexer_k_norm;    // {dI}               LayerNorm weight
  TensorView indexer_k_norm_b;  // {dI}               LayerNorm bias
  TensorView indexer_proj;      // {H, nI}
};

/// Views of every tensor the forward pass reads.
struct ModelWeights {
  TensorView token_embd;             // {H, n_vocab}
  TensorView output_norm;            // {H}
  TensorView output;                 // {H, n_vocab} (token_embd when the file ties them)
  std::vector<LayerWeights> layers;  // the n_layer_main() inference blocks

  /// The attention up-projections of every inference block, for AttentionBackend::prepare.
  [[nodiscard]] std::vector<AttentionLayerWeights> attention_weights() const;
};

/// How much a tensor matters to the architecture.
enum class TensorNeed {
  required,  ///< must be present with this shape
  optional,  ///< used when present (shape checked)
  either,    ///< member of an either/or group: one option of the group must be complete
};

/// One tensor an architecture knows about.
struct TensorSpec {
  std::string name{};          ///< e.g. "blk.0.attn_kv_a_mqa.weight"
  std::vector<uint64_t> ne{};  ///< expected shape, ne[0] first (trailing 1s omitted)
  TensorNeed need = TensorNeed::required;
  bool mtp = false;     ///< in a multi-token-prediction block: recognised, skipped, not checked
  int layer = -1;       ///< block index, -1 for global tensors
  std::string group{};  ///< either/or group id (e.g. "blk.0 W_UK/W_UV")
  int option = 0;       ///< which option of the group this tensor belongs to
  TensorView LayerWeights::*layer_slot = nullptr;   ///< where a block tensor's view goes
  TensorView ModelWeights::*global_slot = nullptr;  ///< where a global tensor's view goes
  std::string role{};                               ///< short description for the audit ("W_UK (absorbed layout)")
};

/// Every tensor `config` implies, MTP blocks included (flagged `mtp`), globals first, then block by block.
std::vector<TensorSpec> expected_tensors(const ModelConfig& config);

/// Role-named views of `file`'s tensors. Throws Error(invalid_file) with the audit's problem list
/// when the file does not fit the config.
ModelWeights map_weights(const gguf::File& file, const ModelConfig& config, const WeightAudit& audit);

/// Formats a shape as "[a, b, c]".
std::string shape_text(std::span<const uint64_t> ne);

}  // namespace latte::detail
