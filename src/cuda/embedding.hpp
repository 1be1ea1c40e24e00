// Token embedding lookup from a (possibly quantized) token_embd tensor: out[t] = dequantize(row ids[t]).
// The host validates the ids (an invalid id is an Error, never a read out of bounds); the kernel
// also clamps defensively.
//
//   latte::cuda::validate_token_ids(tokens, vocab);            // host span, throws on a bad id
//   latte::cuda::embedding_lookup({.type = t, .table = w, ...}, stream);
#pragma once

#include <latte/quant.hpp>

#include <cuda_runtime.h>

#include <cstdint>
#include <span>

namespace latte::cuda {

/// Throws Error(invalid_argument) naming the first id outside [0, vocab).
void validate_token_ids(std::span<const int32_t> ids, int64_t vocab);

/// One embedding lookup. Pointers are device pointers.
struct EmbeddingParams {
  GgmlType type = GgmlType::f32;
  const void* table = nullptr;   ///< token_embd {hidden, vocab}: vocab rows of `hidden` values
  int64_t table_bytes = 0;       ///< bytes readable from `table`
  int vocab = 0;                 ///< rows of the table
  int hidden = 0;                ///< values per row
  const int32_t* ids = nullptr;  ///< [n_tokens] token ids (validated on the host)
  int n_tokens = 0;
  float* out = nullptr;    ///< fp32 [n_tokens, out_stride]
  int64_t out_stride = 0;  ///< floats between output rows (>= hidden, multiple of 8)
};

/// Launches the lookup (dequantize_rows with a row list). Throws Error on violated preconditions.
void embedding_lookup(const EmbeddingParams& p, cudaStream_t stream);

}  // namespace latte::cuda
