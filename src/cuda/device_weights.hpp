// A model's weights in device memory, uploaded once at Model::load(path, {.device = Device::cuda(n)}).
// Large matrices keep their GGUF type and bytes (the kernels decode them in place); the stacks the
// forward pass multiplies together are stored back to back so that one launch reads them:
//   attention input  [attn_q_a | attn_kv_a_mqa]  (or [attn_q | attn_kv_a_mqa])  when both share a type
//   gated FFNs       [gate | up]                  (dense, shared experts)       when both share a type
// Norm weights and biases are fp32. The attention up-projections are held in both layouts the two
// attention backends read (absorbed attn_k_b / attn_v_b and fused attn_kv_b); a layout the file lacks
// is converted once on the host and stored as bf16.
//
//   auto weights = latte::cuda::upload_weights(state, 0);   // throws Error(out_of_memory) with the sizes
//   gemv(weights->layers[0].attn_output, ...);
#pragma once

#include "cuda/dequantize.hpp"
#include "cuda/device_buffer.hpp"
#include "model/model_state.hpp"

#include <latte/quant.hpp>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace latte::cuda {

/// One weight matrix in device memory: `rows` rows of `k` values of `type` (GGUF row layout).
struct DeviceMatrix {
  GgmlType type = GgmlType::f32;
  const std::byte* data = nullptr;  ///< nullptr when absent
  int64_t rows = 0;
  int64_t k = 0;
  int64_t row_bytes = 0;
  [[nodiscard]] explicit operator bool() const noexcept { return data != nullptr; }
  [[nodiscard]] int64_t bytes() const noexcept { return rows * row_bytes; }
  /// `count` rows from row `first`.
  [[nodiscard]] DeviceMatrix slice(int64_t first, int64_t count) const noexcept {
    DeviceMatrix m = *this;
    m.data = data + first * row_bytes;
    m.rows = count;
    return m;
  }
};

/// A gated FFN's weights: gate and up (possibly one stacked matrix) and down.
struct DeviceGatedFfn {
  DeviceMatrix gate;     ///< {in, F}
  DeviceMatrix up;       ///< {in, F}
  DeviceMatrix gate_up;  ///< {in, 2F}: gate rows then up rows, when gate and up share a type
  DeviceMatrix down;     ///< {F, out}
  [[nodiscard]] explicit operator bool() const noexcept { return static_cast<bool>(down); }
};

/// The routed experts of a MoE block: E stacked matrices each.
struct DeviceExperts {
  DeviceMatrix gate, up;            ///< all E matrices: rows = E * F (or the fused stack's rows, see stride)
  DeviceMatrix down;                ///< rows = E * H
  int64_t gate_up_stride_rows = 0;  ///< rows between two experts' gate (and up) matrices: F, or 2F when fused
};

/// One inference block.
struct DeviceLayer {
  const float* attn_norm = nullptr;         ///< [H]
  const float* q_a_norm = nullptr;          ///< [Lq] (q_lora models)
  const float* kv_a_norm = nullptr;         ///< [L]
  const float* ffn_norm = nullptr;          ///< [H]
  const float* exp_probs_b = nullptr;       ///< [E] or nullptr
  DeviceMatrix attn_input;                  ///< [query | kv_a] {H, width} when fused, else empty
  DeviceMatrix attn_query;                  ///< attn_q_a {H, Lq} or attn_q {H, N(P+R)}
  DeviceMatrix attn_kv_a;                   ///< {H, L+R}
  DeviceMatrix attn_q_b;                    ///< {Lq, N(P+R)}
  DeviceMatrix k_b;                         ///< {P, L, N}: per head L rows of P values (W_UK_h transposed)
  DeviceMatrix v_b;                         ///< {L, V, N}: per head V rows of L values
  DeviceMatrix kv_b;                        ///< {L, N(P+V)}: per head P rows of W_UK_h then V rows of W_UV_h
  DeviceMatrix attn_output;                 ///< {N V, H}
  DeviceGatedFfn dense;                     ///< dense blocks
  DeviceMatrix router;                      ///< ffn_gate_inp {H, E}
  DeviceExperts experts;                    ///< MoE blocks
  DeviceGatedFfn shared;                    ///< shared experts (S F wide), may be absent
  DeviceMatrix indexer_q_b;                 ///< {Lq, nI dI} (glm-dsa)
  DeviceMatrix indexer_k;                   ///< {H, dI}
  const float* indexer_k_norm = nullptr;    ///< [dI]
  const float* indexer_k_norm_b = nullptr;  ///< [dI]
  DeviceMatrix indexer_proj;                ///< {H, nI}
};

/// Every device tensor of a model, owning the allocations.
class DeviceWeights {
 public:
  int ordinal = 0;
  DeviceMatrix token_embd;             ///< {H, vocab}
  const float* output_norm = nullptr;  ///< [H]
  DeviceMatrix output;                 ///< {H, vocab}
  std::vector<DeviceLayer> layers;
  size_t total_bytes = 0;  ///< device bytes held

  /// Allocates and fills device memory for `bytes` bytes; returns the device copy.
  const std::byte* add(const void* host, size_t bytes, const char* what);

  /// fp32 copies of every layer's W_UK and W_UV (k_b, v_b; rows of bf16_weight_stride(k) values), shared by the
  /// model's sessions (the mla backend's decode steps of a few rows multiply them with cuBLAS): made once, by the
  /// first call, on `stream` and waited for, where all of them take at most `budget_bytes` and half the free
  /// device memory; later calls return at once. Thread-safe. Returns whether the copies exist.
  bool make_heads_f32(int64_t budget_bytes, cudaStream_t stream) const;
  /// Whether make_heads_f32 made the copies (false, then true, never back).
  [[nodiscard]] bool heads_f32_ready() const noexcept;
  /// The fp32 copy of `m` (k_b or v_b of one of the layers) once heads_f32_ready; Error(internal) otherwise.
  [[nodiscard]] const float* heads_f32(const DeviceMatrix& m) const;

  /// A bf16 copy of the output head (rows of bf16_weight_stride(k) values, each the dequantized value rounded
  /// once, as the bf16 GEMMs' scratch holds them), shared by the model's sessions: the logits of many rows at once
  /// multiply it with cuBLAS instead of decoding the quantized head for every 64 rows. Made once, by the first
  /// call, on `stream` and waited for, where it takes at most `budget_bytes` and half the free device memory and
  /// the head is of a quantized type dequantize_rows decodes; later calls return at once. Thread-safe. Returns
  /// whether the copy exists.
  bool make_output_bf16(int64_t budget_bytes, cudaStream_t stream) const;
  /// The copy once make_output_bf16 made it (null before, and for good where it was refused).
  [[nodiscard]] const __nv_bfloat16* output_bf16() const noexcept;

  /// bf16 copies (as make_output_bf16's) of every layer's quantized dense matrices: the attention projections,
  /// W_UK / W_UV and attn_kv_b, the dense FFNs and the shared experts (not the routed experts). Steps of many rows
  /// multiply them with cuBLAS instead of dequantizing each matrix to a scratch in every step, or of decoding it
  /// once per 8 rows on the tensor-core GEMV. Made as make_output_bf16 makes its copy: all of them or none.
  bool make_dense_bf16(int64_t budget_bytes, cudaStream_t stream) const;
  /// The copy of `m` once make_dense_bf16 made them, where `m` is one of those matrices, or the first rows of one
  /// (a query inside the stacked attention input, a gate inside the stacked gate|up); null otherwise.
  [[nodiscard]] const __nv_bfloat16* dense_bf16(const DeviceMatrix& m) const noexcept;
  /// Whether make_dense_bf16 made them (false, then true, never back).
  [[nodiscard]] bool dense_bf16_ready() const noexcept;

 private:
  /// One matrix's copy: its values, and the matrix it was made from.
  struct Copy {
    DeviceBuffer<std::byte> values;
    GgmlType type = GgmlType::f32;
    int64_t rows = 0, k = 0;
  };
  /// Copies of some of the matrices, made once (make_copies) and kept for the model's life.
  struct Copies {
    std::mutex mutex;
    std::atomic<bool> ready{false};
    bool decided = false;                // under mutex: made, or refused for good
    std::map<const void*, Copy> copies;  // by the matrix's device data
  };
  /// The copy in `set` whose first rows `m` is, once `set` is ready; null otherwise.
  static const std::byte* find_copy(const Copies& set, const DeviceMatrix& m) noexcept;
  /// Dequantizes every matrix of `matrices` into a copy of rows of bf16_weight_stride(k) elements of `out` (all
  /// or none of them; see make_heads_f32), once for `set`.
  static bool make_copies(Copies& set, const std::vector<const DeviceMatrix*>& matrices, DequantOut out,
                          int64_t budget_bytes, cudaStream_t stream, const char* what);
  std::vector<DeviceBuffer<std::byte>> buffers_;
  std::shared_ptr<Copies> heads_ = std::make_shared<Copies>();   // make_heads_f32's state
  std::shared_ptr<Copies> output_ = std::make_shared<Copies>();  // make_output_bf16's state
  std::shared_ptr<Copies> dense_ = std::make_shared<Copies>();   // make_dense_bf16's state
};

/// What an upload holds beyond the blocks.
struct UploadOptions {
  bool output = true;        ///< the output head (a tensor-parallel rank other than 0 computes no logits)
  int64_t output_first = 0;  ///< with output: its first row held (a vocabulary slice of a tensor-parallel rank)
  int64_t output_rows = -1;  ///< with output: rows held from output_first; -1: all
  std::string label = "";    ///< names the upload in errors, e.g. "rank 1 of 2"
};

/// Device bytes an upload of `weights` (views with the shapes of `config`) takes.
size_t device_bytes_needed(const ModelConfig& config, const detail::ModelWeights& weights,
                           const UploadOptions& options = {});

/// Uploads `weights` (views with the shapes of `config`: the whole model, or one tensor-parallel
/// rank's shard) to CUDA device `ordinal`; errors as below, naming `path` and options.label.
std::shared_ptr<const DeviceWeights> upload_weights(const ModelConfig& config, const detail::ModelWeights& weights,
                                                    const std::string& path, int ordinal,
                                                    const UploadOptions& options = {});

/// Uploads the weights of a loaded model to CUDA device `ordinal`. Throws Error(invalid_argument) for
/// a bad ordinal (naming the device count), Error(out_of_memory) saying how many bytes are needed and
/// how many are free, Error(unsupported) for a tensor type without a GPU kernel (naming the tensor).
std::shared_ptr<const DeviceWeights> upload_weights(const detail::ModelState& state, int ordinal);

/// Makes `ordinal` the calling thread's current device; throws Error(invalid_argument) when it does
/// not exist (the message names the count of devices).
void use_device(int ordinal);

}  // namespace latte::cuda
