// KV-cache append (see kv_cache_append.hpp): every thread copies one "unit" of kVec consecutive values of a
// row (16 bytes of bf16 source, or 4 fp32 values), units flattened over (token, head, segment); the CTAs of
// one resident wave stride over them. kVec is chosen at launch from the pointers', strides' and offsets'
// alignment (1 where any is odd: scalar copies). Before, one CTA per (token, head) with threads along the row
// made the decompressed prefill's k_pe copy -- 16,896 positions x 16 heads of 64 values -- 270,336 CTAs of 64
// threads that took 328 us for 35 MB on an H100 (ncu, BENCHMARKS.md twenty-first round): the launch was bound
// by how fast the GPU starts CTAs, not by memory.
#include "cuda/kv_cache_append.hpp"

#include "cuda/check.hpp"
#include "cuda/kv_cache_layout.cuh"
#include "cuda/launch.cuh"

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

namespace latte::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kCtasPerSm = 8;  // 2,048 resident threads per SM

template <int kVec>
struct alignas(2 * kVec) Bf16Vec {
  __nv_bfloat16 v[kVec];
};
template <class Src, int kVec>
struct alignas(sizeof(Src) * kVec) SrcVec {
  Src v[kVec];
};

template <class Src>
__device__ __forceinline__ __nv_bfloat16 to_bf16(Src v) {
  if constexpr (std::is_same_v<Src, float>) {
    return __float2bfloat16_rn(v);
  } else {
    return v;
  }
}

/// dst[0, n) = bf16(src[0, n)) for n <= kVec: one vector load and store when n == kVec.
template <class Src, int kVec>
__device__ __forceinline__ void copy_unit(__nv_bfloat16* dst, const Src* src, int n) {
  if (kVec > 1 && n == kVec) {
    const SrcVec<Src, kVec> in = *reinterpret_cast<const SrcVec<Src, kVec>*>(src);
    Bf16Vec<kVec> out;
#pragma unroll
    for (int j = 0; j < kVec; ++j) out.v[j] = to_bf16(in.v[j]);
    *reinterpret_cast<Bf16Vec<kVec>*>(dst) = out;
    return;
  }
  for (int j = 0; j < n; ++j) dst[j] = to_bf16(src[j]);
}

/// Copy units of vec values in one (token, head) row: the main segment's, then the tail's.
__host__ __device__ __forceinline__ int main_units(const KvCacheAppendParams& p, int vec) {
  return (p.dim + vec - 1) / vec;
}
__host__ __device__ __forceinline__ int row_units(const KvCacheAppendParams& p, int vec) {
  return main_units(p, vec) + (p.tail_src != nullptr ? (p.tail_dim + vec - 1) / vec : 0);
}

template <class Src, int kVec>
__global__ void __launch_bounds__(kThreads) kv_cache_append_kernel(const KvCacheAppendParams p) {
  wait_for_producers();  // see launch.cuh
  allow_dependents();
  const int tail_start = main_units(p, kVec), per_row = row_units(p, kVec);
  const int64_t units = int64_t{p.n_tokens} * p.n_heads * per_row;
  // token-major, then head, then unit: neighbouring threads write neighbouring bytes of the cache
  for (int64_t u = int64_t{blockIdx.x} * kThreads + threadIdx.x; u < units; u += int64_t{gridDim.x} * kThreads) {
    const int64_t r = u / per_row;  // (token, head) row
    const int c = static_cast<int>(u - r * per_row);
    const int i = static_cast<int>(r / p.n_heads);
    const int h = static_cast<int>(r - int64_t{i} * p.n_heads);
    const int b = p.batch_index != nullptr ? p.batch_index[i] : 0;
    __nv_bfloat16* row = p.dst.data + paged_rows_offset(p.dst, b, p.positions[i]);
    if (c < tail_start) {
      const int d = c * kVec;
      copy_unit<Src, kVec>(row + static_cast<int64_t>(h) * p.dst.head_stride + p.dst_offset + d,
                           static_cast<const Src*>(p.src) + static_cast<int64_t>(i) * p.src_token_stride +
                               static_cast<int64_t>(h) * p.src_head_stride + d,
                           min(kVec, p.dim - d));
    } else {  // the tail segment (one head, checked at launch)
      const int d = (c - tail_start) * kVec;
      copy_unit<Src, kVec>(row + p.tail_dst_offset + d,
                           static_cast<const Src*>(p.tail_src) + static_cast<int64_t>(i) * p.tail_src_token_stride + d,
                           min(kVec, p.tail_dim - d));
    }
  }
}

/// The widest copy unit (8, 4, 2 or 1 values) whose vector accesses every pointer, stride and offset of `p`
/// keeps aligned: at most 16 bytes of source and of cache per access.
int vector_width(const KvCacheAppendParams& p) {
  const int64_t src_bytes = p.src_type == AppendSourceType::f32 ? 4 : 2;
  for (int v : {8, 4, 2}) {
    if (v * src_bytes > 16) continue;
    const auto aligned = [&](const void* ptr, int64_t bytes) {
      return ptr == nullptr || reinterpret_cast<uintptr_t>(ptr) % static_cast<uintptr_t>(bytes) == 0;
    };
    bool ok = aligned(p.src, v * src_bytes) && aligned(p.dst.data, v * 2) && p.src_token_stride % v == 0 &&
              (p.n_heads == 1 || p.src_head_stride % v == 0) && p.dst.token_stride % v == 0 &&
              p.dst.page_stride % v == 0 && (p.n_heads == 1 || p.dst.head_stride % v == 0) && p.dst_offset % v == 0;
    if (p.tail_src != nullptr) {
      ok = ok && aligned(p.tail_src, v * src_bytes) && p.tail_src_token_stride % v == 0 && p.tail_dst_offset % v == 0;
    }
    if (ok) return v;
  }
  return 1;
}

template <class Src>
void launch_append(const KvCacheAppendParams& p, unsigned ctas, int vec, cudaStream_t stream) {
  switch (vec) {
    case 8:
      launch_kernel(kv_cache_append_kernel<Src, 8>, dim3(ctas), dim3(kThreads), 0, stream, p);
      break;
    case 4:
      launch_kernel(kv_cache_append_kernel<Src, 4>, dim3(ctas), dim3(kThreads), 0, stream, p);
      break;
    case 2:
      launch_kernel(kv_cache_append_kernel<Src, 2>, dim3(ctas), dim3(kThreads), 0, stream, p);
      break;
    default:
      launch_kernel(kv_cache_append_kernel<Src, 1>, dim3(ctas), dim3(kThreads), 0, stream, p);
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
  int device = 0, sm_count = 0;
  LATTE_CUDA_CHECK(cudaGetDevice(&device));
  LATTE_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
  const int vec = vector_width(p);
  const int64_t units = int64_t{p.n_tokens} * p.n_heads * row_units(p, vec);
  const int64_t wave = std::max<int64_t>(int64_t{sm_count} * kCtasPerSm, 1);
  const auto ctas = static_cast<unsigned>(std::min((units + kThreads - 1) / kThreads, wave));
  if (p.src_type == AppendSourceType::f32) {
    launch_append<float>(p, ctas, vec, stream);
  } else {
    launch_append<__nv_bfloat16>(p, ctas, vec, stream);
  }
}

}  // namespace latte::cuda
