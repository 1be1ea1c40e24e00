// How the attention kernels address a KV cache (or any per-token rows) in device memory: a pool of
// pages, each holding `page_size` consecutive token positions of one sequence, found through a page
// table. A contiguous cache per sequence is the special case without a page table.
//
//   PagedRows<const __nv_bfloat16> cache{.data = pool, .page_table = table, .page_stride = 64 * 576,
//                                        .token_stride = 576, .page_size = 64, .page_table_stride = 128};
#pragma once

#include <latte/error.hpp>

#include <cstdint>
#include <string>

namespace latte::cuda {

/// Rows of per-token values of batch entries (sequences). Element (batch b, position pos, head h, index d) is
///   data[page * page_stride + (pos % page_size) * token_stride + h * head_stride + d]
/// where page = page_table[b * page_table_stride + pos / page_size], or, without a page table
/// (page_table == nullptr), page = b and the slot is pos itself (page_size is then unused): a contiguous
/// cache of shape [batch, capacity, ...] with page_stride = elements per sequence.
/// page_table_stride = 0 (or, without a page table, page_stride = 0) makes every batch entry read the same
/// sequence: that is how the T queries of one prefill chunk run through a per-entry (decode) kernel.
/// Page indices are 64-bit, so a table may also address rows anywhere in device memory relative to
/// one base (page_stride then being the unit of the offsets). All strides are in elements. The kernels read rows with 16-byte accesses: `data`, `page_stride`,
/// `token_stride` and `head_stride` must be multiples of 8 bf16 elements (16 bytes).
template <class T>
struct PagedRows {
  T* data = nullptr;                    ///< device pointer to the first element of page 0
  const int64_t* page_table = nullptr;  ///< device [batch, page_table_stride] page indices, or nullptr
  int64_t page_stride = 0;              ///< elements between consecutive pages
  int64_t token_stride = 0;             ///< elements between consecutive positions inside a page
  int64_t head_stride = 0;              ///< elements between heads of one position (0 when one head)
  int32_t page_size = 0;                ///< positions per page (> 0 when page_table is set)
  int32_t page_table_stride = 0;        ///< entries per batch row of page_table
};

/// Output element type of an attention kernel.
enum class AttnOutputType { f32, bf16 };

/// Throws Error(invalid_argument) naming `kernel` and `what` unless the layout is usable with 16-byte
/// row accesses.
template <class T>
void check_paged_rows(const PagedRows<T>& rows, const char* kernel, const char* what) {
  const std::string where = std::string(kernel) + ": " + what;
  require(rows.data != nullptr, ErrorCode::invalid_argument, where + " has a null data pointer");
  require(reinterpret_cast<uintptr_t>(rows.data) % 16 == 0, ErrorCode::invalid_argument,
          where + " data pointer is not 16-byte aligned");
  require(
      rows.page_stride % 8 == 0 && rows.token_stride % 8 == 0 && rows.head_stride % 8 == 0, ErrorCode::invalid_argument,
      where + " strides (page " + std::to_string(rows.page_stride) + ", token " + std::to_string(rows.token_stride) +
          ", head " + std::to_string(rows.head_stride) + " elements) must be multiples of 8 elements (16 bytes)");
  require(rows.page_stride >= 0 && rows.token_stride > 0 && rows.head_stride >= 0, ErrorCode::invalid_argument,
          where + " has a negative or zero stride");
  if (rows.page_table != nullptr) {
    require(rows.page_size > 0 && rows.page_table_stride >= 0, ErrorCode::invalid_argument,
            where + " has a page table but page_size " + std::to_string(rows.page_size) + " is not positive or " +
                "page_table_stride " + std::to_string(rows.page_table_stride) + " is negative");
  }
}

}  // namespace latte::cuda
