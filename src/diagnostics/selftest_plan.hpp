// The GPU self-test's case list, derived on the host from a model's config and weight types (or from
// the built-in presets), so that it can be listed and tested without a GPU. Each case names one
// kernel family, its parameters at the model's widths (few rows or heads, so the whole run stays
// well under 30 s) and the bound of its normalised error, derived from the precision the kernel
// computes in. src/cuda/selftest_cases.cpp runs the cases; a build without CUDA only lists them.
//
//   auto plan = latte::diagnostics::detail::selftest_plan(selftest_target(model));
//   for (const SelftestCase& c : plan.cases) std::puts(c.name.c_str());
#pragma once

#include <latte/model.hpp>
#include <latte/quant.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace latte::diagnostics::detail {

/// Kernel families of the GPU forward pass, each checked against a float64 CPU reference.
enum class SelftestFamily {
  dequantize,         ///< dequantize_rows to fp32, one weight type
  gemv,               ///< gemv_quant, 1 and 4 tokens (decode products)
  gemm,               ///< Linear over 24 and 128 rows: tensor-core GEMM / bf16 cuBLAS (prefill products)
  rms_norm,           ///< rms_norm
  rms_norm_residual,  ///< rms_norm with the fused residual add
  layer_norm,         ///< layer_norm (the DSA indexer's key norm)
  rope_yarn,          ///< rope_yarn with the model's base and scaling
  moe_router,         ///< moe_route: gating, selection bias, group-limited top-k, weights
  moe_decode,         ///< moe_experts_decode: sort into GEMV groups, gated GEMV, gathered GEMV, combine
  moe_prefill,        ///< moe_experts_prefill: sort into tiles, grouped GEMMs, silu_gate, combine
  silu_gate,          ///< silu_gate, fp32 and bf16 outputs
  embedding,          ///< embedding_lookup of the token_embd type
  mla_decode,         ///< absorbed MLA decode over the latent cache
  standard_decode,    ///< per-head K/V decode
  flash_prefill,      ///< causal flash-attention prefill (sparse: under an indexer key mask)
  dsa_indexer,        ///< DSA lightning indexer scores, then its top-k
  kv_append,          ///< KV cache append (latent rows, per-head K rows)
};

/// The family's name as the table prints it ("gemv", "moe_router", ...).
std::string_view family_name(SelftestFamily family) noexcept;
/// Every family, in the order above.
std::vector<SelftestFamily> all_families();

/// RoPE parameters of a case, as the CUDA forward derives them from the model's config.
struct SelftestRope {
  int n_heads = 1;
  int head_stride = 0;   ///< floats between heads of a token
  int token_stride = 0;  ///< floats between tokens
  int rot_offset = 0;    ///< first rotated dim of a head
  int n_rot = 0;         ///< rotated dims
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;
  float ext_factor = 0.0f;
  int n_ctx_orig = 0;  ///< YaRN's original context (corr dims), when ext_factor != 0
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  RopeScaling scaling{};  ///< the model's, for the CPU reference (cpu::RotaryEmbedding)
  std::vector<int> positions{};
};

/// MoE parameters of a router or expert case.
struct SelftestMoe {
  int n_experts = 0;  ///< router: the model's E; experts: the few expert matrices the case builds
  int k = 0;          ///< experts per token
  int n_groups = 1;
  int groups_used = 1;
  bool sigmoid = false;
  bool bias = false;  ///< a selection bias (exp_probs_b)
  bool normalize = false;
  float scale = 1.0f;
  int hidden = 0;  ///< H
  int ffn = 0;     ///< expert width of the case (the model's, capped)
  GgmlType gate_type = GgmlType::f32, up_type = GgmlType::f32, down_type = GgmlType::f32;
};

/// One case. Only the fields of its family are meaningful.
struct SelftestCase {
  SelftestFamily family = SelftestFamily::dequantize;
  std::string name{};   ///< table label, e.g. "gemv_quant q4_K x4"
  std::string shape{};  ///< table shape, e.g. "576x7168"
  double bound = 0;     ///< largest acceptable normalised error ||gpu - ref|| / ||ref||
  GgmlType type = GgmlType::f32;
  int rows = 0;                     ///< matrix rows, norm rows, tokens
  int k = 0;                        ///< matrix columns, norm width
  std::vector<int> token_counts{};  ///< gemv / gemm: the token counts to run
  int n_heads = 0;
  int head_dim_qk = 0;
  int head_dim_v = 0;
  std::vector<int> kv_lens{};  ///< decode / indexer: per sequence; prefill: {pos0, T}
  int top_k = 0;               ///< indexer / sparse prefill
  float scale = 0;             ///< attention scale
  int tile_tokens = 0;         ///< mla_decode: the 16-row kernel's tile (32 or 64), 0 for the plan's own
  SelftestRope rope{};
  SelftestMoe moe{};
};

/// What the plan is derived from: a config and the types of its weights.
struct SelftestTarget {
  std::string label{};                   ///< "model DeepSeek-V3" / "preset deepseek-v3"
  ModelConfig config{};                  ///< validated
  std::vector<GgmlType> matrix_types{};  ///< distinct types of the 2-D projection weights
  GgmlType embedding_type = GgmlType::f32;
  bool has_expert_bias = false;  ///< exp_probs_b present
  GgmlType expert_gate = GgmlType::f32, expert_up = GgmlType::f32, expert_down = GgmlType::f32;
};

/// The cases and the lines the table prints for what cannot be checked (a type without a CPU encoder).
struct SelftestPlan {
  std::string label{};
  std::vector<SelftestCase> cases{};
  std::vector<std::string> not_covered{};
};

/// The target of a loaded model (any device; only its config and file's tensor types are read).
SelftestTarget selftest_target(const Model& model);
/// The target of a built-in preset ("deepseek-v3", "glm-5", ...), with `types` as its weight types.
SelftestTarget selftest_preset_target(std::string_view preset, std::vector<GgmlType> types);
/// The cases of one target.
SelftestPlan selftest_plan(const SelftestTarget& target);
/// The cases without a model: deepseek-v2-lite (softmax routing, no query compression), deepseek-v3
/// (sigmoid, bias, groups, YaRN, 128 heads) and glm-5 (indexer, head dims 256), every GPU weight
/// type, each case once (identical name and shape across presets are merged).
SelftestPlan selftest_default_plan();

}  // namespace latte::diagnostics::detail
