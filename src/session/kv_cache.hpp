// The per-sequence cache of a Session: for every inference layer, one row per token in the
// attention backend's layout, plus (glm-dsa) the lightning indexer's key per token. Rows are
// contiguous per layer and token-ordered, so the state can be saved, restored, copied and
// truncated byte-exactly.
//
//   latte::detail::KvCache cache(n_layer, backend.kv_layout(), indexer_dim, n_ctx);
//   cache.reserve(cache.n_tokens() + n_new);  // then the forward pass writes rows, then commit
#pragma once

#include <latte/attention.hpp>

#include <cstddef>
#include <span>
#include <vector>

namespace latte::detail {

/// Token rows of every layer of one sequence. Capacity grows on demand up to n_ctx.
class KvCache {
 public:
  /// `n_layer` inference layers, the backend's row layout, indexer keys of `indexer_dim` floats
  /// per token per layer (0 = none), at most `n_ctx` tokens.
  KvCache(int n_layer, KvLayout layout, int indexer_dim, int n_ctx);

  [[nodiscard]] int n_layer() const noexcept { return static_cast<int>(attention_.size()); }
  [[nodiscard]] int n_ctx() const noexcept { return n_ctx_; }
  /// Tokens whose rows are valid.
  [[nodiscard]] int n_tokens() const noexcept { return n_tokens_; }
  [[nodiscard]] const KvLayout& layout() const noexcept { return layout_; }
  [[nodiscard]] int indexer_dim() const noexcept { return indexer_dim_; }
  /// Tokens that fit without reallocating.
  [[nodiscard]] int capacity() const noexcept { return capacity_; }

  /// Makes room for `n_tokens` tokens (<= n_ctx). Row contents are kept.
  void reserve(int n_tokens);
  /// Marks the first `n` rows valid (after a forward pass wrote them, or to truncate).
  void set_n_tokens(int n);

  /// Layer `il`'s attention rows: [capacity, layout.bytes_per_token()] bytes.
  [[nodiscard]] std::byte* attention_rows(int il) noexcept { return attention_[static_cast<size_t>(il)].data(); }
  [[nodiscard]] const std::byte* attention_rows(int il) const noexcept {
    return attention_[static_cast<size_t>(il)].data();
  }
  /// Layer `il`'s indexer keys: [capacity, indexer_dim] floats (empty without an indexer).
  [[nodiscard]] float* indexer_keys(int il) noexcept { return indexer_[static_cast<size_t>(il)].data(); }
  [[nodiscard]] const float* indexer_keys(int il) const noexcept { return indexer_[static_cast<size_t>(il)].data(); }

  /// Bytes of valid state per token over all layers (attention rows plus indexer keys).
  [[nodiscard]] size_t bytes_per_token() const noexcept;

 private:
  KvLayout layout_;
  int indexer_dim_ = 0;
  int n_ctx_ = 0;
  int n_tokens_ = 0;
  int capacity_ = 0;
  std::vector<std::vector<std::byte>> attention_;  // per layer [capacity * bytes_per_token]
  std::vector<std::vector<float>> indexer_;        // per layer [capacity * indexer_dim]
};

}  // namespace latte::detail
