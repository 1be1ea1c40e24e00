// A session's KV cache rows in device memory (KvRowStorage): per layer, the attention backend's rows
// (bf16) and, for glm-dsa, the indexer keys (bf16, dI values per token). Capacity grows by copying on
// the device; allocations are rounded to whole 256-token blocks so that every layer's rows start at a
// multiple of kDeviceRowUnit bytes (the unit of the page tables that batch several sessions together).
#pragma once

#include "cuda/device_buffer.hpp"
#include "session/kv_cache.hpp"

#include <cstddef>
#include <cstdint>

namespace latte::cuda {

/// Page-table unit of the batched attention launches: row addresses are multiples of it (bytes).
inline constexpr int64_t kDeviceRowUnit = 256;

class DeviceKvStorage final : public detail::KvRowStorage {
 public:
  /// `n_layer` layers of `row_bytes` bytes per token and `indexer_row_bytes` (0: none) per token.
  DeviceKvStorage(int n_layer, size_t row_bytes, size_t indexer_row_bytes);

  void grow(int capacity, int keep) override;
  [[nodiscard]] std::byte* attention_rows(int il) noexcept override {
    return attention_.data() + static_cast<size_t>(il) * layer_bytes();
  }
  [[nodiscard]] std::byte* indexer_keys(int il) noexcept override {
    return indexer_.data() + static_cast<size_t>(il) * indexer_layer_bytes();
  }
  [[nodiscard]] int capacity() const noexcept { return capacity_; }

 private:
  [[nodiscard]] size_t layer_bytes() const noexcept { return static_cast<size_t>(capacity_) * row_bytes_; }
  [[nodiscard]] size_t indexer_layer_bytes() const noexcept {
    return static_cast<size_t>(capacity_) * indexer_row_bytes_;
  }

  int n_layer_;
  size_t row_bytes_, indexer_row_bytes_;
  int capacity_ = 0;
  DeviceBuffer<std::byte> attention_;  // [n_layer, capacity, row_bytes]
  DeviceBuffer<std::byte> indexer_;    // [n_layer, capacity, indexer_row_bytes]
};

}  // namespace latte::cuda
