#include "attention/up_projections.hpp"

#include "cpu/matmul.hpp"
#include "model/kv_b.hpp"

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

}  // namespace

AbsorbedUpProjections absorbed_up_projections(const AttentionLayerWeights& layer, const ModelConfig& config) {
  AbsorbedUpProjections out;
  if (layer.k_b && layer.v_b) {
    out.k_b = cpu::dequantize_tensor(layer.k_b);
    out.v_b = cpu::dequantize_tensor(layer.v_b);
    return out;
  }
  if (!layer.kv_b) no_layout(layer);
  const KvBDims d = dims_of(config);
  const std::vector<float> fused = cpu::dequantize_tensor(layer.kv_b);
  out.k_b.resize(static_cast<size_t>(d.n_head) * d.kv_lora_rank * d.qk_nope_head_dim);
  out.v_b.resize(static_cast<size_t>(d.n_head) * d.v_head_dim * d.kv_lora_rank);
  split_kv_b(fused, d, out.k_b, out.v_b);
  return out;
}

std::vector<float> fused_up_projection(const AttentionLayerWeights& layer, const ModelConfig& config) {
  if (layer.kv_b) return cpu::dequantize_tensor(layer.kv_b);
  if (!layer.k_b || !layer.v_b) no_layout(layer);
  const KvBDims d = dims_of(config);
  std::vector<float> fused(static_cast<size_t>(d.n_head) * (d.qk_nope_head_dim + d.v_head_dim) * d.kv_lora_rank);
  merge_kv_b(cpu::dequantize_tensor(layer.k_b), cpu::dequantize_tensor(layer.v_b), d, fused);
  return fused;
}

}  // namespace latte::detail
