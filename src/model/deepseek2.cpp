// deepseek2: block tensors and the fp32 CPU forward pass.
//
// Per block (x = residual stream, rows = new tokens):
//   xn = RMSNorm(x)                                  attention_block
//   [q_a | kv_a] = xn [attn_q_a ; attn_kv_a_mqa]^T    (or [q | kv_a] without q_lora)
//   q = q_b(RMSNorm(q_a));  c = RMSNorm(kv_a[:L]);  k_pe = kv_a[L:]
//   RoPE(q_pe per head, k_pe)                        interleaved pairs, YaRN frequencies
//   o = backend(q, c, k_pe)                          [T, N V]
//   x += o attn_output^T
//   xn = RMSNorm(x)                                  feed_forward_block
//   x += dense SiLU FFN (leading blocks) or routed experts + shared experts
// then logits = RMSNorm(x) output^T for the requested rows.
#include "model/deepseek2.hpp"

#include "cpu/matmul.hpp"
#include "cpu/norms.hpp"
#include "model/architecture.hpp"
#include "model/weights.hpp"
#include "parallel/rank_context.hpp"

#include <latte/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace latte::detail {

namespace {

std::vector<float> vector_or_empty(const TensorView& v) { return v ? cpu::dequantize_tensor(v) : std::vector<float>{}; }

template <class T>
void ensure_size(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

}  // namespace

AttentionInputLayout attention_input_layout(const ModelConfig& c) {
  const int query_width = c.q_lora_rank > 0 ? c.q_lora_rank : c.n_head * c.qk_head_dim();
  const int latent_width = c.kv_lora_rank + c.qk_rope_head_dim;
  AttentionInputLayout l;
  l.query_width = query_width;
  int offset = 0;
  for (AttentionInputPart part : kAttentionInputFusionOrder) {
    if (part == AttentionInputPart::query) {
      l.query_offset = offset;
      offset += query_width;
    } else {
      l.latent_offset = offset;
      offset += latent_width;
    }
  }
  l.width = offset;
  return l;
}

void project_attention_input(const TaskRunner& runner, const ModelConfig& c, const LayerWeights& layer, const float* x,
                             int n_rows, float* out) {
  const TensorView& query = c.q_lora_rank > 0 ? layer.attn_q_a : layer.attn_q;
  std::array<TensorView, 2> stacked;
  for (size_t i = 0; i < kAttentionInputFusionOrder.size(); ++i) {
    stacked[i] = kAttentionInputFusionOrder[i] == AttentionInputPart::query ? query : layer.attn_kv_a_mqa;
  }
  cpu::matmul(runner, stacked, x, n_rows, c.n_embd, out, attention_input_layout(c).width);
}

void gated_ffn(const TaskRunner& runner, const TensorView& gate, const TensorView& up, const TensorView& down,
               const float* x, int n_rows, int x_stride, float* out, int out_stride, std::vector<float>& hidden) {
  const int64_t f = gate.n_rows();
  ensure_size(hidden, static_cast<size_t>(n_rows * 2 * f));
  std::array<TensorView, 2> stacked;
  int64_t gate_offset = 0, up_offset = 0;
  for (size_t i = 0; i < kGateUpFusionOrder.size(); ++i) {
    const bool is_gate = kGateUpFusionOrder[i] == GateUpPart::gate;
    stacked[i] = is_gate ? gate : up;
    (is_gate ? gate_offset : up_offset) = static_cast<int64_t>(i) * f;
  }
  cpu::matmul(runner, stacked, x, n_rows, x_stride, hidden.data(), 2 * f);
  for (int r = 0; r < n_rows; ++r) {
    float* row = hidden.data() + r * 2 * f;
    // h = silu(gate) * up, written over the first F columns.
    cpu::silu_mul(row + gate_offset, row + up_offset, row, f);
  }
  cpu::matmul(runner, {down}, hidden.data(), n_rows, 2 * f, out, out_stride, /*accumulate=*/true);
}

void add_deepseek2_block_tensors(const ModelConfig& c, int il, std::vector<TensorSpec>& out) {
  const auto H = static_cast<uint64_t>(c.n_embd), N = static_cast<uint64_t>(c.n_head);
  const auto Lq = static_cast<uint64_t>(c.q_lora_rank), L = static_cast<uint64_t>(c.kv_lora_rank);
  const auto P = static_cast<uint64_t>(c.qk_nope_head_dim), R = static_cast<uint64_t>(c.qk_rope_head_dim);
  const auto V = static_cast<uint64_t>(c.v_head_dim), E = static_cast<uint64_t>(c.n_expert);
  const auto F = static_cast<uint64_t>(c.n_ff_expert), S = static_cast<uint64_t>(c.n_expert_shared);
  const bool mtp = il >= c.n_layer_main();
  const std::string prefix = "blk." + std::to_string(il) + ".";
  auto add = [&](const std::string& suffix, std::vector<uint64_t> ne, TensorView LayerWeights::*slot, std::string role,
                 TensorNeed need = TensorNeed::required, std::string group = {}, int option = 0) {
    out.push_back({.name = prefix + suffix,
                   .ne = std::move(ne),
                   .need = need,
                   .mtp = mtp,
                   .layer = il,
                   .group = std::move(group),
                   .option = option,
                   .layer_slot = slot,
                   .role = std::move(role)});
  };
  add("attn_norm.weight", {H}, &LayerWeights::attn_norm, "attention RMSNorm");
  if (c.q_lora_rank > 0) {
    add("attn_q_a.weight", {H, Lq}, &LayerWeights::attn_q_a, "query down-projection");
    add("attn_q_a_norm.weight", {Lq}, &LayerWeights::attn_q_a_norm, "query latent RMSNorm");
    add("attn_q_b.weight", {Lq, N * (P + R)}, &LayerWeights::attn_q_b, "query up-projection");
  } else {
    add("attn_q.weight", {H, N * (P + R)}, &LayerWeights::attn_q, "query projection");
  }
  add("attn_kv_a_mqa.weight", {H, L + R}, &LayerWeights::attn_kv_a_mqa, "latent and k_pe projection");
  add("attn_kv_a_norm.weight", {L}, &LayerWeights::attn_kv_a_norm, "latent RMSNorm");
  const std::string up_group = prefix + "{attn_k_b,attn_v_b | attn_kv_b}";
  add("attn_k_b.weight", {P, L, N}, &LayerWeights::attn_k_b, "W_UK, per head transposed", TensorNeed::either, up_group,
      0);
  add("attn_v_b.weight", {L, V, N}, &LayerWeights::attn_v_b, "W_UV per head", TensorNeed::either, up_group, 0);
  add("attn_kv_b.weight", {L, N * (P + V)}, &LayerWeights::attn_kv_b, "fused W_UK|W_UV, per-head interleave",
      TensorNeed::either, up_group, 1);
  add("attn_output.weight", {N * V, H}, &LayerWeights::attn_output, "attention output projection");
  add("ffn_norm.weight", {H}, &LayerWeights::ffn_norm, "FFN RMSNorm");
  if (!c.is_moe_layer(il)) {
    const auto Fd = static_cast<uint64_t>(c.n_ff);
    add("ffn_gate.weight", {H, Fd}, &LayerWeights::ffn_gate, "dense FFN gate");
    add("ffn_up.weight", {H, Fd}, &LayerWeights::ffn_up, "dense FFN up");
    add("ffn_down.weight", {Fd, H}, &LayerWeights::ffn_down, "dense FFN down");
  } else {
    add("ffn_gate_inp.weight", {H, E}, &LayerWeights::ffn_gate_inp, "router");
    add("exp_probs_b.bias", {E}, &LayerWeights::exp_probs_b, "expert selection bias", TensorNeed::optional);
    const std::string exps_group = prefix + "{ffn_gate_exps,ffn_up_exps | ffn_gate_up_exps}";
    add("ffn_gate_exps.weight", {H, F, E}, &LayerWeights::ffn_gate_exps, "routed experts gate", TensorNeed::either,
        exps_group, 0);
    add("ffn_up_exps.weight", {H, F, E}, &LayerWeights::ffn_up_exps, "routed experts up", TensorNeed::either,
        exps_group, 0);
    add("ffn_gate_up_exps.weight", {H, 2 * F, E}, &LayerWeights::ffn_gate_up_exps, "routed experts gate|up",
        TensorNeed::either, exps_group, 1);
    add("ffn_down_exps.weight", {F, H, E}, &LayerWeights::ffn_down_exps, "routed experts down");
    if (S > 0) {
      add("ffn_gate_shexp.weight", {H, F * S}, &LayerWeights::ffn_gate_shexp, "shared experts gate");
      add("ffn_up_shexp.weight", {H, F * S}, &LayerWeights::ffn_up_shexp, "shared experts up");
      add("ffn_down_shexp.weight", {F * S, H}, &LayerWeights::ffn_down_shexp, "shared experts down");
    }
  }
  if (mtp) {
    // Multi-token-prediction extras (llama.cpp names); the whole block is skipped for inference.
    const auto Nv = static_cast<uint64_t>(c.n_vocab);
    add("nextn.eh_proj.weight", {2 * H, H}, nullptr, "MTP projection");
    add("nextn.enorm.weight", {H}, nullptr, "MTP embedding norm");
    add("nextn.hnorm.weight", {H}, nullptr, "MTP hidden norm");
    add("nextn.shared_head_norm.weight", {H}, nullptr, "MTP head norm");
    add("nextn.embed_tokens.weight", {H, Nv}, nullptr, "MTP embedding", TensorNeed::optional);
    add("nextn.shared_head_head.weight", {H, Nv}, nullptr, "MTP head", TensorNeed::optional);
  }
}

// ---- forward pass ----------------------------------------------------------------------------

Deepseek2CpuForward::Deepseek2CpuForward(const ModelState& model, AttentionBackend& backend, const TaskRunner& runner)
    : Deepseek2CpuForward(model.config, model.weights, backend, runner) {}

Deepseek2CpuForward::Deepseek2CpuForward(const ModelConfig& config, const ModelWeights& weights,
                                         AttentionBackend& backend, const TaskRunner& runner, const RankContext* rank)
    : config_(config),
      weights_(weights),
      backend_(backend),
      runner_(runner),
      rope_(config),
      rank_(rank),
      router_(config_.n_dense_lead < config_.n_layer_main() ? RouterParams::from(config_)
                                                            : RouterParams{.n_expert = 1, .n_used = 1}) {
  blocks_.resize(weights_.layers.size());
  for (size_t il = 0; il < weights_.layers.size(); ++il) {
    const LayerWeights& lw = weights_.layers[il];
    blocks_[il] = {.attn_norm = vector_or_empty(lw.attn_norm),
                   .q_a_norm = vector_or_empty(lw.attn_q_a_norm),
                   .kv_a_norm = vector_or_empty(lw.attn_kv_a_norm),
                   .ffn_norm = vector_or_empty(lw.ffn_norm),
                   .exp_probs_b = vector_or_empty(lw.exp_probs_b)};
  }
  output_norm_ = cpu::dequantize_tensor(weights_.output_norm);
}

int Deepseek2CpuForward::select_positions(int, const ForwardBatch&, Activations&, std::vector<int32_t>&) { return 0; }

void Deepseek2CpuForward::run(const ForwardBatch& batch) {
  const int T = static_cast<int>(batch.tokens.size());
  const int H = config_.n_embd;
  const int half = config_.qk_rope_head_dim / 2;
  act_.n_rows = T;
  ensure_size(act_.x, static_cast<size_t>(T) * H);
  ensure_size(act_.xn, static_cast<size_t>(T) * H);
  act_.positions.assign(static_cast<size_t>(T), 0);
  ensure_size(act_.rope_cos, static_cast<size_t>(T) * half);
  ensure_size(act_.rope_sin, static_cast<size_t>(T) * half);

  attention_sequences_.clear();
  for (const BatchSequence& s : batch.sequences) {
    const int n_past = s.cache->n_tokens();
    s.cache->reserve(n_past + s.n_tokens);
    for (int i = 0; i < s.n_tokens; ++i) {
      const int row = s.first_row + i;
      act_.positions[static_cast<size_t>(row)] = n_past + i;
      rope_.angles(n_past + i, act_.rope_cos.data() + static_cast<size_t>(row) * half,
                   act_.rope_sin.data() + static_cast<size_t>(row) * half);
    }
    attention_sequences_.push_back(
        {.cache = nullptr, .n_past = n_past, .first_row = s.first_row, .n_tokens = s.n_tokens});
  }

  taps_ = batch.taps;
  forced_ = batch.forced;
  if (forced_ && batch.sequences.size() != 1) {
    throw Error(ErrorCode::invalid_argument, "forced decisions need a batch of one sequence (this one has " +
                                                 std::to_string(batch.sequences.size()) + ")");
  }
  std::string tap;
  embed_tokens(batch);
  if (tapping(-1, "token_embd", tap)) taps_->emit(tap, -1, {T, H}, act_.x.data());
  for (int il = 0; il < config_.n_layer_main(); ++il) {
    attention_block(il, batch);
    feed_forward_block(il);
    if (tapping(il, "residual", tap)) taps_->emit(tap, il, {T, H}, act_.x.data());
  }
  output_logits(batch);
  for (const BatchSequence& s : batch.sequences) s.cache->set_n_tokens(s.cache->n_tokens() + s.n_tokens);
}

bool Deepseek2CpuForward::tapping(int il, std::string_view tap, std::string& name) const {
  if (taps_ == nullptr) return false;
  name = il < 0 ? std::string(tap) : TapSink::block_name(il, tap);
  return taps_->wants(name);
}

void Deepseek2CpuForward::emit_update(const std::string& name, int il) {
  const size_t n = static_cast<size_t>(act_.n_rows) * config_.n_embd;
  for (size_t i = 0; i < n; ++i) x_before_[i] = act_.x[i] - x_before_[i];
  taps_->emit(name, il, {act_.n_rows, config_.n_embd}, x_before_.data());
}

void Deepseek2CpuForward::embed_tokens(const ForwardBatch& batch) {
  const int H = config_.n_embd;
  for (size_t t = 0; t < batch.tokens.size(); ++t) {
    cpu::dequantize_rows(weights_.token_embd, batch.tokens[t], 1, act_.x.data() + t * H);
  }
}

void Deepseek2CpuForward::attention_block(int il, const ForwardBatch& batch) {
  const ModelConfig& c = config_;
  const LayerWeights& lw = weights_.layers[static_cast<size_t>(il)];
  const BlockVectors& bv = blocks_[static_cast<size_t>(il)];
  const int T = act_.n_rows, H = c.n_embd, N = c.n_head, L = c.kv_lora_rank, R = c.qk_rope_head_dim;
  const int qk = c.qk_head_dim(), half = R / 2;
  const AttentionInputLayout layout = attention_input_layout(c);

  // xn = RMSNorm(x); proj = xn [query ; kv_a]^T
  cpu::rms_norm_rows(act_.x.data(), H, act_.xn.data(), H, T, H, bv.attn_norm.data(), c.rms_norm_eps);
  std::string tap;
  if (tapping(il, "attn_norm", tap)) taps_->emit(tap, il, {T, H}, act_.xn.data());
  ensure_size(act_.proj, static_cast<size_t>(T) * layout.width);
  project_attention_input(runner_, c, lw, act_.xn.data(), T, act_.proj.data());

  // c = RMSNorm(kv_a[:L]); k_pe = kv_a[L:L+R]
  ensure_size(act_.latent, static_cast<size_t>(T) * L);
  ensure_size(act_.k_rope, static_cast<size_t>(T) * R);
  cpu::rms_norm_rows(act_.proj.data() + layout.latent_offset, layout.width, act_.latent.data(), L, T, L,
                     bv.kv_a_norm.data(), c.rms_norm_eps);
  for (int t = 0; t < T; ++t) {
    std::memcpy(act_.k_rope.data() + static_cast<size_t>(t) * R,
                act_.proj.data() + static_cast<size_t>(t) * layout.width + layout.latent_offset + L,
                static_cast<size_t>(R) * sizeof(float));
  }

  // q = q_b(RMSNorm(q_a)) or the query part as is.
  ensure_size(act_.q, static_cast<size_t>(T) * N * qk);
  if (c.q_lora_rank > 0) {
    ensure_size(act_.qa, static_cast<size_t>(T) * c.q_lora_rank);
    cpu::rms_norm_rows(act_.proj.data() + layout.query_offset, layout.width, act_.qa.data(), c.q_lora_rank, T,
                       c.q_lora_rank, bv.q_a_norm.data(), c.rms_norm_eps);
    cpu::matmul(runner_, {lw.attn_q_b}, act_.qa.data(), T, c.q_lora_rank, act_.q.data(), N * qk);
  } else {
    for (int t = 0; t < T; ++t) {
      std::memcpy(act_.q.data() + static_cast<size_t>(t) * N * qk,
                  act_.proj.data() + static_cast<size_t>(t) * layout.width + layout.query_offset,
                  static_cast<size_t>(N) * qk * sizeof(float));
    }
  }

  if (tapping(il, "q", tap)) taps_->emit(tap, il, {T, N, qk}, act_.q.data());
  if (tapping(il, "kv_latent", tap)) taps_->emit(tap, il, {T, L}, act_.latent.data());

  // RoPE on the last R dims of every query head and on k_pe.
  for (int t = 0; t < T; ++t) {
    const float* cs = act_.rope_cos.data() + static_cast<size_t>(t) * half;
    const float* sn = act_.rope_sin.data() + static_cast<size_t>(t) * half;
    for (int h = 0; h < N; ++h) {
      cpu::RotaryEmbedding::rotate_pairs(act_.q.data() + (static_cast<size_t>(t) * N + h) * qk + c.qk_nope_head_dim, cs,
                                         sn, half);
    }
    cpu::RotaryEmbedding::rotate_pairs(act_.k_rope.data() + static_cast<size_t>(t) * R, cs, sn, half);
  }

  if (tapping(il, "q_pe", tap)) {
    taps_->emit_rows(tap, il, {T, N, R}, act_.q.data() + c.qk_nope_head_dim, static_cast<int64_t>(T) * N, R, qk);
  }
  if (tapping(il, "k_pe", tap)) taps_->emit(tap, il, {T, R}, act_.k_rope.data());

  const int width = select_positions(il, batch, act_, selection_);
  if (width > 0 && tapping(il, "index_selection", tap)) {
    const std::vector<float> selected(selection_.begin(), selection_.begin() + static_cast<std::ptrdiff_t>(T) * width);
    taps_->emit(tap, il, {T, width}, selected.data());
  }

  // o = attention over each sequence's cache.
  ensure_size(act_.attn, static_cast<size_t>(T) * N * c.v_head_dim);
  for (size_t s = 0; s < attention_sequences_.size(); ++s) {
    attention_sequences_[s].cache = batch.sequences[s].cache->attention_rows(il);
  }
  backend_.forward({.layer = il,
                    .n_rows = T,
                    .q = act_.q.data(),
                    .latent = act_.latent.data(),
                    .k_rope = act_.k_rope.data(),
                    .sequences = attention_sequences_,
                    .selection = width > 0 ? selection_.data() : nullptr,
                    .selection_width = width,
                    .scale = c.attention_scale(),
                    .out = act_.attn.data(),
                    .runner = &runner_});

  if (tapping(il, "attn_heads", tap)) taps_->emit(tap, il, {T, N, c.v_head_dim}, act_.attn.data());

  // x += o attn_output^T (tensor parallel: this rank's heads' share, then the all-reduce)
  const bool tap_out = tapping(il, "attn_out", tap);
  if (tap_out) x_before_.assign(act_.x.begin(), act_.x.begin() + static_cast<std::ptrdiff_t>(T) * H);
  cpu::matmul(runner_, {lw.attn_output}, act_.attn.data(), T, N * c.v_head_dim, sub_block_output(), H,
              /*accumulate=*/true);
  add_reduced_output();
  if (tap_out) emit_update(tap, il);
}

float* Deepseek2CpuForward::sub_block_output() {
  if (!rank_) return act_.x.data();
  const size_t n = static_cast<size_t>(act_.n_rows) * static_cast<size_t>(config_.n_embd);
  ensure_size(act_.partial, n);
  std::fill(act_.partial.begin(), act_.partial.begin() + static_cast<std::ptrdiff_t>(n), 0.0f);
  return act_.partial.data();
}

void Deepseek2CpuForward::add_reduced_output() {
  if (!rank_) return;
  const size_t n = static_cast<size_t>(act_.n_rows) * static_cast<size_t>(config_.n_embd);
  rank_->communicator->all_reduce_sum(std::span<float>(act_.partial.data(), n));
  for (size_t i = 0; i < n; ++i) act_.x[i] += act_.partial[i];
}

void Deepseek2CpuForward::feed_forward_block(int il) {
  const ModelConfig& c = config_;
  const LayerWeights& lw = weights_.layers[static_cast<size_t>(il)];
  const int T = act_.n_rows, H = c.n_embd;
  cpu::rms_norm_rows(act_.x.data(), H, act_.xn.data(), H, T, H, blocks_[static_cast<size_t>(il)].ffn_norm.data(),
                     c.rms_norm_eps);
  std::string tap;
  if (tapping(il, "ffn_norm", tap)) taps_->emit(tap, il, {T, H}, act_.xn.data());
  const bool tap_out = tapping(il, "ffn_out", tap);
  if (tap_out) x_before_.assign(act_.x.begin(), act_.x.begin() + static_cast<std::ptrdiff_t>(T) * H);
  float* out = sub_block_output();
  if (!c.is_moe_layer(il)) {
    gated_ffn(runner_, lw.ffn_gate, lw.ffn_up, lw.ffn_down, act_.xn.data(), T, H, out, H, act_.hidden);
  } else {
    moe_feed_forward(il, out);
    if (lw.ffn_gate_shexp) {
      gated_ffn(runner_, lw.ffn_gate_shexp, lw.ffn_up_shexp, lw.ffn_down_shexp, act_.xn.data(), T, H, out, H,
                act_.hidden);
    }
  }
  add_reduced_output();
  if (tap_out) emit_update(tap, il);
}

void Deepseek2CpuForward::moe_feed_forward(int il, float* out) {
  const ModelConfig& c = config_;
  const LayerWeights& lw = weights_.layers[static_cast<size_t>(il)];
  const int T = act_.n_rows, H = c.n_embd, E = c.n_expert, K = c.n_expert_used;
  const int64_t F = c.n_ff_expert;

  // Router logits [T, E] and each token's K choices.
  ensure_size(act_.router, static_cast<size_t>(T) * E);
  cpu::matmul(runner_, {lw.ffn_gate_inp}, act_.xn.data(), T, H, act_.router.data(), E);
  choices_.resize(static_cast<size_t>(T) * K);
  const std::vector<float>& bias = blocks_[static_cast<size_t>(il)].exp_probs_b;
  for (int t = 0; t < T; ++t) {
    const std::span<const float> logits(act_.router.data() + static_cast<size_t>(t) * E, static_cast<size_t>(E));
    const std::span<ExpertChoice> row(choices_.data() + static_cast<size_t>(t) * K, static_cast<size_t>(K));
    const int position = act_.positions[static_cast<size_t>(t)];
    const std::vector<int32_t>* ids = forced_ ? forced_->find(DecisionKind::experts, il, position) : nullptr;
    if (ids) {
      const std::string where = "blk." + std::to_string(il) + " position " + std::to_string(position);
      forced_->record({.kind = DecisionKind::experts,
                       .layer = il,
                       .position = position,
                       .tie = router_.route_forced(logits, bias, *ids, row, where)});
    } else {
      router_.route(logits, bias, row);
    }
  }
  std::string tap;
  if (tapping(il, "router_logits", tap)) taps_->emit(tap, il, {T, E}, act_.router.data());
  const bool tap_ids = tapping(il, "expert_ids", tap);
  std::string weights_tap;
  const bool tap_weights = tapping(il, "expert_weights", weights_tap);
  if (tap_ids || tap_weights) {
    // Per row, ascending expert id (the order of selection is an implementation detail).
    std::vector<ExpertChoice> sorted(choices_.begin(), choices_.begin() + static_cast<std::ptrdiff_t>(T) * K);
    std::vector<float> ids(sorted.size()), weights(sorted.size());
    for (int t = 0; t < T; ++t) {
      const auto row = sorted.begin() + static_cast<std::ptrdiff_t>(t) * K;
      std::sort(row, row + K, [](const ExpertChoice& a, const ExpertChoice& b) { return a.expert < b.expert; });
    }
    for (size_t i = 0; i < sorted.size(); ++i) {
      ids[i] = static_cast<float>(sorted[i].expert);
      weights[i] = sorted[i].weight;
    }
    if (tap_ids) taps_->emit(tap, il, {T, K}, ids.data());
    if (tap_weights) taps_->emit(weights_tap, il, {T, K}, weights.data());
  }

  // Tokens per expert, in token order; experts run in index order (deterministic sums).
  std::vector<std::vector<std::pair<int, float>>> assigned(static_cast<size_t>(E));
  for (int t = 0; t < T; ++t) {
    for (int k = 0; k < K; ++k) {
      const ExpertChoice& ch = choices_[static_cast<size_t>(t) * K + k];
      assigned[static_cast<size_t>(ch.expert)].push_back({t, ch.weight});
    }
  }
  // Expert-parallel ranks run only the experts they hold; their tensors start at expert_first.
  const int expert_first = rank_ && rank_->expert_count > 0 ? rank_->expert_first : 0;
  const int expert_end = rank_ && rank_->expert_count > 0 ? expert_first + rank_->expert_count : E;
  for (int e = expert_first; e < expert_end; ++e) {
    const auto& rows = assigned[static_cast<size_t>(e)];
    if (rows.empty()) continue;
    const int local = e - expert_first;
    const int n = static_cast<int>(rows.size());
    ensure_size(gathered_, static_cast<size_t>(n) * H);
    for (int i = 0; i < n; ++i) {
      std::memcpy(gathered_.data() + static_cast<size_t>(i) * H,
                  act_.xn.data() + static_cast<size_t>(rows[i].first) * H, static_cast<size_t>(H) * sizeof(float));
    }
    TensorView gate, up;
    if (lw.ffn_gate_exps && lw.ffn_up_exps) {
      gate = lw.ffn_gate_exps.rows(local * F, F);
      up = lw.ffn_up_exps.rows(local * F, F);
    } else {
      // ffn_gate_up_exps: per expert F gate rows, then F up rows.
      gate = lw.ffn_gate_up_exps.rows(local * 2 * F, F);
      up = lw.ffn_gate_up_exps.rows(local * 2 * F + F, F);
    }
    const TensorView down = lw.ffn_down_exps.rows(static_cast<int64_t>(local) * H, H);
    ensure_size(expert_out_, static_cast<size_t>(n) * H);
    std::fill(expert_out_.begin(), expert_out_.begin() + static_cast<std::ptrdiff_t>(n) * H, 0.0f);
    gated_ffn(runner_, gate, up, down, gathered_.data(), n, H, expert_out_.data(), H, act_.hidden);
    for (int i = 0; i < n; ++i) {
      float* x = out + static_cast<size_t>(rows[i].first) * H;
      const float* y = expert_out_.data() + static_cast<size_t>(i) * H;
      const float w = rows[i].second;
      for (int j = 0; j < H; ++j) x[j] += w * y[j];
    }
  }
}

void Deepseek2CpuForward::output_logits(const ForwardBatch& batch) {
  const int H = config_.n_embd;
  const int n_out = static_cast<int>(batch.logit_rows.size());
  if (n_out == 0) return;
  ensure_size(gathered_, static_cast<size_t>(n_out) * H);
  for (int i = 0; i < n_out; ++i) {
    cpu::rms_norm_rows(act_.x.data() + static_cast<size_t>(batch.logit_rows[i]) * H, H,
                       gathered_.data() + static_cast<size_t>(i) * H, H, 1, H, output_norm_.data(),
                       config_.rms_norm_eps);
  }
  std::string tap;
  if (tapping(-1, "output_norm", tap)) taps_->emit(tap, -1, {n_out, H}, gathered_.data());
  cpu::matmul(runner_, {weights_.output}, gathered_.data(), n_out, H, batch.logits, config_.n_vocab);
  if (tapping(-1, "logits", tap)) taps_->emit(tap, -1, {n_out, config_.n_vocab}, batch.logits);
}

// ---- architecture entry points ---------------------------------------------------------------

const ArchitectureOps& deepseek2_ops() {
  static const ArchitectureOps ops{
      .add_block_tensors = add_deepseek2_block_tensors,
      .create_cpu_forward = [](const ModelState& model, AttentionBackend& backend, const TaskRunner& runner)
          -> std::unique_ptr<ForwardPass> { return std::make_unique<Deepseek2CpuForward>(model, backend, runner); },
      .create_cpu_rank_forward = [](const ModelConfig& config, const ModelWeights& weights, AttentionBackend& backend,
                                    const TaskRunner& runner, const RankContext& rank) -> std::unique_ptr<ForwardPass> {
        return std::make_unique<Deepseek2CpuForward>(config, weights, backend, runner, &rank);
      }};
  return ops;
}

}  // namespace latte::detail
