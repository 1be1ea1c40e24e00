#include "cuda/device_kv_storage.hpp"

#include <cuda_runtime.h>

#include <algorithm>

namespace latte::cuda {

DeviceKvStorage::DeviceKvStorage(int n_layer, size_t row_bytes, size_t indexer_row_bytes)
    : n_layer_(n_layer), row_bytes_(row_bytes), indexer_row_bytes_(indexer_row_bytes) {}

void DeviceKvStorage::grow(int capacity, int keep) {
  if (capacity <= capacity_) return;
  // 256-token blocks: layer strides are then multiples of 256 bytes for any even row size.
  const int new_capacity = (capacity + 255) / 256 * 256;
  const size_t new_layer = static_cast<size_t>(new_capacity) * row_bytes_;
  const size_t new_indexer_layer = static_cast<size_t>(new_capacity) * indexer_row_bytes_;
  DeviceBuffer<std::byte> attention(static_cast<size_t>(n_layer_) * new_layer, "KV cache rows");
  DeviceBuffer<std::byte> indexer(static_cast<size_t>(n_layer_) * new_indexer_layer, "indexer key cache");
  const int kept = std::min(keep, capacity_);
  for (int il = 0; il < n_layer_ && kept > 0; ++il) {
    LATTE_CUDA_CHECK(cudaMemcpy(attention.data() + static_cast<size_t>(il) * new_layer, attention_rows(il),
                                static_cast<size_t>(kept) * row_bytes_, cudaMemcpyDeviceToDevice));
    if (indexer_row_bytes_ > 0) {
      LATTE_CUDA_CHECK(cudaMemcpy(indexer.data() + static_cast<size_t>(il) * new_indexer_layer, indexer_keys(il),
                                  static_cast<size_t>(kept) * indexer_row_bytes_, cudaMemcpyDeviceToDevice));
    }
  }
  attention_ = std::move(attention);
  indexer_ = std::move(indexer);
  capacity_ = new_capacity;
}

}  // namespace latte::cuda
