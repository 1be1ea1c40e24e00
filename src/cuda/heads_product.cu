// Per-head fp32 products of a few rows (heads_product.hpp).
#include "cuda/heads_product.hpp"

#include <latte/error.hpp>

#include <cuda_bf16.h>

#include <cstdint>
#include <string>

#include "cuda/check.hpp"
#include "cuda/launch.cuh"

namespace latte::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kMaxStagedBytes = 48 * 1024;

/// Lanes per weight row for k values: the fewest of 8, 16, 32 that read a row in at most 4 float4 each; 0: none.
int lanes_per_row(int k) {
  for (const int g : {8, 16, 32}) {
    if (k % (4 * g) == 0 && k / (4 * g) <= 4) return g;
  }
  return 0;
}

__device__ __forceinline__ float dot4(float4 w, float4 x, float acc) {
  acc = fmaf(w.x, x.x, acc);
  acc = fmaf(w.y, x.y, acc);
  acc = fmaf(w.z, x.z, acc);
  return fmaf(w.w, x.w, acc);
}

/// G lanes per row, two rows per lane group, up to MT rows of A. Lane g of a group holds float4 i * G + g of each
/// of its rows (i < k / 4G).
template <int G, int MT>
__global__ void __launch_bounds__(kWarps * 32) heads_product_kernel(const HeadsProductParams p) {
  constexpr int kSlots = 32 / G;                    // lane groups per warp
  extern __shared__ __align__(16) float4 a_rows[];  // [m][k / 4]
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane % G, slot = lane / G;
  const int b = static_cast<int>(blockIdx.y);
  const int nf4 = p.k / (4 * G);
  const int k4 = p.k / 4;
  const int row0 = static_cast<int>(blockIdx.x) * (kWarps * kSlots * 2) + (warp * kSlots + slot) * 2;

  // the weights are never written by the kernels before: loaded ahead of the wait
  float4 w[2][4];
  const float* wb = p.w + static_cast<int64_t>(b) * p.stride_w;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int row = row0 + j;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      w[j][i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (i < nf4 && row < p.n) {
        w[j][i] = __ldg(reinterpret_cast<const float4*>(wb + static_cast<int64_t>(row) * p.ldw) + i * G + g);
      }
    }
  }
  wait_for_producers();  // see launch.cuh
  allow_dependents();
  const float* ab = p.a + static_cast<int64_t>(b) * p.stride_a;
  for (int e = static_cast<int>(threadIdx.x); e < p.m * k4; e += kWarps * 32) {
    const int t = e / k4, j = e % k4;
    a_rows[e] = *(reinterpret_cast<const float4*>(ab + static_cast<int64_t>(t) * p.lda) + j);
  }
  __syncthreads();

  float acc[2][MT];
#pragma unroll
  for (int t = 0; t < MT; ++t) {
    acc[0][t] = 0.0f;
    acc[1][t] = 0.0f;
    if (t < p.m) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if (i < nf4) {
          const float4 x = a_rows[t * k4 + i * G + g];
          acc[0][t] = dot4(w[0][i], x, acc[0][t]);
          acc[1][t] = dot4(w[1][i], x, acc[1][t]);
        }
      }
    }
  }
#pragma unroll
  for (int t = 0; t < MT; ++t) {
    if (t >= p.m) break;  // the same for every lane: the shuffles stay converged
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      float v = acc[j][t];
#pragma unroll
      for (int o = G / 2; o >= 1; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
      const int row = row0 + j;
      if (g == t % G && row < p.n) {
        const int64_t at = static_cast<int64_t>(t) * p.ldc + static_cast<int64_t>(b) * p.stride_c + row;
        if (p.c != nullptr) p.c[at] = v;
        if (p.c_bf16 != nullptr) p.c_bf16[at] = __float2bfloat16_rn(v);
      }
    }
  }
}

template <int G>
void launch_for_lanes(const HeadsProductParams& p, cudaStream_t stream) {
  constexpr int kRowsPerBlock = kWarps * (32 / G) * 2;
  const dim3 grid(static_cast<unsigned>((p.n + kRowsPerBlock - 1) / kRowsPerBlock), static_cast<unsigned>(p.batch));
  const size_t smem = static_cast<size_t>(p.m) * static_cast<size_t>(p.k) * sizeof(float);
  if (p.m <= 4) {
    launch_kernel(heads_product_kernel<G, 4>, grid, dim3(kWarps * 32), smem, stream, p);
  } else if (p.m <= 8) {
    launch_kernel(heads_product_kernel<G, 8>, grid, dim3(kWarps * 32), smem, stream, p);
  } else {
    launch_kernel(heads_product_kernel<G, 16>, grid, dim3(kWarps * 32), smem, stream, p);
  }
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

}  // namespace

bool heads_product_takes(int m, int k) {
  return m >= 1 && m <= kHeadsProductMaxRows && k > 0 && lanes_per_row(k) != 0 &&
         static_cast<int64_t>(m) * k * static_cast<int64_t>(sizeof(float)) <= kMaxStagedBytes;
}

bool heads_product_takes(const HeadsProductParams& p) {
  return heads_product_takes(p.m, p.k) && p.n > 0 && p.batch > 0 && p.batch <= 65535 && p.a != nullptr &&
         p.w != nullptr && (p.c != nullptr || p.c_bf16 != nullptr) && aligned16(p.a) && aligned16(p.w) &&
         p.lda % 4 == 0 && p.stride_a % 4 == 0 && p.ldw % 4 == 0 && p.stride_w % 4 == 0 && p.lda >= p.k &&
         p.ldw >= p.k && p.ldc >= 1 && p.stride_a >= 0 && p.stride_w >= 0 && p.stride_c >= 0;
}

void heads_product(const HeadsProductParams& p, cudaStream_t stream) {
  if (!heads_product_takes(p)) {
    throw Error(ErrorCode::invalid_argument,
                "heads_product: shape, operands or strides not taken (m=" + std::to_string(p.m) +
                    " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k) + " batch=" + std::to_string(p.batch) +
                    ", lda=" + std::to_string(p.lda) + " ldw=" + std::to_string(p.ldw) + ", output " +
                    (p.c != nullptr || p.c_bf16 != nullptr ? "set" : "missing") + ")");
  }
  switch (lanes_per_row(p.k)) {
    case 8:
      return launch_for_lanes<8>(p, stream);
    case 16:
      return launch_for_lanes<16>(p, stream);
    default:
      return launch_for_lanes<32>(p, stream);
  }
}

}  // namespace latte::cuda
