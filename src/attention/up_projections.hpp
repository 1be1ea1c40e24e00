// The up-projections a CPU backend computes with, as views of the file's tensors (quantized or not,
// used in place through cpu::matmul) in the layout that backend reads natively. When the file only
// carries the other layout, the weights are converted once (dequantized, split or merged) into an
// owned fp32 copy and the view points there.
#pragma once

#include <latte/attention.hpp>
#include <latte/model.hpp>

#include <vector>

namespace latte::detail {

/// Per head: k_b rows [h*L, (h+1)*L) hold W_UK_h transposed (L rows of P values); v_b rows
/// [h*V, (h+1)*V) hold W_UV_h (V rows of L values). Move-only (the views may point into `owned_*`).
struct AbsorbedUpProjections {
  TensorView k_b;  // {P, L, N}
  TensorView v_b;  // {L, V, N}
  std::vector<float> owned_k_b, owned_v_b;

  AbsorbedUpProjections() = default;
  AbsorbedUpProjections(AbsorbedUpProjections&&) noexcept = default;
  AbsorbedUpProjections& operator=(AbsorbedUpProjections&&) noexcept = default;
  AbsorbedUpProjections(const AbsorbedUpProjections&) = delete;
  AbsorbedUpProjections& operator=(const AbsorbedUpProjections&) = delete;
};

/// Rows [h*(P+V), (h+1)*(P+V)) of kv_b: P rows of W_UK_h, then V rows of W_UV_h (L values each).
struct FusedUpProjection {
  TensorView kv_b;  // {L, N(P+V)}
  std::vector<float> owned;

  FusedUpProjection() = default;
  FusedUpProjection(FusedUpProjection&&) noexcept = default;
  FusedUpProjection& operator=(FusedUpProjection&&) noexcept = default;
  FusedUpProjection(const FusedUpProjection&) = delete;
  FusedUpProjection& operator=(const FusedUpProjection&) = delete;
};

/// attn_k_b / attn_v_b as they are, else split from attn_kv_b.
/// Throws Error(invalid_file) naming the layer when neither layout is complete.
AbsorbedUpProjections absorbed_up_projections(const AttentionLayerWeights& layer, const ModelConfig& config);

/// attn_kv_b as it is, else merged from attn_k_b / attn_v_b.
FusedUpProjection fused_up_projection(const AttentionLayerWeights& layer, const ModelConfig& config);

}  // namespace latte::detail
