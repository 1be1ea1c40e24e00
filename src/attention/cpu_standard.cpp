// The decompressed (standard) CPU backend: every new token's latent is expanded once into per-head
// keys and values, k_nope_h = W_UK_h c and v_h = W_UV_h c, and cached with the shared k_pe:
//   row per token per layer = [K_0 | ... | K_{N-1} | V_0 | ... | V_{N-1}],  K_h = [k_nope_h | k_pe]
// (N(P+R) + NV floats). Attention is then ordinary multi-head attention with head widths P+R / V.
// It reads the fused attn_kv_b layout natively, so comparing it with `mla` (which reads attn_k_b /
// attn_v_b) also checks that the two layouts in a file agree.
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
using Strided = Eigen::Map<RowMatrix, 0, Eigen::OuterStride<>>;

class CpuStandardBackend final : public AttentionBackend {
 public:
  explicit CpuStandardBackend(const ModelConfig& config) : config_(config) {}

  [[nodiscard]] std::string_view name() const noexcept override { return "standard"; }

  [[nodiscard]] KvLayout kv_layout() const override {
    return {.values_per_token = config_.n_head * (config_.qk_head_dim() + config_.v_head_dim),
            .element_type = GgmlType::f32};
  }

  void prepare(std::span<const AttentionLayerWeights> layers) override {
    layers_.clear();
    for (const auto& layer : layers) layers_.push_back(fused_up_projection(layer, config_));
  }

  void forward(const AttentionInput& in) override {
    const int N = config_.n_head, L = config_.kv_lora_rank, R = config_.qk_rope_head_dim;
    const int P = config_.qk_nope_head_dim, V = config_.v_head_dim, qk = P + R;
    const int row = N * (qk + V);
    if (in.layer < 0 || in.layer >= static_cast<int>(layers_.size())) {
      throw Error(ErrorCode::internal, "standard backend: layer " + std::to_string(in.layer) + " was not prepared");
    }
    const TensorView& kv_b = layers_[static_cast<size_t>(in.layer)].kv_b;  // N(P+V) rows of L values
    const TaskRunner serial;                                               // products inside a task run on its thread
    scratch_.resize(static_cast<size_t>(std::max(1, in.runner ? in.runner->n_workers : 1)));

    for (const AttentionSequence& seq : in.sequences) {
      const int64_t kv_total = seq.n_past + seq.n_tokens;
      const TaskRunner& runner =
          runner_for(static_cast<int64_t>(seq.n_tokens) * N * (L * (P + V) + kv_total * (qk + V)), in.runner, serial);
      float* cache = reinterpret_cast<float*>(seq.cache);
      // Decompress the new tokens, one head per task: [n, P+V] = c W_kv_h^T.
      runner(N, [&](int h, int worker) {
        Scratch& s = scratch_[static_cast<size_t>(worker)];
        s.expanded.resize(static_cast<size_t>(seq.n_tokens) * (P + V));
        cpu::matmul(serial, {kv_b.rows(static_cast<int64_t>(h) * (P + V), P + V)},
                    in.latent + static_cast<size_t>(seq.first_row) * L, seq.n_tokens, L, s.expanded.data(), P + V);
        for (int i = 0; i < seq.n_tokens; ++i) {
          float* dst = cache + static_cast<size_t>(seq.n_past + i) * row;
          const float* src = s.expanded.data() + static_cast<size_t>(i) * (P + V);
          std::memcpy(dst + h * qk, src, sizeof(float) * static_cast<size_t>(P));
          std::memcpy(dst + h * qk + P, in.k_rope + static_cast<size_t>(seq.first_row + i) * R,
                      sizeof(float) * static_cast<size_t>(R));
          std::memcpy(dst + N * qk + h * V, src + P, sizeof(float) * static_cast<size_t>(V));
        }
      });

      const int n_blocks = (seq.n_tokens + kCpuQueryBlock - 1) / kCpuQueryBlock;
      runner(N * n_blocks, [&](int task, int worker) {
        const int h = task / n_blocks, block = task % n_blocks;
        const int i0 = block * kCpuQueryBlock, nb = std::min(kCpuQueryBlock, seq.n_tokens - i0);
        const int first_row = seq.first_row + i0, first_position = seq.n_past + i0;
        const int n_kv = first_position + nb;
        Scratch& s = scratch_[static_cast<size_t>(worker)];
        s.scores.resize(static_cast<size_t>(nb) * n_kv);

        const ConstStrided q(in.q + (static_cast<size_t>(first_row) * N + h) * qk, nb, qk,
                             Eigen::OuterStride<>(N * qk));
        const ConstStrided k(cache + static_cast<size_t>(h) * qk, n_kv, qk, Eigen::OuterStride<>(row));
        Eigen::Map<RowMatrix> scores(s.scores.data(), nb, n_kv);
        scores.noalias() = (q * k.transpose()) * in.scale;
        mask_and_softmax(s.scores.data(), nb, n_kv, first_position,
                         in.selection ? in.selection + static_cast<size_t>(first_row) * in.selection_width : nullptr,
                         in.selection_width, s.mask);
        const ConstStrided v(cache + static_cast<size_t>(N) * qk + static_cast<size_t>(h) * V, n_kv, V,
                             Eigen::OuterStride<>(row));
        Strided out(in.out + (static_cast<size_t>(first_row) * N + h) * V, nb, V, Eigen::OuterStride<>(N * V));
        out.noalias() = scores * v;
      });
    }
  }

 private:
  struct Scratch {
    std::vector<float> expanded, scores;
    std::vector<char> mask;
  };
  ModelConfig config_;
  std::vector<FusedUpProjection> layers_;
  std::vector<Scratch> scratch_;
};

}  // namespace

AttentionBackendInfo cpu_standard_backend_info() {
  return {.name = "standard",
          .description = "decompressed attention: caches per-head K (P+R) and V floats per token per layer; CPU, fp32",
          .supports = [](const ModelConfig&, Device device) { return device.is_cpu(); },
          .create = [](const ModelConfig& config, Device) -> std::unique_ptr<AttentionBackend> {
            return std::make_unique<CpuStandardBackend>(config);
          }};
}

}  // namespace latte::detail
