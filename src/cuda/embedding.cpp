#include "cuda/embedding.hpp"

#include <latte/error.hpp>

#include <cstdint>
#include <string>

#include "cuda/dequantize.hpp"

namespace latte::cuda {

void validate_token_ids(std::span<const int32_t> ids, int64_t vocab) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      throw Error(ErrorCode::invalid_argument, "token id " + std::to_string(ids[i]) + " at position " +
                                                   std::to_string(i) + " is outside the vocabulary [0, " +
                                                   std::to_string(vocab) + ")");
    }
  }
}

void embedding_lookup(const EmbeddingParams& p, cudaStream_t stream) {
  if (p.ids == nullptr && p.n_tokens > 0) throw Error(ErrorCode::invalid_argument, "embedding_lookup: ids not set");
  dequantize_rows({.type = p.type,
                   .weight = p.table,
                   .weight_bytes = p.table_bytes,
                   .n_source_rows = p.vocab,
                   .n_rows = p.n_tokens,
                   .k = p.hidden,
                   .row_ids = p.ids,
                   .out = p.out,
                   .out_stride = p.out_stride,
                   .out_type = DequantOut::f32},
                  stream);
}

}  // namespace latte::cuda
