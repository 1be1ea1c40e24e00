// The deepseek2 architecture (DeepSeek-V2 / V2-Lite / V2.5 / V3 / R1, GLM-4.7-Flash): its block
// tensors and its fp32 CPU forward pass, written as a sequence of named steps per block. glm-dsa
// derives from it and adds the lightning indexer through select_positions().
#pragma once

#include "cpu/rope.hpp"
#include "model/expert_router.hpp"
#include "model/forced_decisions.hpp"
#include "model/forward.hpp"
#include "model/model_state.hpp"

#include <latte/attention.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace latte::detail {

struct RankContext;

/// The first projection of an attention block is one product over stacked weights: the query
/// projection (attn_q_a with q_lora, else attn_q) and attn_kv_a_mqa. Its output columns hold the
/// parts in this order.
enum class AttentionInputPart { query, latent_and_rope };
inline constexpr std::array<AttentionInputPart, 2> kAttentionInputFusionOrder{AttentionInputPart::query,
                                                                              AttentionInputPart::latent_and_rope};

/// The SiLU-gated FFNs (dense, shared experts, routed experts) run gate and up as one product over
/// stacked weights; its output columns hold the parts in this order.
enum class GateUpPart { gate, up };
inline constexpr std::array<GateUpPart, 2> kGateUpFusionOrder{GateUpPart::gate, GateUpPart::up};

/// Column offsets of the fused attention input projection for a config.
struct AttentionInputLayout {
  int query_offset = 0;  ///< Lq (q_lora) or N(P+R) columns of the query part
  int query_width = 0;
  int latent_offset = 0;  ///< L columns of c, then R columns of k_pe
  int width = 0;          ///< total columns
};
AttentionInputLayout attention_input_layout(const ModelConfig& config);

/// x [T, H] -> out [T, layout.width]: the fused first attention projection of one block.
void project_attention_input(const TaskRunner& runner, const ModelConfig& config, const LayerWeights& layer,
                             const float* x, int n_rows, float* out);

/// out[T, H] += down(silu(gate(x)) * up(x)) for x [T, H]; gate/up {H, F}, down {F, H}.
/// `hidden` is scratch of at least T * 2F floats.
void gated_ffn(const TaskRunner& runner, const TensorView& gate, const TensorView& up, const TensorView& down,
               const float* x, int n_rows, int x_stride, float* out, int out_stride, std::vector<float>& hidden);

/// Appends the tensors of deepseek2 block `il` to `out`.
void add_deepseek2_block_tensors(const ModelConfig& config, int il, std::vector<TensorSpec>& out);

/// The fp32 CPU forward pass of deepseek2 models. With a RankContext it is one rank of a
/// tensor-parallel group: `config` and `weights` are the rank's shard (parallel/tensor_parallel_model.hpp)
/// and the attention and FFN outputs are all-reduced before they join the residual stream.
class Deepseek2CpuForward : public ForwardPass {
 public:
  Deepseek2CpuForward(const ModelState& model, AttentionBackend& backend, const TaskRunner& runner);
  Deepseek2CpuForward(const ModelConfig& config, const ModelWeights& weights, AttentionBackend& backend,
                      const TaskRunner& runner, const RankContext* rank = nullptr);
  void run(const ForwardBatch& batch) override;

 protected:
  /// One step's activations; T rows, row-major, widths in floats.
  struct Activations {
    int n_rows = 0;
    std::vector<float> x;                   // [T, H] residual stream
    std::vector<float> xn;                  // [T, H] normalised input of the current sub-block
    std::vector<float> proj;                // [T, layout.width] fused q_a|kv_a (or q|kv_a) output
    std::vector<float> qa;                  // [T, Lq] normalised q_a (q_lora models)
    std::vector<float> q;                   // [T, N(P+R)] per head [nope | rope]
    std::vector<float> latent;              // [T, L] normalised c
    std::vector<float> k_rope;              // [T, R]
    std::vector<float> attn;                // [T, N V] attention output before attn_output
    std::vector<float> hidden;              // FFN scratch
    std::vector<float> router;              // [T, E] router logits
    std::vector<int> positions;             // [T] absolute position of each row
    std::vector<float> rope_cos, rope_sin;  // [T, R/2] angles of each row's position
    std::vector<float> partial;             // [T, H] this rank's share of a sub-block output (tensor parallel)
  };

  /// Restricts each row's attention to chosen cache positions (DSA). Fills `selection` with
  /// [T, width] positions (-1 padding) and returns width, or returns 0 for dense attention.
  virtual int select_positions(int il, const ForwardBatch& batch, Activations& act, std::vector<int32_t>& selection);

  /// Small per-block vectors, dequantized once.
  struct BlockVectors {
    std::vector<float> attn_norm, q_a_norm, kv_a_norm, ffn_norm, exp_probs_b;
  };

  const ModelConfig& config_;
  const ModelWeights& weights_;
  AttentionBackend& backend_;
  const TaskRunner& runner_;
  cpu::RotaryEmbedding rope_;
  std::vector<BlockVectors> blocks_;
  std::vector<float> output_norm_;
  Activations act_;

 private:
  void embed_tokens(const ForwardBatch& batch);
  void attention_block(int il, const ForwardBatch& batch);
  void feed_forward_block(int il);
  void moe_feed_forward(int il, float* out);
  void output_logits(const ForwardBatch& batch);
  /// Whether tap blk.<il>.<tap> (or <tap> for il < 0) is observed this step; sets `name`.
  bool tapping(int il, std::string_view tap, std::string& name) const;
  /// Emits `name` = x - before ([T, H]): the residual update of a sub-block.
  void emit_update(const std::string& name, int il);

  /// Where a sub-block adds its output: the residual stream, or (tensor parallel) the zeroed
  /// partial buffer that add_reduced_output() all-reduces into the residual stream.
  float* sub_block_output();
  void add_reduced_output();

  const RankContext* rank_ = nullptr;

  ExpertRouter router_;
  const TapSink* taps_ = nullptr;  // this step's tap sink, or null

 protected:
  ForcedDecisions* forced_ = nullptr;  // this step's forced decisions, or null

 private:
  std::vector<float> x_before_;  // [T, H] residual stream before a tapped sub-block
  std::vector<AttentionSequence> attention_sequences_;
  std::vector<int32_t> selection_;
  std::vector<ExpertChoice> choices_;
  std::vector<float> gathered_, expert_out_;
};

}  // namespace latte::detail
