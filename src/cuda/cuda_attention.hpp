// The CUDA attention backends `mla` and `standard`, registered next to the CPU ones (supports() takes
// Device::cuda). AttentionInput pointers are device pointers, `stream` the cudaStream_t, the sequences'
// cache pointers are their device rows of the layer (DeviceKvStorage).
//
// Every query row of a step is one entry of the attention kernels, with its own visible length
// (position + 1) and a page table that points it at its sequence's cache rows: so prefill chunks,
// decode steps and batches of several sessions (each with its own n_past) run through one launch.
//   mla:      latent cache c|k_pe (576 bf16 per token per layer); q_lat = W_UK^T q_nope by one gathered
//             GEMV over all heads, split-KV absorbed decode kernel (dense or DSA-sparse), W_UV after.
//   standard: per-head K [N, P+R] | V [N, V] bf16 rows, decompressed with attn_kv_b; flash-attention
//             prefill for dense multi-token chunks, split-KV decode (dense or sparse) otherwise.
#pragma once

#include "cuda/device_buffer.hpp"
#include "cuda/device_weights.hpp"
#include "cuda/kv_cache_layout.hpp"
#include "cuda/linear.hpp"

#include <latte/attention.hpp>

#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

namespace latte::cuda {

/// Row-unit page tables: `pages[il * n_rows + row]` is the offset, in kDeviceRowUnit bytes from
/// `base[il]`, of the layer-il cache rows of the sequence that batch row `row` belongs to. The offsets
/// are 64-bit: the sessions' caches are separate allocations, which the driver may place terabytes apart.
struct DeviceStep {
  int n_rows = 0;                                ///< T
  int n_layer = 0;                               ///< layers covered by the page tables
  int max_kv_len = 0;                            ///< host: the longest visible length of any row
  const int32_t* rows = nullptr;                 ///< [T] 0, 1, ... T-1
  const int32_t* positions = nullptr;            ///< [T] position of each row in its sequence
  const int32_t* kv_lens = nullptr;              ///< [T] position + 1
  const int64_t* attn_pages = nullptr;           ///< [n_layer, T]
  const int64_t* index_pages = nullptr;          ///< [n_layer, T] indexer key rows (glm-dsa) or nullptr
  const std::byte* const* attn_base = nullptr;   ///< host [n_layer] base of the attention page tables
  const std::byte* const* index_base = nullptr;  ///< host [n_layer] base of the indexer page tables
};

/// A page-table position that no real position reaches: every position lands in page 0 of its row.
inline constexpr int32_t kRowPageSize = 1 << 30;

/// Builds DeviceStep tables on the host and uploads them (one copy per step).
class DeviceStepTables {
 public:
  struct Sequence {
    int first_row = 0, n_tokens = 0, n_past = 0;
    const std::byte* const* attn_rows = nullptr;   ///< host [n_layer] layer row pointers
    const std::byte* const* index_rows = nullptr;  ///< host [n_layer] or nullptr
  };
  /// Fills the pinned staging copy of the tables (the caller makes sure no earlier upload still reads
  /// it); the returned step's device pointers hold them once upload() has run on the stream.
  DeviceStep stage(std::span<const Sequence> sequences, int n_rows, int n_layer);
  /// Enqueues the copy of the staged tables (graph-capturable: the copy reads the staging at run time).
  void upload(cudaStream_t stream);

 private:
  std::vector<const std::byte*> attn_base_, index_base_;
  size_t bytes_ = 0;                 // of the staged tables
  PinnedBuffer<std::byte> staging_;  // page tables (int64) first, then rows, positions, kv_lens (int32)
  DeviceBuffer<std::byte> device_;
};

/// Interface of the CUDA backends beyond AttentionBackend: forward with the step's tables built once
/// for all layers by the forward pass.
class CudaAttentionBackend : public AttentionBackend {
 public:
  /// The model's device weights (the up-projections); the CUDA forward pass binds them before use.
  void bind(std::shared_ptr<const DeviceWeights> weights) { weights_ = std::move(weights); }
  /// Appends the new rows to the caches and writes input.out, with tables built once per step.
  /// Tables of one layer (step.n_layer == 1) are read as that layer's whatever input.layer is.
  virtual void forward_device(const AttentionInput& input, const DeviceStep& step) = 0;
  /// Builds the tables of this one layer from input.sequences, then forward_device.
  void forward(const AttentionInput& input) override;
  /// Where the producer of q (the rope launch) may also write what the next forward_device of layer `il`
  /// with `n_rows` rows would otherwise make from q itself: the split-int8 records (x_int8.hpp) of each
  /// row's and head's q_nope, row t head h at nope_records + (t n_head + h) records_stride, and q_pe as
  /// bf16 [n_rows, n_head, R]; and the rows' cache rows (row t at cache(cache_batch[t], positions[t]),
  /// the normalised latent from element 0, k_pe from kv_lora_rank, bf16) for that launch to write instead
  /// of the forward's append. A null pointer: that forward does not want it. A caller that takes the
  /// targets must fill every one that is set before that forward, for the rows and positions of `step`.
  struct QueryTargets {
    uint8_t* nope_records = nullptr;
    int64_t records_stride = 0;
    __nv_bfloat16* rope_bf16 = nullptr;
    __nv_bfloat16* nope_bf16 = nullptr;  ///< RopeYarnParams::nope_bf16
    PagedRows<__nv_bfloat16> cache{};
    const int32_t* cache_batch = nullptr;
  };
  virtual QueryTargets query_targets(int /*il*/, int /*n_rows*/, const DeviceStep& /*step*/) { return {}; }
  /// Called with the layer's un-rotated queries q (fp32, before the rope launch: row t head h at q + t
  /// q_token_stride + h (qk_nope + qk_rope)) ahead of query_targets: may start, on a stream of the backend's
  /// own forked from `stream`, work that needs nothing else, which the layer's forward_device then joins.
  /// Returns whether it started anything. (mla: the absorption q_lat = W_UK^T q_nope, beside the rope launch.)
  virtual bool start_query(int /*il*/, int /*n_rows*/, const float* /*q*/, int64_t /*q_token_stride*/,
                           cudaStream_t /*stream*/) {
    return false;
  }
  /// Whether the next forward_device of layer `il` with `n_rows` rows writes its output as bf16 too, in the launch that
  /// makes it, where set_output_bf16 gives it a target (mla: the per-head W_UV of 2-16 rows, heads_product.hpp, and
  /// the batched cuBLAS W_UV of more rows). A caller that wants the output as bf16 otherwise converts it.
  [[nodiscard]] virtual bool writes_output_bf16(int /*il*/, int /*n_rows*/) const { return false; }
  /// A bf16 target for the next forward_device's output (its layout: [n_rows, heads x v_head_dim]). That forward
  /// fills it, whatever path it takes, and forgets it. f32_too = false: the caller reads the bf16 rows only, and a
  /// path whose product can write one of the two (the batched cuBLAS W_UV) may leave the fp32 output unwritten.
  void set_output_bf16(__nv_bfloat16* out, bool f32_too = true) noexcept {
    output_bf16_ = out;
    output_f32_too_ = f32_too;
  }
  void prepare(std::span<const AttentionLayerWeights> layers) override { n_layer_ = static_cast<int>(layers.size()); }

 protected:
  [[nodiscard]] const DeviceLayer& layer(int il) const;
  /// Takes set_output_bf16's target (null: none), for the forward that writes it.
  __nv_bfloat16* take_output_bf16() noexcept { return std::exchange(output_bf16_, nullptr); }
  /// Whether the forward that took a bf16 target must write the fp32 output too (set_output_bf16).
  [[nodiscard]] bool output_f32_too() const noexcept { return output_f32_too_; }
  /// Fills `out_bf16` (when set) with the finished output of `input` ([n_rows, width] fp32), converted.
  static void convert_output_bf16(const AttentionInput& input, int64_t width, __nv_bfloat16* out_bf16);
  std::shared_ptr<const DeviceWeights> weights_;
  int n_layer_ = 0;

 private:
  std::unique_ptr<DeviceStepTables> standalone_;
  __nv_bfloat16* output_bf16_ = nullptr;
  bool output_f32_too_ = true;
};

/// Registry entries of the CUDA backends.
AttentionBackendInfo cuda_mla_backend_info();
AttentionBackendInfo cuda_standard_backend_info();

}  // namespace latte::cuda
