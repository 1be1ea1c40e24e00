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
#include <memory>
#include <span>
#include <vector>

namespace latte::detail {

/// Rows kept outside the host vectors (device memory), supplied by a device forward pass. Layer `il`'s
/// attention rows are [capacity, layout.bytes_per_token()] bytes and its indexer keys [capacity, row]
/// in the storage's own element type, both token-ordered like the host rows.
class KvRowStorage {
 public:
  virtual ~KvRowStorage() = default;
  /// Makes room for at least `capacity` tokens, keeping the rows of the first `keep` tokens.
  virtual void grow(int capacity, int keep) = 0;
  [[nodiscard]] virtual std::byte* attention_rows(int il) noexcept = 0;
  [[nodiscard]] virtual std::byte* indexer_keys(int il) noexcept = 0;
};

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

  /// An independent copy of a cache whose rows are on the host (fork). Throws Error(unsupported)
  /// for device rows or per-rank state, which cannot be copied this way.
  [[nodiscard]] KvCache clone() const;

  /// Bytes of valid state per token over all layers (attention rows plus indexer keys).
  [[nodiscard]] size_t bytes_per_token() const noexcept;

  /// Moves the rows into `storage` (device memory) before any token is cached; from then on reserve()
  /// grows the storage and attention_rows() / indexer_keys() must not be used (host rows stay empty).
  /// Throws Error(internal) when tokens are already cached.
  void attach_row_storage(std::unique_ptr<KvRowStorage> storage);
  /// The attached storage, or nullptr for host rows.
  [[nodiscard]] KvRowStorage* row_storage() const noexcept { return storage_.get(); }

  /// State a forward pass keeps per sequence beyond these rows, owned by the sequence so that any
  /// forward pass of the same model can continue it (a tensor-parallel model keeps each rank's
  /// cache here). Empty for the plain forward passes.
  std::shared_ptr<void> forward_state{};

 private:
  KvLayout layout_;
  int indexer_dim_ = 0;
  int n_ctx_ = 0;
  int n_tokens_ = 0;
  int capacity_ = 0;
  std::vector<std::vector<std::byte>> attention_;  // per layer [capacity * bytes_per_token]
  std::vector<std::vector<float>> indexer_;        // per layer [capacity * indexer_dim]
  std::unique_ptr<KvRowStorage> storage_;          // device rows, when attached
};

}  // namespace latte::detail
