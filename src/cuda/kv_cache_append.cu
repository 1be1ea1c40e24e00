// KV-cache append (see kv_cache_append.hpp): one CTA per (token, head), threads along the row.
#include "cuda/kv_cache_append.hpp"

#include "cuda/check.hpp"
#include "cuda/kv_cache_layout.cuh"
#include "cuda/launch.cuh"

#include <cstdint>
#include <string>
#include <type_traits>

namespace latte::cuda {
namespace {

/// dst[0, n) = bf16(src[0, n)), the CTA's threads along the row.
template <class Src>
__device__ __forceinline__ void store_row(__nv_bfloat16* dst, const Src* src, int n) {
  for (int d = threadIdx.x; d < n; d += blockDim.x) {
    if constexpr (std::is_same_v<Src, float>) {
      dst[d] = __float2bfloat16_rn(src[d]);
    } else {
      dst[d] = src[d];
    }
  }
}

template <class Src>
__global__ void kv_cache_append_kernel(const KvCacheAppendParams p) {
  wait_for_producers();  // see launch.cuh
  allow_dependents();
  const int i = blockIdx.x;
  const int h = blockIdx.y;
  const int b = p.batch_index != nullptr ? p.batch_index[i] : 0;
  const int pos = p.positions[i];
  __nv_bfloat16* row = p.dst.data + paged_rows_offset(p.dst, b, pos);
  store_row(row + static_cast<int64_t>(h) * p.dst.head_stride + p.dst_offset,
            static_cast<const Src*>(p.src) + static_cast<int64_t>(i) * p.src_token_stride +
                static_cast<int64_t>(h) * p.src_head_stride,
            p.dim);
  if (p.tail_src != nullptr) {
    store_row(row + p.tail_dst_offset,
              static_cast<const Src*>(p.tail_src) + static_cast<int64_t>(i) * p.tail_src_token_stride, p.tail_dim);
  }
}

}  // namespace

void run_kv_cache_append(const KvCacheAppendParams& p, cudaStream_t stream) {
  const std::string what = "kv_cache_append(tokens " + std::to_string(p.n_tokens) + ", heads " +
                           std::to_string(p.n_heads) + ", dim " + std::to_string(p.dim) + ")";
  require(p.n_tokens >= 0 && p.n_heads >= 1 && p.n_heads <= 65535 && p.dim >= 1 && p.dst_offset >= 0,
          ErrorCode::invalid_argument,
          what + ": needs n_tokens >= 0, 1 <= n_heads <= 65535, dim >= 1, dst_offset >= 0");
  require(p.src != nullptr && p.positions != nullptr && p.dst.data != nullptr, ErrorCode::invalid_argument,
          what + ": src, positions and dst.data must be set");
  require(p.n_heads > 1 || p.dst.token_stride >= p.dst_offset + p.dim, ErrorCode::invalid_argument,
          what + ": dst_offset + dim exceeds the cache row (token_stride " + std::to_string(p.dst.token_stride) + ")");
  if (p.tail_src != nullptr) {
    require(p.n_heads == 1 && p.tail_dim >= 1 && p.tail_dst_offset >= 0 &&
                p.dst.token_stride >= p.tail_dst_offset + p.tail_dim,
            ErrorCode::invalid_argument, what + ": the tail segment needs one head and must fit the cache row");
  }
  if (p.dst.page_table != nullptr) {
    require(p.dst.page_size > 0 && p.dst.page_table_stride >= 0, ErrorCode::invalid_argument,
            what + ": the cache has a page table but no positive page_size");
  }
  if (p.n_tokens == 0) return;
  const dim3 grid(p.n_tokens, p.n_heads);
  const int threads = p.dim >= 256 ? 256 : 64;
  if (p.src_type == AppendSourceType::f32) {
    launch_kernel(kv_cache_append_kernel<float>, grid, threads, 0, stream, p);
  } else {
    launch_kernel(kv_cache_append_kernel<__nv_bfloat16>, grid, threads, 0, stream, p);
  }
}

}  // namespace latte::cuda
