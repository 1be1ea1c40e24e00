#include "convert/tensor_plan.hpp"

#include <latte/error.hpp>

#include <algorithm>
#include <cstdint>
#include <set>
#include <string_view>
#include <unordered_set>

namespace latte::convert {

// ---- row production ----------------------------------------------------------------------------

uint64_t PlannedTensor::n_rows() const noexcept {
  uint64_t rows = 1;
  for (size_t i = 1; i < ne.size(); ++i) rows *= ne[i];
  return rows;
}

uint64_t PlannedTensor::source_bytes() const noexcept {
  uint64_t bytes = 0;
  for (const auto& s : sources) {
    bytes += s.tensor().bytes.size();
    if (s.scale_inv()) bytes += s.scale_inv()->bytes.size();
  }
  return layout == RowLayout::k_b || layout == RowLayout::v_b ? bytes / 2 : bytes;  // kv_b feeds two tensors
}

void PlannedTensor::produce_rows(uint64_t first, uint64_t count, float* dst) const {
  const uint64_t cols = ne[0];
  switch (layout) {
    case RowLayout::rows:
      sources[0].decode_rows(first, count, dst);
      return;
    case RowLayout::stacked_experts: {
      const uint64_t per_expert = ne[1];
      for (uint64_t r = first; r < first + count;) {
        const uint64_t expert = r / per_expert, row = r % per_expert;
        const uint64_t n = std::min(first + count - r, per_expert - row);
        sources[expert].decode_rows(row, n, dst + (r - first) * cols);
        r += n;
      }
      return;
    }
    case RowLayout::rope_pairs: {
      for (uint64_t r = first; r < first + count;) {
        const uint64_t block = r / rope_period, j = r % rope_period;
        float* out = dst + (r - first) * cols;
        if (j < rope_offset || j >= rope_offset + rope_dims) {
          // up to the next rope row (or the end of the block): copied as they are
          const uint64_t end = j < rope_offset ? rope_offset : rope_period;
          const uint64_t n = std::min(first + count - r, end - j);
          sources[0].decode_rows(r, n, out);
          r += n;
          continue;
        }
        const uint64_t i = j - rope_offset, half = rope_dims / 2;
        const uint64_t source_i = i % 2 == 0 ? i / 2 : half + i / 2;
        sources[0].decode_rows(block * rope_period + rope_offset + source_i, 1, out);
        ++r;
      }
      return;
    }
    case RowLayout::v_b: {
      for (uint64_t r = first; r < first + count;) {
        const uint64_t head = r / v_dim, v = r % v_dim;
        const uint64_t n = std::min(first + count - r, v_dim - v);
        sources[0].decode_rows(head * (nope + v_dim) + nope + v, n, dst + (r - first) * cols);
        r += n;
      }
      return;
    }
    case RowLayout::k_b: {
      // Output row (head, l) lists kv_b[head * (P + V) + p][l] for p < P: a column of W_UK_head.
      std::vector<float> block;  // (P, n) slice of W_UK_head: columns [l, l + n) of its P rows
      for (uint64_t r = first; r < first + count;) {
        const uint64_t head = r / kv_lora, l = r % kv_lora;
        const uint64_t n = std::min(first + count - r, kv_lora - l);
        block.resize(nope * n);
        for (uint64_t p = 0; p < nope; ++p) sources[0].decode_span(head * (nope + v_dim) + p, l, n, &block[p * n]);
        float* out = dst + (r - first) * cols;
        for (uint64_t i = 0; i < n; ++i) {
          for (uint64_t p = 0; p < nope; ++p) out[i * nope + p] = block[p * n + i];
        }
        r += n;
      }
      return;
    }
  }
}

// ---- planning ----------------------------------------------------------------------------------

namespace {

std::string shape_text(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

class Planner {
 public:
  Planner(const safetensors::Checkpoint& ckpt, const HfModel& model, TypeMix mix)
      : ckpt_(ckpt), model_(model), mix_(mix) {
    const ModelConfig& c = model.config;
    context_ = TypeMixContext{.n_layer = c.n_layer, .n_expert = c.n_expert};
  }

  ConversionPlan run();

 private:
  const safetensors::TensorView* find(const std::string& name) const { return ckpt_.find(name); }

  // The checkpoint tensor `hf_name`, checked against `torch_shape`; marks it (and its fp8 scale) used.
  SourceMatrix source(const std::string& hf_name, const std::vector<uint64_t>& torch_shape) {
    const safetensors::TensorView* t = find(hf_name);
    if (!t) throw Error(ErrorCode::not_found, ckpt_.folder() + ": checkpoint has no tensor '" + hf_name + "'");
    if (t->shape != torch_shape) {
      throw Error(ErrorCode::invalid_file, *t->file + ": tensor '" + hf_name + "' has shape " + t->shape_string() +
                                               " but config.json implies " + shape_text(torch_shape));
    }
    used_.insert(hf_name);
    const safetensors::TensorView* scale = find(hf_name + "_scale_inv");
    if (scale) used_.insert(scale->name);
    if (t->dtype == safetensors::Dtype::f8_e4m3 && !scale) {
      throw Error(ErrorCode::invalid_file,
                  *t->file + ": fp8 tensor '" + hf_name + "' has no '" + hf_name + "_scale_inv' block scales");
    }
    return SourceMatrix(*t, scale, model_.fp8_block);
  }

  void add(std::string name, std::vector<uint64_t> ne, RowLayout layout, std::vector<SourceMatrix> sources) {
    PlannedTensor t;
    t.type = choose_tensor_type(mix_, name, ne, context_);
    t.name = std::move(name);
    t.ne = std::move(ne);
    t.layout = layout;
    t.sources = std::move(sources);
    plan_.tensors.push_back(std::move(t));
  }

  // A tensor copied row for row: GGUF ne is the torch shape reversed.
  void add_rows(std::string gguf_name, const std::string& hf_name, std::vector<uint64_t> torch_shape) {
    SourceMatrix m = source(hf_name, torch_shape);
    std::vector<uint64_t> ne(torch_shape.rbegin(), torch_shape.rend());
    add(std::move(gguf_name), std::move(ne), RowLayout::rows, {std::move(m)});
  }

  // A projection whose rows hold the R rope dims at `offset` of every `period` rows (q per head, kv_a's
  // k_pe): copied row for row when the checkpoint pairs them (2i, 2i + 1) as the GGUF does, reordered
  // when it pairs them (i, i + R/2) (rope_interleave false).
  void add_rope_rows(std::string gguf_name, const std::string& hf_name, std::vector<uint64_t> torch_shape,
                     uint64_t period, uint64_t offset, uint64_t rope_dims) {
    add_rows(std::move(gguf_name), hf_name, std::move(torch_shape));
    if (!model_.rope_half_split) return;
    PlannedTensor& t = plan_.tensors.back();
    t.layout = RowLayout::rope_pairs;
    t.rope_period = period, t.rope_offset = offset, t.rope_dims = rope_dims;
  }

  void add_if_present(std::string gguf_name, const std::string& hf_name, std::vector<uint64_t> torch_shape) {
    if (find(hf_name)) add_rows(std::move(gguf_name), hf_name, std::move(torch_shape));
  }

  void plan_block(int il);

  const safetensors::Checkpoint& ckpt_;
  const HfModel& model_;
  TypeMix mix_;
  TypeMixContext context_;
  ConversionPlan plan_;
  std::unordered_set<std::string> used_;
};

void Planner::plan_block(int il) {
  const ModelConfig& c = model_.config;
  const auto H = static_cast<uint64_t>(c.n_embd), N = static_cast<uint64_t>(c.n_head);
  const auto Lq = static_cast<uint64_t>(c.q_lora_rank), L = static_cast<uint64_t>(c.kv_lora_rank);
  const auto P = static_cast<uint64_t>(c.qk_nope_head_dim), R = static_cast<uint64_t>(c.qk_rope_head_dim);
  const auto V = static_cast<uint64_t>(c.v_head_dim);
  const std::string hf = "model.layers." + std::to_string(il) + ".";
  const std::string blk = "blk." + std::to_string(il) + ".";

  add_rows(blk + "attn_norm.weight", hf + "input_layernorm.weight", {H});
  if (Lq > 0) {
    add_rows(blk + "attn_q_a.weight", hf + "self_attn.q_a_proj.weight", {Lq, H});
    add_rows(blk + "attn_q_a_norm.weight", hf + "self_attn.q_a_layernorm.weight", {Lq});
    add_rope_rows(blk + "attn_q_b.weight", hf + "self_attn.q_b_proj.weight", {N * (P + R), Lq}, P + R, P, R);
  } else {
    add_rope_rows(blk + "attn_q.weight", hf + "self_attn.q_proj.weight", {N * (P + R), H}, P + R, P, R);
  }
  add_rope_rows(blk + "attn_kv_a_mqa.weight", hf + "self_attn.kv_a_proj_with_mqa.weight", {L + R, H}, L + R, L, R);
  add_rows(blk + "attn_kv_a_norm.weight", hf + "self_attn.kv_a_layernorm.weight", {L});
  {
    // kv_b_proj [N(P+V), L] becomes attn_k_b {P, L, N} (transposed per head) and attn_v_b {L, V, N}.
    const std::string kv_b = hf + "self_attn.kv_b_proj.weight";
    for (RowLayout layout : {RowLayout::k_b, RowLayout::v_b}) {
      const bool k = layout == RowLayout::k_b;
      add(blk + (k ? "attn_k_b.weight" : "attn_v_b.weight"), k ? std::vector<uint64_t>{P, L, N} : std::vector{L, V, N},
          layout, {source(kv_b, {N * (P + V), L})});
      auto& t = plan_.tensors.back();
      t.n_head = N, t.nope = P, t.v_dim = V, t.kv_lora = L;
    }
  }
  add_rows(blk + "attn_output.weight", hf + "self_attn.o_proj.weight", {H, N * V});

  if (c.has_indexer() && find(hf + "self_attn.indexer.wk.weight")) {
    const auto Ih = static_cast<uint64_t>(c.indexer.n_head), Id = static_cast<uint64_t>(c.indexer.head_dim);
    add_rows(blk + "indexer.k_norm.weight", hf + "self_attn.indexer.k_norm.weight", {Id});
    add_rows(blk + "indexer.k_norm.bias", hf + "self_attn.indexer.k_norm.bias", {Id});
    add_rows(blk + "indexer.proj.weight", hf + "self_attn.indexer.weights_proj.weight", {Ih, H});
    add_rows(blk + "indexer.attn_k.weight", hf + "self_attn.indexer.wk.weight", {Id, H});
    add_rows(blk + "indexer.attn_q_b.weight", hf + "self_attn.indexer.wq_b.weight", {Ih * Id, Lq});
  }

  add_rows(blk + "ffn_norm.weight", hf + "post_attention_layernorm.weight", {H});
  if (!c.is_moe_layer(il)) {
    const auto F = static_cast<uint64_t>(c.n_ff);
    add_rows(blk + "ffn_gate.weight", hf + "mlp.gate_proj.weight", {F, H});
    add_rows(blk + "ffn_up.weight", hf + "mlp.up_proj.weight", {F, H});
    add_rows(blk + "ffn_down.weight", hf + "mlp.down_proj.weight", {H, F});
  } else {
    const auto E = static_cast<uint64_t>(c.n_expert), Fe = static_cast<uint64_t>(c.n_ff_expert);
    add_rows(blk + "ffn_gate_inp.weight", hf + "mlp.gate.weight", {E, H});
    add_if_present(blk + "exp_probs_b.bias", hf + "mlp.gate.e_score_correction_bias", {E});
    if (find(hf + "mlp.experts.gate_up_proj") || find(hf + "mlp.experts.gate_up_proj.weight")) {
      throw Error(ErrorCode::unsupported, ckpt_.folder() + ": block " + std::to_string(il) +
                                              " stores its experts fused (mlp.experts.gate_up_proj); latte converts "
                                              "checkpoints with one tensor per expert");
    }
    for (const char* proj : {"gate", "up", "down"}) {
      const bool down = std::string_view(proj) == "down";
      std::vector<SourceMatrix> experts;
      experts.reserve(E);
      for (uint64_t e = 0; e < E; ++e) {
        experts.push_back(source(hf + "mlp.experts." + std::to_string(e) + "." + proj + "_proj.weight",
                                 down ? std::vector{H, Fe} : std::vector{Fe, H}));
      }
      add(blk + "ffn_" + proj + "_exps.weight", down ? std::vector{Fe, H, E} : std::vector{H, Fe, E},
          RowLayout::stacked_experts, std::move(experts));
    }
    if (c.n_expert_shared > 0) {
      const uint64_t Fs = Fe * static_cast<uint64_t>(c.n_expert_shared);
      add_rows(blk + "ffn_gate_shexp.weight", hf + "mlp.shared_experts.gate_proj.weight", {Fs, H});
      add_rows(blk + "ffn_up_shexp.weight", hf + "mlp.shared_experts.up_proj.weight", {Fs, H});
      add_rows(blk + "ffn_down_shexp.weight", hf + "mlp.shared_experts.down_proj.weight", {H, Fs});
    }
  }

  if (il >= c.n_layer_main()) {
    // Multi-token-prediction block: its own embedding, norms and projection, as llama.cpp names them.
    const auto Vocab = static_cast<uint64_t>(c.n_vocab);
    add_rows(blk + "nextn.eh_proj.weight", hf + "eh_proj.weight", {H, 2 * H});
    add_if_present(blk + "nextn.embed_tokens.weight", hf + "embed_tokens.weight", {Vocab, H});
    add_rows(blk + "nextn.enorm.weight", hf + "enorm.weight", {H});
    add_rows(blk + "nextn.hnorm.weight", hf + "hnorm.weight", {H});
    add_if_present(blk + "nextn.shared_head_head.weight", hf + "shared_head.head.weight", {Vocab, H});
    add_if_present(blk + "nextn.shared_head_norm.weight", hf + "shared_head.norm.weight", {H});
  }
}

ConversionPlan Planner::run() {
  const ModelConfig& c = model_.config;
  const auto H = static_cast<uint64_t>(c.n_embd), Vocab = static_cast<uint64_t>(c.n_vocab);
  plan_.model = model_;
  add_rows("token_embd.weight", "model.embed_tokens.weight", {Vocab, H});
  for (int il = 0; il < c.n_layer; ++il) plan_block(il);
  add_rows("output_norm.weight", "model.norm.weight", {H});
  if (find("lm_head.weight") || !model_.tie_word_embeddings) add_rows("output.weight", "lm_head.weight", {Vocab, H});

  // Every checkpoint tensor must have found a place, apart from what is skipped on purpose.
  std::vector<std::string> unexpected;
  for (const auto* t : ckpt_.tensors()) {
    if (used_.count(t->name)) continue;
    const std::string& n = t->name;
    int layer = -1;
    if (n.starts_with("model.layers.")) layer = std::atoi(n.c_str() + 13);
    const bool dropped_mtp = layer >= c.n_layer && layer < model_.n_trunk_layers + model_.n_checkpoint_mtp;
    if (dropped_mtp || n.ends_with("rotary_emb.inv_freq")) {
      plan_.skipped.push_back(n);
    } else {
      unexpected.push_back(n);
    }
  }
  if (!unexpected.empty()) {
    std::sort(unexpected.begin(), unexpected.end());
    std::string list;
    for (size_t i = 0; i < unexpected.size() && i < 8; ++i) list += (i ? ", '" : "'") + unexpected[i] + "'";
    if (unexpected.size() > 8) list += ", ... (" + std::to_string(unexpected.size()) + " in all)";
    throw Error(ErrorCode::invalid_file, ckpt_.folder() + ": checkpoint tensors with no place in a " +
                                             model_.hf_architecture + " GGUF file: " + list);
  }
  return std::move(plan_);
}

}  // namespace

ConversionPlan plan_conversion(const safetensors::Checkpoint& checkpoint, const HfModel& model, TypeMix mix) {
  return Planner(checkpoint, model, mix).run();
}

}  // namespace latte::convert
