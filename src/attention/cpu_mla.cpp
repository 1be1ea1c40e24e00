// The weight-absorbed (MLA) CPU backend. Per head h, with W_UK_h [P, L] and W_UV_h [V, L]:
//   q_lat = W_UK_h^T q_nope                     [L]
//   s_j   = scale * ([q_lat | q_pe] . [c_j | k_pe_j])   over cached tokens j
//   o_lat = softmax(s) . c                      [L]
//   o_h   = W_UV_h o_lat                        [V]
// The cache holds c|k_pe: L + R floats per token per layer (576 for DeepSeek and GLM). W_UK / W_UV
// are read from attn_k_b / attn_v_b as stored (quantized or not), dequantized per use.
#include "attention/cpu_backends.hpp"
#include "attention/cpu_softmax.hpp"
#include "attention/up_projections.hpp"
#include "cpu/matmul.hpp"

#include <latte/error.hpp>

#include <Eigen/Core>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace latte::detail {

namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstStrided = Eigen::Map<const RowMatrix, 0, Eigen::OuterStride<>>;

class CpuMlaBackend final : public AttentionBackend {
 public:
  explicit CpuMlaBackend(const ModelConfig& config) : config_(config) {}

  [[nodiscard]] std::string_view name() const noexcept override { return "mla"; }

  [[nodiscard]] KvLayout kv_layout() const override {
    return {.values_per_token = config_.kv_lora_rank + config_.qk_rope_head_dim, .element_type = GgmlType::f32};
  }

  void prepare(std::span<const AttentionLayerWeights> layers) override {
    layers_.clear();
    for (const auto& layer : layers) layers_.push_back(absorbed_up_projections(layer, config_));
  }

  void forward(const AttentionInput& in) override {
    const int N = config_.n_head, L = config_.kv_lora_rank, R = config_.qk_rope_head_dim;
    const int P = config_.qk_nope_head_dim, V = config_.v_head_dim, qk = P + R, row = L + R;
    if (in.layer < 0 || in.layer >= static_cast<int>(layers_.size())) {
      throw Error(ErrorCode::internal, "mla backend: layer " + std::to_string(in.layer) + " was not prepared");
    }
    const AbsorbedUpProjections& up = layers_[static_cast<size_t>(in.layer)];
    const TaskRunner serial;  // products inside a task run on its thread
    scratch_.resize(static_cast<size_t>(std::max(1, in.runner ? in.runner->n_workers : 1)));

    for (const AttentionSequence& seq : in.sequences) {
      const int64_t kv_total = seq.n_past + seq.n_tokens;
      const TaskRunner& runner = runner_for(
          static_cast<int64_t>(seq.n_tokens) * N * (P * L + kv_total * (row + L) + L * V), in.runner, serial);
      float* cache = reinterpret_cast<float*>(seq.cache);
      for (int i = 0; i < seq.n_tokens; ++i) {
        float* dst = cache + static_cast<size_t>(seq.n_past + i) * row;
        std::memcpy(dst, in.latent + static_cast<size_t>(seq.first_row + i) * L,
                    sizeof(float) * static_cast<size_t>(L));
        std::memcpy(dst + L, in.k_rope + static_cast<size_t>(seq.first_row + i) * R,
                    sizeof(float) * static_cast<size_t>(R));
      }
      const int n_blocks = (seq.n_tokens + kCpuQueryBlock - 1) / kCpuQueryBlock;
      runner(N * n_blocks, [&](int task, int worker) {
        const int h = task / n_blocks, block = task % n_blocks;
        const int i0 = block * kCpuQueryBlock, nb = std::min(kCpuQueryBlock, seq.n_tokens - i0);
        const int first_row = seq.first_row + i0, first_position = seq.n_past + i0;
        const int n_kv = first_position + nb;  // the block's last query sees positions < n_kv
        Scratch& s = scratch_[static_cast<size_t>(worker)];
        s.query.resize(static_cast<size_t>(nb) * row);
        s.scores.resize(static_cast<size_t>(nb) * n_kv);
        s.latent_out.resize(static_cast<size_t>(nb) * L);

        // [q_lat | q_pe] rows: q_lat = q_nope W_UK_h, with head h's L rows of P values in k_b.
        const float* q_head = in.q + (static_cast<size_t>(first_row) * N + h) * qk;
        cpu::matmul(serial, {up.k_b.rows(static_cast<int64_t>(h) * L, L)}, q_head, nb, N * qk, s.query.data(), row);
        const ConstStrided q_pe(q_head + P, nb, R, Eigen::OuterStride<>(N * qk));
        Eigen::Map<RowMatrix> query(s.query.data(), nb, row);
        query.rightCols(R) = q_pe;

        // Scores over the latent cache, masked and normalised.
        const Eigen::Map<const RowMatrix> kv(cache, n_kv, row);
        Eigen::Map<RowMatrix> scores(s.scores.data(), nb, n_kv);
        scores.noalias() = (query * kv.transpose()) * in.scale;
        mask_and_softmax(s.scores.data(), nb, n_kv, first_position,
                         in.selection ? in.selection + static_cast<size_t>(first_row) * in.selection_width : nullptr,
                         in.selection_width, s.mask);

        // o_lat = p c; o_h = o_lat W_UV_h^T, with head h's V rows of L values in v_b.
        Eigen::Map<RowMatrix> latent_out(s.latent_out.data(), nb, L);
        latent_out.noalias() = scores * kv.leftCols(L);
        cpu::matmul(serial, {up.v_b.rows(static_cast<int64_t>(h) * V, V)}, s.latent_out.data(), nb, L,
                    in.out + (static_cast<size_t>(first_row) * N + h) * V, N * V);
      });
    }
  }

 private:
  struct Scratch {
    std::vector<float> query, scores, latent_out;
    std::vector<char> mask;
  };
  ModelConfig config_;
  std::vector<AbsorbedUpProjections> layers_;
  std::vector<Scratch> scratch_;
};

}  // namespace

AttentionBackendInfo cpu_mla_backend_info() {
  return {.name = "mla",
          .description = "weight-absorbed MLA: caches c|k_pe (L+R floats per token per layer); CPU, fp32",
          .supports = [](const ModelConfig&, Device device) { return device.is_cpu(); },
          .create = [](const ModelConfig& config, Device) -> std::unique_ptr<AttentionBackend> {
            return std::make_unique<CpuMlaBackend>(config);
          }};
}

}  // namespace latte::detail
