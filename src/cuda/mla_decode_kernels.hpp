// Internal to the MLA decode implementation (not a public interface): the kernel argument block and
// the compiled kernel configurations. mla_decode.cu holds the plan, the launcher and the 16-row
// kernel; mla_decode_wide.cu the 64-row kernel for many heads.
#pragma once

#include "cuda/mla_decode.hpp"

#include <cstddef>

namespace latte::cuda::mla_decode_detail {

/// Kernel arguments: the caller's params plus the plan.
struct Launch {
  MlaDecodeParams p;
  int rows_total;      // q_len * n_heads: (query token, head) rows per sequence
  int splits;          // KV splits per sequence
  int chunk;           // positions (dense) or index slots (sparse) per split
  float score_scale;   // scale * log2(e): scores are kept in the log2 domain
  float* partial_out;  // [batch * rows_total, splits, 512] when splits > 1 (and not merged in clusters)
  float* partial_lse;  // [batch * rows_total, splits]
  int cluster;         // 1: the splits of a (row group, sequence) are one cluster and merge in the launch
};

/// One compiled kernel configuration.
struct KernelInfo {
  void (*kernel)(Launch);
  int rows;           // (token, head) rows per CTA
  int tile_tokens;    // cache positions per pipeline stage
  int threads;        // per CTA
  size_t smem_bytes;  // dynamic shared memory per CTA
};

/// The 64-row kernel (mla_decode_wide.cu).
KernelInfo wide_kernel_info();

}  // namespace latte::cuda::mla_decode_detail
