// Device-side pseudo-random fills (see random_fill.hpp): a splitmix64 hash of (seed, index) per value.
#include "cuda/random_fill.hpp"

#include "cuda/check.hpp"

#include <latte/error.hpp>

#include <algorithm>
#include <cstdint>

namespace latte::cuda {
namespace {

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// Uniform in [0, 1) from the top 24 bits of the hash.
__device__ __forceinline__ float unit_uniform(uint64_t seed, size_t i) {
  return static_cast<float>(splitmix64(seed * 0x632be59bd9b4e019ull + i) >> 40) * (1.0f / 16777216.0f);
}

__global__ void fill_uniform_bf16_kernel(__nv_bfloat16* dst, size_t count, float lo, float hi, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count; i += size_t{gridDim.x} * blockDim.x) {
    dst[i] = __float2bfloat16_rn(lo + (hi - lo) * unit_uniform(seed, i));
  }
}

__global__ void fill_uniform_int32_kernel(int32_t* dst, size_t count, int32_t lo, int32_t hi, uint64_t seed) {
  const uint64_t range = static_cast<uint64_t>(static_cast<int64_t>(hi) - lo + 1);
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count; i += size_t{gridDim.x} * blockDim.x) {
    dst[i] = static_cast<int32_t>(lo + static_cast<int64_t>(splitmix64(seed * 0x632be59bd9b4e019ull + i) % range));
  }
}

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 4096;  // grid-stride beyond this

int blocks_for(size_t count) {
  return static_cast<int>(std::min<size_t>(kMaxBlocks, (count + kThreads - 1) / kThreads));
}

}  // namespace

void run_fill_uniform_bf16(__nv_bfloat16* dst, size_t count, float lo, float hi, uint64_t seed, cudaStream_t stream) {
  require(dst != nullptr || count == 0, ErrorCode::invalid_argument, "fill_uniform_bf16: null destination");
  require(lo < hi, ErrorCode::invalid_argument, "fill_uniform_bf16: needs lo < hi");
  if (count == 0) return;
  fill_uniform_bf16_kernel<<<blocks_for(count), kThreads, 0, stream>>>(dst, count, lo, hi, seed);
  LATTE_CUDA_CHECK_LAUNCH();
}

void run_fill_uniform_int32(int32_t* dst, size_t count, int32_t lo, int32_t hi, uint64_t seed, cudaStream_t stream) {
  require(dst != nullptr || count == 0, ErrorCode::invalid_argument, "fill_uniform_int32: null destination");
  require(lo <= hi, ErrorCode::invalid_argument, "fill_uniform_int32: needs lo <= hi");
  if (count == 0) return;
  fill_uniform_int32_kernel<<<blocks_for(count), kThreads, 0, stream>>>(dst, count, lo, hi, seed);
  LATTE_CUDA_CHECK_LAUNCH();
}

}  // namespace latte::cuda
