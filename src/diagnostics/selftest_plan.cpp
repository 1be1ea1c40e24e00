// The GPU self-test's case list (see selftest_plan.hpp).
//
// Bounds (normalised error against a float64 reference on the same inputs):
//   dequantize_rows                         1e-6  exact decode, fp32 rounding only
//   gemv_quant, moe decode                  1e-4  fp32 sums in another order (k up to 7168: ~1e-6 seen)
//   gemm (tensor cores, cuBLAS), moe prefill 1e-3 the reference rounds the operands to bf16 as the kernel
//                                                 does; fp32 accumulation (and, in the MoE, the bf16
//                                                 rounding of silu(g)*u flipping an ulp) remain
//   rms_norm, layer_norm, silu_gate fp32    1e-5  fp32 arithmetic
//   silu_gate bf16                          4e-3  one bf16 rounding (2^-9 relative at most)
//   rope_yarn                               1e-5  angles in double on both sides, fp32 data
//   moe_route weights                       1e-5  fp32 exp / sigmoid; ids must match exactly (bound 0)
//   embedding, kv_append                    0 / 1e-6  exact copies (bf16 round-to-nearest-even)
//   mla_decode, standard_decode,
//   flash_prefill                           1e-2  bf16 inputs exact in the reference; the kernels keep
//                                                 probabilities in bf16 for the PV product
//   dsa index scores                        1e-4  bf16 inputs exact in the reference, fp32 sums
//   dsa top-k                               0     exact selection over the GPU's own scores
#include "diagnostics/selftest_plan.hpp"

#include "model/presets.hpp"

#include <latte/error.hpp>
#include <latte/gguf.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <utility>

namespace latte::diagnostics::detail {

namespace {

// Latent cache row of the MLA kernels: L = 512, R = 64.
constexpr int kLatent = 512;
constexpr int kRope = 64;

std::string dims(std::initializer_list<int> values, char sep = 'x') {
  std::string s;
  for (int v : values) {
    if (!s.empty()) s += sep;
    s += std::to_string(v);
  }
  return s;
}

std::string kv_text(const std::vector<int>& lens) {
  std::string s = "kv";
  for (int n : lens) {
    s += ' ';
    s += std::to_string(n);
  }
  return s;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

SelftestRope model_rope(const ModelConfig& c) {
  SelftestRope r;
  r.freq_base = c.rope_freq_base;
  r.scaling = c.rope_scaling;
  const RopeScaling& rs = c.rope_scaling;
  if (rs.type == RopeScalingType::linear) {
    r.freq_scale = 1.0f / rs.factor;
  } else if (rs.type == RopeScalingType::yarn && rs.factor != 1.0f) {
    r.freq_scale = 1.0f / rs.factor;
    r.ext_factor = 1.0f;
    r.n_ctx_orig = static_cast<int>(rs.original_context_length);
    r.beta_fast = rs.yarn_beta_fast;
    r.beta_slow = rs.yarn_beta_slow;
  }
  // Positions from the first to beyond YaRN's original context and up to the trained one.
  r.positions = {0, 1, 17, 4095, 4096, 32767};
  if (c.context_length > 1) r.positions.push_back(c.context_length - 1);
  return r;
}

std::string rope_label(const SelftestRope& r) {
  return r.ext_factor != 0 ? "yarn" : (r.freq_scale != 1.0f ? "linear" : "plain");
}

/// k rounded down to a multiple of the type's block (at least one block).
int block_multiple(GgmlType type, int k) {
  const int block = static_cast<int>(type_traits(type).block_values);
  const int unit = std::max(block, 32);
  return std::max(unit, k / unit * unit);
}

void add_matrix_cases(const SelftestTarget& t, SelftestPlan& plan) {
  const ModelConfig& c = t.config;
  const int rows = c.kv_lora_rank + c.qk_rope_head_dim;  // the kv_a projection's width (576)
  for (GgmlType type : t.matrix_types) {
    const TypeTraits& traits = type_traits(type);
    if (!traits.quantizable) {
      plan.not_covered.push_back(std::string(traits.name) +
                                 ": no CPU encoder to make random blocks, so its GEMV/GEMM are not checked here");
      continue;
    }
    const int k = block_multiple(type, c.n_embd);
    const std::string label(traits.name);
    const std::string shape = dims({rows, k});
    plan.cases.push_back({.family = SelftestFamily::dequantize,
                          .name = "dequantize_rows " + label,
                          .shape = shape,
                          .bound = 1e-6,
                          .type = type,
                          .rows = rows,
                          .k = k});
    plan.cases.push_back({.family = SelftestFamily::gemv,
                          .name = "gemv_quant " + label,
                          .shape = shape,
                          .bound = 1e-4,
                          .type = type,
                          .rows = rows,
                          .k = k,
                          .token_counts = {1, 4}});
    plan.cases.push_back({.family = SelftestFamily::gemm,
                          .name = "linear " + label,
                          .shape = shape,
                          .bound = 1e-3,
                          .type = type,
                          .rows = rows,
                          .k = k,
                          // 12 rows: the fused GEMM (Linear dequantizes for cuBLAS from blas_min_rows(), 17)
                          .token_counts = {12, 128}});
  }
}

void add_norm_cases(const ModelConfig& c, SelftestPlan& plan) {
  auto norm = [&](SelftestFamily f, int rows, int n) {
    plan.cases.push_back({.family = f,
                          .name = f == SelftestFamily::rms_norm ? "rms_norm f32" : "rms_norm+residual f32",
                          .shape = dims({rows, n}),
                          .bound = 1e-5,
                          .rows = rows,
                          .k = n});
  };
  norm(SelftestFamily::rms_norm, 7, c.n_embd);
  norm(SelftestFamily::rms_norm, 5, c.kv_lora_rank);
  if (c.q_lora_rank > 0) norm(SelftestFamily::rms_norm, 3, c.q_lora_rank);
  norm(SelftestFamily::rms_norm_residual, 5, c.n_embd);
  if (c.has_indexer()) {
    plan.cases.push_back({.family = SelftestFamily::layer_norm,
                          .name = "layer_norm f32",
                          .shape = dims({5, c.indexer.head_dim}),
                          .bound = 1e-5,
                          .rows = 5,
                          .k = c.indexer.head_dim});
  }
}

void add_rope_cases(const ModelConfig& c, SelftestPlan& plan) {
  const int qk = c.qk_head_dim(), R = c.qk_rope_head_dim;
  SelftestRope q = model_rope(c);
  q.n_heads = c.n_head;
  q.head_stride = qk;
  q.token_stride = c.n_head * qk;
  q.rot_offset = c.qk_nope_head_dim;
  q.n_rot = R;
  const std::string kind = rope_label(q);
  plan.cases.push_back({.family = SelftestFamily::rope_yarn,
                        .name = "rope_yarn q " + kind,
                        .shape = dims({static_cast<int>(q.positions.size()), c.n_head, qk}),
                        .bound = 1e-5,
                        .rope = q});
  SelftestRope k = model_rope(c);
  k.n_heads = 1;
  k.head_stride = c.kv_lora_rank + R;
  k.token_stride = c.kv_lora_rank + R;
  k.rot_offset = c.kv_lora_rank;
  k.n_rot = R;
  plan.cases.push_back({.family = SelftestFamily::rope_yarn,
                        .name = "rope_yarn k_pe " + kind,
                        .shape = dims({static_cast<int>(k.positions.size()), 1, c.kv_lora_rank + R}),
                        .bound = 1e-5,
                        .rope = k});
  if (c.has_indexer()) {
    SelftestRope ix = model_rope(c);
    ix.n_heads = c.indexer.n_head;
    ix.head_stride = c.indexer.head_dim;
    ix.token_stride = c.indexer.n_head * c.indexer.head_dim;
    ix.rot_offset = 0;
    ix.n_rot = R;
    plan.cases.push_back({.family = SelftestFamily::rope_yarn,
                          .name = "rope_yarn indexer " + kind,
                          .shape = dims({static_cast<int>(ix.positions.size()), ix.n_heads, ix.head_stride}),
                          .bound = 1e-5,
                          .rope = ix});
  }
}

void add_moe_cases(const SelftestTarget& t, SelftestPlan& plan) {
  const ModelConfig& c = t.config;
  if (c.n_expert <= 0 || c.n_layer_main() <= c.n_dense_lead) return;
  SelftestMoe m{.n_experts = c.n_expert,
                .k = c.n_expert_used,
                .n_groups = c.n_expert_group,
                .groups_used = c.n_expert_group_used,
                .sigmoid = c.expert_gating == ExpertGating::sigmoid,
                .bias = t.has_expert_bias,
                .normalize = c.expert_weights_norm,
                .scale = c.expert_weights_scale,
                .hidden = c.n_embd,
                .ffn = c.n_ff_expert,
                .gate_type = t.expert_gate,
                .up_type = t.expert_up,
                .down_type = t.expert_down};
  const std::string gating = std::string(m.sigmoid ? "sigmoid" : "softmax") + (m.bias ? "+bias" : "");
  plan.cases.push_back({.family = SelftestFamily::moe_router,
                        .name = "moe_route " + gating,
                        .shape = "16 tok, E " + std::to_string(m.n_experts) + " k " + std::to_string(m.k) + " g " +
                                 std::to_string(m.groups_used) + "/" + std::to_string(m.n_groups),
                        .bound = 1e-5,
                        .rows = 16,
                        .moe = m});

  // Expert dispatch over a few experts at the model's hidden size; the expert width is capped so the
  // random weights and the float64 reference stay small (the kernels tile it the same way).
  // The expert width is the down projection's k: whole blocks of its type, a multiple of 32 (GEMM).
  const int block = static_cast<int>(std::max(type_traits(m.down_type).block_values, 32u));
  // Two choices per token among four experts: tokens share experts (several per GEMV group and GEMM
  // tile), and the random expert weights (the bulk of the self-test's host time) stay few.
  SelftestMoe x = m;
  x.k = std::min(c.n_expert_used, 2);
  x.n_experts = std::min(c.n_expert, x.k + 2);
  x.ffn = std::max(block, std::min(c.n_ff_expert, 256) / block * block);
  for (GgmlType type : {m.gate_type, m.up_type, m.down_type}) {
    if (!type_traits(type).quantizable) {
      plan.not_covered.push_back("moe experts: " + std::string(type_name(type)) + " has no CPU encoder");
      return;
    }
  }
  const std::string types = std::string(type_name(m.gate_type)) + "/" + std::string(type_name(m.up_type)) + "/" +
                            std::string(type_name(m.down_type));
  const std::string shape =
      "E " + std::to_string(x.n_experts) + " k " + std::to_string(x.k) + " " + dims({x.hidden, x.ffn});
  plan.cases.push_back({.family = SelftestFamily::moe_decode,
                        .name = "moe_experts decode " + types,
                        .shape = "4 tok, " + shape,
                        .bound = 1e-4,
                        .rows = 4,
                        .moe = x});
  plan.cases.push_back({.family = SelftestFamily::moe_prefill,
                        .name = "moe_experts prefill " + types,
                        .shape = "12 tok, " + shape,
                        .bound = 1e-3,
                        .rows = 12,
                        .moe = x});
}

void add_attention_cases(const ModelConfig& c, SelftestPlan& plan) {
  const int N = c.n_head, qk = c.qk_head_dim(), V = c.v_head_dim;
  if (c.kv_lora_rank == kLatent && c.qk_rope_head_dim == kRope) {
    const std::vector<int> lens = {37, 700};
    // up to 32 rows per sequence, the 16-row kernel's second tiling too (LATTE_MLA_DECODE_TILE=32)
    for (const int tile : N <= 32 ? std::vector<int>{64, 32} : std::vector<int>{64}) {
      plan.cases.push_back({.family = SelftestFamily::mla_decode,
                            .name = tile == 64 ? "mla_decode bf16" : "mla_decode bf16, 32-position tiles",
                            .shape = std::to_string(N) + " heads, " + kv_text(lens),
                            .bound = 1e-2,
                            .n_heads = N,
                            .kv_lens = lens,
                            .scale = c.attention_scale(),
                            .tile_tokens = tile});
    }
  } else {
    plan.not_covered.push_back("mla_decode: the kernel's latent row is 512 + 64, the model's " +
                               std::to_string(c.kv_lora_rank) + " + " + std::to_string(c.qk_rope_head_dim));
  }
  const std::vector<int> lens = {37, 300};
  plan.cases.push_back({.family = SelftestFamily::standard_decode,
                        .name = "standard_decode bf16",
                        .shape = std::to_string(N) + "x(" + dims({qk, V}, ',') + "), " + kv_text(lens),
                        .bound = 1e-2,
                        .n_heads = N,
                        .head_dim_qk = qk,
                        .head_dim_v = V,
                        .kv_lens = lens,
                        .scale = c.attention_scale()});
  // A chunk of 70 queries after 40 cached positions: two query tiles, the causal edge inside both.
  const int heads = std::min(N, 8);
  const std::vector<int> chunk = {40, 70};
  plan.cases.push_back({.family = SelftestFamily::flash_prefill,
                        .name = "flash_prefill bf16",
                        .shape = std::to_string(heads) + "x(" + dims({qk, V}, ',') + "), pos0 40 T 70",
                        .bound = 1e-2,
                        .n_heads = heads,
                        .head_dim_qk = qk,
                        .head_dim_v = V,
                        .kv_lens = chunk,
                        .scale = c.attention_scale()});
  if (c.has_indexer()) {
    const int top_k = std::min(c.indexer.top_k, 64);
    plan.cases.push_back(
        {.family = SelftestFamily::flash_prefill,
         .name = "flash_prefill sparse bf16",
         .shape = std::to_string(heads) + "x(" + dims({qk, V}, ',') + "), pos0 40 T 70 top " + std::to_string(top_k),
         .bound = 1e-2,
         .n_heads = heads,
         .head_dim_qk = qk,
         .head_dim_v = V,
         .kv_lens = chunk,
         .top_k = top_k,
         .scale = c.attention_scale()});
    // The model's top_k, with one sequence longer than it (a real selection) and one shorter.
    const std::vector<int> ix_lens = {c.indexer.top_k + 300, std::max(3, c.indexer.top_k / 2)};
    plan.cases.push_back({.family = SelftestFamily::dsa_indexer,
                          .name = "dsa_indexer",
                          .shape = std::to_string(c.indexer.n_head) + "x" + std::to_string(c.indexer.head_dim) +
                                   ", q 3, " + kv_text(ix_lens) + " top " + std::to_string(c.indexer.top_k),
                          .bound = 1e-4,
                          .rows = 3,
                          .n_heads = c.indexer.n_head,
                          .head_dim_qk = c.indexer.head_dim,
                          .kv_lens = ix_lens,
                          .top_k = c.indexer.top_k});
  }
  const int row = c.kv_lora_rank + c.qk_rope_head_dim;
  plan.cases.push_back({.family = SelftestFamily::kv_append,
                        .name = "kv_append latent",
                        .shape = "5 tok, " + dims({c.kv_lora_rank, c.qk_rope_head_dim}, '+'),
                        .bound = 0,
                        .rows = 5,
                        .k = c.kv_lora_rank,
                        .n_heads = 1,
                        .head_dim_qk = row});
  plan.cases.push_back({.family = SelftestFamily::kv_append,
                        .name = "kv_append per-head K",
                        .shape = "5 tok, " + std::to_string(N) + "x" + std::to_string(qk),
                        .bound = 0,
                        .rows = 5,
                        .n_heads = N,
                        .head_dim_qk = qk});
}

}  // namespace

std::string_view family_name(SelftestFamily family) noexcept {
  switch (family) {
    case SelftestFamily::dequantize:
      return "dequantize";
    case SelftestFamily::gemv:
      return "gemv";
    case SelftestFamily::gemm:
      return "gemm";
    case SelftestFamily::rms_norm:
      return "rms_norm";
    case SelftestFamily::rms_norm_residual:
      return "rms_norm_residual";
    case SelftestFamily::layer_norm:
      return "layer_norm";
    case SelftestFamily::rope_yarn:
      return "rope_yarn";
    case SelftestFamily::moe_router:
      return "moe_router";
    case SelftestFamily::moe_decode:
      return "moe_decode";
    case SelftestFamily::moe_prefill:
      return "moe_prefill";
    case SelftestFamily::silu_gate:
      return "silu_gate";
    case SelftestFamily::embedding:
      return "embedding";
    case SelftestFamily::mla_decode:
      return "mla_decode";
    case SelftestFamily::standard_decode:
      return "standard_decode";
    case SelftestFamily::flash_prefill:
      return "flash_prefill";
    case SelftestFamily::dsa_indexer:
      return "dsa_indexer";
    case SelftestFamily::kv_append:
      return "kv_append";
  }
  return "unknown";
}

std::vector<SelftestFamily> all_families() {
  std::vector<SelftestFamily> out;
  for (int f = 0; f <= static_cast<int>(SelftestFamily::kv_append); ++f) out.push_back(static_cast<SelftestFamily>(f));
  return out;
}

SelftestTarget selftest_target(const Model& model) {
  SelftestTarget t;
  t.config = model.config();
  t.label = "model " + (t.config.name.empty() ? std::string(architecture_name(t.config.arch)) : t.config.name);
  std::set<GgmlType> types;
  for (const gguf::TensorInfo& info : model.file().tensors()) {
    const std::string_view name = info.name;
    if (info.n_dims < 2 || !ends_with(name, ".weight")) continue;
    if (name == "token_embd.weight") {
      t.embedding_type = info.type;
      continue;
    }
    if (ends_with(name, "ffn_gate_exps.weight")) t.expert_gate = info.type;
    if (ends_with(name, "ffn_up_exps.weight")) t.expert_up = info.type;
    if (ends_with(name, "ffn_gate_up_exps.weight")) t.expert_gate = t.expert_up = info.type;
    if (ends_with(name, "ffn_down_exps.weight")) t.expert_down = info.type;
    types.insert(info.type);
  }
  for (const gguf::TensorInfo& info : model.file().tensors()) {
    if (ends_with(info.name, "exp_probs_b.bias")) t.has_expert_bias = true;
  }
  t.matrix_types.assign(types.begin(), types.end());
  return t;
}

SelftestTarget selftest_preset_target(std::string_view preset, std::vector<GgmlType> types) {
  SelftestTarget t;
  t.config = model_preset(preset);
  t.label = "preset " + std::string(preset);
  t.matrix_types = std::move(types);
  // Experts as a Q4_K_M file stores them for the smallest preset; q8_0 (cheap to encode at random)
  // for the large ones, whose every type the matrix cases check anyway.
  const bool small = t.config.n_embd <= 2048;
  t.expert_gate = t.expert_up = small ? GgmlType::q4_k : GgmlType::q8_0;
  t.expert_down = small ? GgmlType::q6_k : GgmlType::q8_0;
  t.embedding_type = GgmlType::q8_0;
  t.has_expert_bias = t.config.expert_gating == ExpertGating::sigmoid;
  return t;
}

SelftestPlan selftest_plan(const SelftestTarget& target) {
  const ModelConfig& c = target.config;
  SelftestPlan plan;
  plan.label = target.label;
  add_matrix_cases(target, plan);
  add_norm_cases(c, plan);
  add_rope_cases(c, plan);
  add_moe_cases(target, plan);
  const int ffn = c.n_expert > 0 ? c.n_ff_expert : c.n_ff;
  plan.cases.push_back({.family = SelftestFamily::silu_gate,
                        .name = "silu_gate f32",
                        .shape = dims({5, ffn}),
                        .bound = 1e-5,
                        .type = GgmlType::f32,
                        .rows = 5,
                        .k = ffn});
  plan.cases.push_back({.family = SelftestFamily::silu_gate,
                        .name = "silu_gate bf16",
                        .shape = dims({5, ffn}),
                        .bound = 4e-3,
                        .type = GgmlType::bf16,
                        .rows = 5,
                        .k = ffn});
  if (type_traits(target.embedding_type).quantizable) {
    plan.cases.push_back({.family = SelftestFamily::embedding,
                          .name = "embedding " + std::string(type_name(target.embedding_type)),
                          .shape = "9 ids of 64x" + std::to_string(block_multiple(target.embedding_type, c.n_embd)),
                          .bound = 1e-6,
                          .type = target.embedding_type,
                          .rows = 9,
                          .k = block_multiple(target.embedding_type, c.n_embd)});
  } else {
    plan.not_covered.push_back("embedding: " + std::string(type_name(target.embedding_type)) + " has no CPU encoder");
  }
  add_attention_cases(c, plan);
  return plan;
}

SelftestPlan selftest_default_plan() {
  const std::vector<GgmlType> all = {GgmlType::f32,   GgmlType::f16,  GgmlType::bf16,   GgmlType::q4_0,
                                     GgmlType::q4_1,  GgmlType::q5_0, GgmlType::q5_1,   GgmlType::q8_0,
                                     GgmlType::mxfp4, GgmlType::q2_k, GgmlType::q3_k,   GgmlType::q4_k,
                                     GgmlType::q5_k,  GgmlType::q6_k, GgmlType::iq4_nl, GgmlType::iq4_xs};
  SelftestPlan plan;
  plan.label = "presets deepseek-v2-lite, deepseek-v3, glm-5";
  std::set<std::pair<std::string, std::string>> seen;
  const std::vector<std::pair<std::string_view, std::vector<GgmlType>>> presets = {
      {"deepseek-v2-lite", {}}, {"deepseek-v3", all}, {"glm-5", {}}};
  for (const auto& [preset, types] : presets) {
    const SelftestPlan p = selftest_plan(selftest_preset_target(preset, types));
    for (const SelftestCase& c : p.cases) {
      if (seen.insert({c.name, c.shape}).second) plan.cases.push_back(c);
    }
    for (const std::string& line : p.not_covered) {
      if (std::find(plan.not_covered.begin(), plan.not_covered.end(), line) == plan.not_covered.end()) {
        plan.not_covered.push_back(line);
      }
    }
  }
  return plan;
}

}  // namespace latte::diagnostics::detail
