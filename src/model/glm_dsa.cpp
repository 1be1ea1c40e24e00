// glm-dsa (GLM-5): deepseek2 blocks plus the DeepSeek Sparse Attention lightning indexer, which
// picks for every query the top_k cache positions the main attention may use.
//
// Per block, from the block's normalised input xn [T, H] and normalised q_a output qa [T, Lq]:
//   q_I = qa indexer.attn_q_b^T          [T, nI, dI]
//   k_I = LayerNorm(xn indexer.attn_k^T)  [T, dI]       (weight and bias; cached per token)
//   RoPE (interleaved, the model's frequencies) on the first R dims of every q_I head and of k_I
//   w   = xn indexer.proj^T * nI^-0.5     [T, nI]
//   I[t, s] = sum_h w[t, h] * ReLU(q_I[t, h] . k_I[s] * dI^-0.5)   for cache positions s <= t
//   selection[t] = the top_k positions by I (ties: lower position), or every position <= t when
//   there are at most top_k of them (then attention is dense).
#include "model/glm_dsa.hpp"

#include "cpu/matmul.hpp"
#include "cpu/norms.hpp"
#include "model/architecture.hpp"
#include "model/weights.hpp"

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <optional>
#include <string>

namespace latte::detail {

namespace {
using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
}  // namespace

void add_glm_dsa_block_tensors(const ModelConfig& c, int il, std::vector<TensorSpec>& out) {
  add_deepseek2_block_tensors(c, il, out);
  const auto H = static_cast<uint64_t>(c.n_embd), Lq = static_cast<uint64_t>(c.q_lora_rank);
  const auto nI = static_cast<uint64_t>(c.indexer.n_head), dI = static_cast<uint64_t>(c.indexer.head_dim);
  const std::string prefix = "blk." + std::to_string(il) + ".";
  const bool mtp = il >= c.n_layer_main();
  auto add = [&](const char* suffix, std::vector<uint64_t> ne, TensorView LayerWeights::*slot, const char* role) {
    out.push_back(
        {.name = prefix + suffix, .ne = std::move(ne), .mtp = mtp, .layer = il, .layer_slot = slot, .role = role});
  };
  add("indexer.attn_q_b.weight", {Lq, nI * dI}, &LayerWeights::indexer_attn_q_b, "indexer query projection");
  add("indexer.attn_k.weight", {H, dI}, &LayerWeights::indexer_attn_k, "indexer key projection");
  add("indexer.k_norm.weight", {dI}, &LayerWeights::indexer_k_norm, "indexer key LayerNorm weight");
  add("indexer.k_norm.bias", {dI}, &LayerWeights::indexer_k_norm_b, "indexer key LayerNorm bias");
  add("indexer.proj.weight", {H, nI}, &LayerWeights::indexer_proj, "indexer head weights");
}

void select_top_positions(std::span<const float> scores, int top_k, std::span<int32_t> out) {
  const int n = static_cast<int>(scores.size());
  thread_local std::vector<int32_t> order;
  order.resize(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  const int k = std::min(top_k, n);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    return scores[static_cast<size_t>(a)] > scores[static_cast<size_t>(b)] ||
           (scores[static_cast<size_t>(a)] == scores[static_cast<size_t>(b)] && a < b);
  });
  std::sort(order.begin(), order.begin() + k);
  std::fill(out.begin(), out.end(), -1);
  std::copy(order.begin(), order.begin() + k, out.begin());
}

GlmDsaCpuForward::GlmDsaCpuForward(const ModelState& model, AttentionBackend& backend, const TaskRunner& runner)
    : GlmDsaCpuForward(model.config, model.weights, backend, runner, nullptr) {}

GlmDsaCpuForward::GlmDsaCpuForward(const ModelConfig& config, const ModelWeights& weights, AttentionBackend& backend,
                                   const TaskRunner& runner, const RankContext* rank)
    : Deepseek2CpuForward(config, weights, backend, runner, rank) {
  key_norms_.resize(weights_.layers.size());
  for (size_t il = 0; il < weights_.layers.size(); ++il) {
    key_norms_[il].weight = cpu::dequantize_tensor(weights_.layers[il].indexer_k_norm);
    key_norms_[il].bias = cpu::dequantize_tensor(weights_.layers[il].indexer_k_norm_b);
  }
}

int GlmDsaCpuForward::select_positions(int il, const ForwardBatch& batch, Activations& act,
                                       std::vector<int32_t>& selection) {
  const ModelConfig& c = config_;
  const LayerWeights& lw = weights_.layers[static_cast<size_t>(il)];
  const int T = act.n_rows, H = c.n_embd, nI = c.indexer.n_head, dI = c.indexer.head_dim;
  const int half = c.qk_rope_head_dim / 2, top_k = c.indexer.top_k;

  // Keys of the new tokens: LayerNorm(xn attn_k^T), roped, appended to each sequence's cache.
  keys_.resize(static_cast<size_t>(T) * dI);
  cpu::matmul(runner_, {lw.indexer_attn_k}, act.xn.data(), T, H, keys_.data(), dI);
  cpu::layer_norm_rows(keys_.data(), dI, keys_.data(), dI, T, dI, key_norms_[static_cast<size_t>(il)].weight.data(),
                       key_norms_[static_cast<size_t>(il)].bias.data(), c.indexer.norm_eps);
  for (int t = 0; t < T; ++t) {
    cpu::RotaryEmbedding::rotate_pairs(keys_.data() + static_cast<size_t>(t) * dI,
                                       act.rope_cos.data() + static_cast<size_t>(t) * half,
                                       act.rope_sin.data() + static_cast<size_t>(t) * half, half);
  }
  bool any_sparse = false;
  for (const BatchSequence& s : batch.sequences) {
    const int n_past = s.cache->n_tokens();
    std::copy_n(keys_.data() + static_cast<size_t>(s.first_row) * dI, static_cast<size_t>(s.n_tokens) * dI,
                s.cache->indexer_keys(il) + static_cast<size_t>(n_past) * dI);
    any_sparse = any_sparse || n_past + s.n_tokens > top_k;
  }
  if (!any_sparse) return 0;  // every query sees at most top_k positions: dense attention

  // Queries [T, nI, dI] from the normalised q_a, roped; head weights [T, nI] with both scales.
  queries_.resize(static_cast<size_t>(T) * nI * dI);
  cpu::matmul(runner_, {lw.indexer_attn_q_b}, act.qa.data(), T, c.q_lora_rank, queries_.data(), nI * dI);
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < nI; ++h) {
      cpu::RotaryEmbedding::rotate_pairs(queries_.data() + (static_cast<size_t>(t) * nI + h) * dI,
                                         act.rope_cos.data() + static_cast<size_t>(t) * half,
                                         act.rope_sin.data() + static_cast<size_t>(t) * half, half);
    }
  }
  head_weights_.resize(static_cast<size_t>(T) * nI);
  cpu::matmul(runner_, {lw.indexer_proj}, act.xn.data(), T, H, head_weights_.data(), nI);
  const float weight_scale = 1.0f / std::sqrt(static_cast<float>(nI)) / std::sqrt(static_cast<float>(dI));
  for (float& w : head_weights_) w *= weight_scale;

  selection.resize(static_cast<size_t>(T) * top_k);
  scores_.resize(static_cast<size_t>(runner_.n_workers));
  forced_ties_.assign(static_cast<size_t>(T), std::nullopt);
  for (const BatchSequence& s : batch.sequences) {
    const int n_past = s.cache->n_tokens();
    const float* keys = s.cache->indexer_keys(il);
    runner_(s.n_tokens, [&](int i, int worker) {
      const int row = s.first_row + i;
      const int n_kv = n_past + i + 1;  // causal: positions 0 .. n_past + i
      std::span<int32_t> out(selection.data() + static_cast<size_t>(row) * top_k, static_cast<size_t>(top_k));
      const std::vector<int32_t>* forced = forced_ ? forced_->find(DecisionKind::selection, il, n_past + i) : nullptr;
      const std::string where = forced ? "blk." + std::to_string(il) + " position " + std::to_string(n_past + i) : "";
      if (n_kv <= top_k) {
        std::fill(out.begin(), out.end(), -1);
        std::iota(out.begin(), out.begin() + n_kv, 0);
        // Every position is selected; a forced selection must say the same (no decision to check).
        if (forced) (void)force_selection(std::vector<float>(static_cast<size_t>(n_kv)), top_k, *forced, out, where);
        return;
      }
      // per_head [nI, n_kv] = q_I[row] K^T, then I = w . ReLU(per_head) summed over heads.
      std::vector<float>& sc = scores_[static_cast<size_t>(worker)];
      sc.resize(static_cast<size_t>(nI) * n_kv + static_cast<size_t>(n_kv));
      const Eigen::Map<const RowMatrix> q(queries_.data() + static_cast<size_t>(row) * nI * dI, nI, dI);
      const Eigen::Map<const RowMatrix> k(keys, n_kv, dI);
      Eigen::Map<RowMatrix> per_head(sc.data(), nI, n_kv);
      per_head.noalias() = q * k.transpose();
      const Eigen::Map<const Eigen::RowVectorXf> w(head_weights_.data() + static_cast<size_t>(row) * nI, nI);
      Eigen::Map<Eigen::RowVectorXf> index(sc.data() + static_cast<size_t>(nI) * n_kv, n_kv);
      index.noalias() = w * per_head.cwiseMax(0.0f);
      const std::span<const float> row_scores(index.data(), static_cast<size_t>(n_kv));
      if (forced) {
        forced_ties_[static_cast<size_t>(row)] = force_selection(row_scores, top_k, *forced, out, where);
      } else {
        select_top_positions(row_scores, top_k, out);
      }
    });
    for (int i = 0; i < s.n_tokens; ++i) {
      const std::optional<NearTie>& tie = forced_ties_[static_cast<size_t>(s.first_row + i)];
      if (tie) {
        forced_->record({.kind = DecisionKind::selection, .layer = il, .position = n_past + i, .tie = *tie});
      }
    }
  }
  return top_k;
}

const ArchitectureOps& glm_dsa_ops() {
  static const ArchitectureOps ops{
      .add_block_tensors = add_glm_dsa_block_tensors,
      .create_cpu_forward = [](const ModelState& model, AttentionBackend& backend, const TaskRunner& runner)
          -> std::unique_ptr<ForwardPass> { return std::make_unique<GlmDsaCpuForward>(model, backend, runner); },
      .create_cpu_rank_forward = [](const ModelConfig& config, const ModelWeights& weights, AttentionBackend& backend,
                                    const TaskRunner& runner, const RankContext& rank) -> std::unique_ptr<ForwardPass> {
        return std::make_unique<GlmDsaCpuForward>(config, weights, backend, runner, &rank);
      }};
  return ops;
}

}  // namespace latte::detail
