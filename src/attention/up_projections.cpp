#include "attention/up_projections.hpp"

#include "cpu/matmul.hpp"
#include "model/kv_b.hpp"

#include <cstdint>
#include <latte/error.hpp>

namespace latte::detail {

namespace {

KvBDims dims_of(const ModelConfig& c) {
  return {.n_head = c.n_head,
          .kv_lora_rank = c.kv_lora_rank,
          .qk_nope_head_dim = c.qk_nope_head_dim,
          .v_head_dim = c.v_head_dim};
}

[[noreturn]] void no_layout(const AttentionLayerWeights& layer) {
  throw Error(ErrorCode::invalid_file,
              "block " + std::to_string(layer.layer) + " has neither attn_k_b + attn_v_b nor attn_kv_b");
}

/// An f32 view of `values` with shape `ne`.
TensorView owned_view(const std::vector<float>& values, std::array<int64_t, 4> ne, std::string_view name) {
  return {.name = name,
          .type = GgmlType::f32,
          .ne = ne,
          .data = reinterpret_cast<const std::byte*>(values.data()),
          .row_bytes = static_cast<size_t>(ne[0]) * sizeof(float)};
}

}  // namespace

AbsorbedUpProjections absorbed_up_projections(const AttentionLayerWeights& layer, const ModelConfig& config) {
  AbsorbedUpProjections out;
  if (layer.k_b && layer.v_b) {
    out.k_b = layer.k_b;
    out.v_b = layer.v_b;
    return out;
  }
  if (!layer.kv_b) no_layout(layer);
  const KvBDims d = dims_of(config);
  out.owned_k_b.resize(static_cast<size_t>(d.n_head) * d.kv_lora_rank * d.qk_nope_head_dim);
  out.owned_v_b.resize(static_cast<size_t>(d.n_head) * d.v_head_dim * d.kv_lora_rank);
  split_kv_b(cpu::dequantize_tensor(layer.kv_b), d, out.owned_k_b, out.owned_v_b);
  out.k_b = owned_view(out.owned_k_b, {d.qk_nope_head_dim, d.kv_lora_rank, d.n_head, 1}, "attn_k_b (from attn_kv_b)");
  out.v_b = owned_view(out.owned_v_b, {d.kv_lora_rank, d.v_head_dim, d.n_head, 1}, "attn_v_b (from attn_kv_b)");
  return out;
}

FusedUpProjection fused_up_projection(const AttentionLayerWeights& layer, const ModelConfig& config) {
  FusedUpProjection out;
  if (layer.kv_b) {
    out.kv_b = layer.kv_b;
    return out;
  }
  if (!layer.k_b || !layer.v_b) no_layout(layer);
  const KvBDims d = dims_of(config);
  out.owned.resize(static_cast<size_t>(d.n_head) * (d.qk_nope_head_dim + d.v_head_dim) * d.kv_lora_rank);
  merge_kv_b(cpu::dequantize_tensor(layer.k_b), cpu::dequantize_tensor(layer.v_b), d, out.owned);
  out.kv_b = owned_view(out.owned, {d.kv_lora_rank, d.n_head * (d.qk_nope_head_dim + d.v_head_dim), 1, 1},
                        "attn_kv_b (from attn_k_b, attn_v_b)");
  return out;
}

}  // namespace latte::detail
