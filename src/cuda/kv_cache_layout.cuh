// Device-side addressing of PagedRows (see kv_cache_layout.hpp).
#pragma once

#include <cstdint>
#include "cuda/kv_cache_layout.hpp"

namespace latte::cuda {

/// The page that holds position `pos` of batch entry `b` (a global load when there is a page table).
template <class T>
__device__ __forceinline__ int64_t paged_rows_page(const PagedRows<T>& rows, int b, int pos) {
  if (rows.page_table == nullptr) return b;
  return __ldg(&rows.page_table[static_cast<int64_t>(b) * rows.page_table_stride + pos / rows.page_size]);
}

/// Element offset of (page, position) from rows.data, head 0, index 0.
template <class T>
__device__ __forceinline__ int64_t paged_rows_offset_in_page(const PagedRows<T>& rows, int64_t page, int pos) {
  const int slot = rows.page_table == nullptr ? pos : pos % rows.page_size;
  return page * rows.page_stride + static_cast<int64_t>(slot) * rows.token_stride;
}

/// Element offset of position `pos` of batch entry `b`, head 0, index 0.
template <class T>
__device__ __forceinline__ int64_t paged_rows_offset(const PagedRows<T>& rows, int b, int pos) {
  return paged_rows_offset_in_page(rows, paged_rows_page(rows, b, pos), pos);
}

}  // namespace latte::cuda
