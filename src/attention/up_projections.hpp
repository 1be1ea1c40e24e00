// fp32 copies of a layer's up-projections in the layout each CPU backend computes with, built from
// whichever layout the file carries (dequantized once, when a session prepares its backend).
#pragma once

#include <latte/attention.hpp>
#include <latte/model.hpp>

#include <vector>

namespace latte::detail {

/// Per head W_UK_h transposed and W_UV_h: k_b [N, L, P], v_b [N, V, L] (the split file layout).
struct AbsorbedUpProjections {
  std::vector<float> k_b;
  std::vector<float> v_b;
};

/// From attn_k_b / attn_v_b when present, else by splitting attn_kv_b.
/// Throws Error(invalid_file) naming the layer when neither layout is complete.
AbsorbedUpProjections absorbed_up_projections(const AttentionLayerWeights& layer, const ModelConfig& config);

/// The fused layout [N(P+V) rows, L]: from attn_kv_b when present, else by merging attn_k_b / attn_v_b.
std::vector<float> fused_up_projection(const AttentionLayerWeights& layer, const ModelConfig& config);

}  // namespace latte::detail
