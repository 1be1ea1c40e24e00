#include "session/kv_cache.hpp"

#include <latte/error.hpp>

#include <algorithm>

namespace latte::detail {

KvCache::KvCache(int n_layer, KvLayout layout, int indexer_dim, int n_ctx)
    : layout_(layout), indexer_dim_(indexer_dim), n_ctx_(n_ctx) {
  if (n_layer <= 0 || n_ctx <= 0 || indexer_dim < 0 || layout.values_per_token <= 0) {
    throw Error(ErrorCode::invalid_argument, "KV cache: invalid dimensions");
  }
  attention_.resize(static_cast<size_t>(n_layer));
  indexer_.resize(static_cast<size_t>(n_layer));
}

KvCache KvCache::clone() const {
  if (storage_ || forward_state) {
    throw Error(ErrorCode::unsupported,
                "KV cache: rows in device memory or split over ranks cannot be copied on the host");
  }
  KvCache copy(n_layer(), layout_, indexer_dim_, n_ctx_);
  copy.n_tokens_ = n_tokens_;
  copy.capacity_ = capacity_;
  copy.attention_ = attention_;
  copy.indexer_ = indexer_;
  return copy;
}

void KvCache::reserve(int n_tokens) {
  if (n_tokens > n_ctx_) {
    throw Error(ErrorCode::context_overflow,
                "KV cache: " + std::to_string(n_tokens) + " tokens exceed n_ctx " + std::to_string(n_ctx_));
  }
  if (n_tokens <= capacity_) return;
  // Grow geometrically (amortised copies), never past n_ctx.
  const int new_capacity = std::min(n_ctx_, std::max(n_tokens, std::max(64, capacity_ * 2)));
  if (storage_) {
    storage_->grow(new_capacity, n_tokens_);
    capacity_ = new_capacity;
    return;
  }
  const size_t row = layout_.bytes_per_token();
  for (auto& layer : attention_) layer.resize(static_cast<size_t>(new_capacity) * row);
  if (indexer_dim_ > 0) {
    for (auto& layer : indexer_) layer.resize(static_cast<size_t>(new_capacity) * static_cast<size_t>(indexer_dim_));
  }
  capacity_ = new_capacity;
}

void KvCache::set_n_tokens(int n) {
  if (n < 0 || n > capacity_) {
    throw Error(ErrorCode::internal,
                "KV cache: " + std::to_string(n) + " tokens outside capacity " + std::to_string(capacity_));
  }
  n_tokens_ = n;
}

void KvCache::attach_row_storage(std::unique_ptr<KvRowStorage> storage) {
  if (n_tokens_ != 0 || storage_) {
    throw Error(ErrorCode::internal, "KV cache: row storage can only be attached to an empty cache, once");
  }
  storage_ = std::move(storage);
  for (auto& layer : attention_) std::vector<std::byte>().swap(layer);
  for (auto& layer : indexer_) std::vector<float>().swap(layer);
  capacity_ = 0;
}

size_t KvCache::bytes_per_token() const noexcept {
  return attention_.size() * (layout_.bytes_per_token() + static_cast<size_t>(indexer_dim_) * sizeof(float));
}

}  // namespace latte::detail
