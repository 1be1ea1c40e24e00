// The forward pass interface: one call runs every inference layer over a batch of new tokens that
// may belong to several sequences (each with its own cache), and writes the requested logits.
// Implementations: the fp32 CPU pass of each architecture (deepseek2.cpp, glm_dsa.cpp).
//
// For a device pass (CUDA): implement ForwardPass with the same per-block steps (Deepseek2CpuForward
// names them: attention_block = norm, fused q_a|kv_a product, q_b, RoPE, select_positions, backend,
// attn_output; feed_forward_block = norm, dense or routed + shared experts), add a factory next to
// create_cpu_forward in ArchitectureOps, and register device backends under "mla" / "standard" with
// supports() accepting Device::cuda. AttentionInput pointers are then device pointers, `stream` the
// cudaStream_t, and the KvCache rows must live in device memory (the CPU KvCache keeps host vectors;
// its layout, rows per layer in token order, is what save/restore and truncate rely on).
//
// Activation taps (include/latte/diagnostics.hpp lists the names, shapes and order): a pass emits
// them through ForwardBatch::taps when it is not null. A device pass does the same after copying
// each wanted tensor to the host: ask `taps->wants(name)` first and copy only those, then call
// emit() with the host copy; emission order and shapes must follow the list in diagnostics.hpp so
// `latte diagnose` can compare a device pass with the CPU one. Observing must not change results.
#pragma once

#include "session/kv_cache.hpp"

#include <latte/diagnostics.hpp>
#include <latte/token.hpp>

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace latte::detail {

class ForcedDecisions;

/// One sequence of a batch. Its new tokens are the contiguous batch rows
/// [first_row, first_row + n_tokens), at positions cache->n_tokens() ... in order.
struct BatchSequence {
  KvCache* cache = nullptr;
  int first_row = 0;
  int n_tokens = 0;
};

/// Where a forward pass sends its activation taps (a Session's TapObserver behind it).
class TapSink {
 public:
  explicit TapSink(const TapObserver& observer) : observer_(observer) {}

  /// Whether the observer reads tap `name` (copy or gather it only then).
  [[nodiscard]] bool wants(std::string_view name) const { return !observer_.wants || observer_.wants(name); }

  /// Hands a contiguous host tensor to the observer.
  void emit(std::string_view name, int layer, std::initializer_list<int64_t> shape, const float* data) const;

  /// Gathers `n_rows` rows of `row_width` floats found every `row_stride` floats from `first`, and
  /// emits them as one tensor of `shape` (whose product is n_rows * row_width).
  void emit_rows(std::string_view name, int layer, std::initializer_list<int64_t> shape, const float* first,
                 int64_t n_rows, int64_t row_width, int64_t row_stride) const;

  /// "blk.<layer>.<tap>".
  static std::string block_name(int layer, std::string_view tap);

 private:
  const TapObserver& observer_;
  mutable std::vector<float> gather_;
};

/// A step over new tokens. The pass reserves cache room, writes each layer's rows and, at the end,
/// advances every sequence's cache by its n_tokens.
struct ForwardBatch {
  std::span<const Token> tokens;             ///< [T] token ids (already validated)
  std::span<const BatchSequence> sequences;  ///< cover rows [0, T) in order
  std::span<const int> logit_rows;           ///< batch rows whose logits are wanted
  float* logits = nullptr;                   ///< [logit_rows.size(), n_vocab]
  /// Optional, for passes whose writes_logit_rows() is true: logit row i goes to logit_dest[i] (n_vocab
  /// floats) instead of logits + i * n_vocab (a batch of sequences, each row straight into its session).
  std::span<float* const> logit_dest{};
  const TapSink* taps = nullptr;             ///< activation taps to emit, or null
  /// CPU passes: decisions to take instead of their own, each checked and recorded there
  /// (model/forced_decisions.hpp; batches of one sequence only); null: the pass's own.
  ForcedDecisions* forced = nullptr;
};

/// Runs the model.
class ForwardPass {
 public:
  virtual ~ForwardPass() = default;
  virtual void run(const ForwardBatch& batch) = 0;
  /// Whether run() honours ForwardBatch::logit_dest (else the caller passes contiguous `logits`).
  [[nodiscard]] virtual bool writes_logit_rows() const noexcept { return false; }
};

}  // namespace latte::detail
