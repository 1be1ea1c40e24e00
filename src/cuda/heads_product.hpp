// Per-head fp32 products of a few rows, one launch: for every head b, C_b[m, n] = A_b[m, k] W_b[n, k]^T, written
// as fp32, as bf16 or as both. The mla backend's W_UK and W_UV of a 2-16-row decode step over the fp32 copies of
// the weights (DeviceWeights::heads_f32): q_lat goes straight to the bf16 the decode kernel reads, and the heads'
// outputs to fp32 and to the bf16 the output projection's cuBLAS product reads, where the batched cuBLAS product
// needed a conversion launch after each (and broke the chain of overlapped launches).
//
// A block of 8 warps takes one head and 16 (k >= 512) to 64 (k = 128) of its rows: the head's A rows are staged in
// shared memory once, each row is read by G lanes (8, 16 or 32; k / G values each, as float4), two rows per lane
// group, the weights loaded before the wait on the kernels before (launch.cuh). Sums in fp32: each lane's values
// in order, then the G lanes' partial sums through shuffles.
//
//   latte::cuda::heads_product({.a = q, .lda = N * qk, .stride_a = qk, .w = w_uk, .ldw = 128, .stride_w = 512 * 128,
//                               .c_bf16 = q_lat, .ldc = N * 512, .stride_c = 512, .m = T, .n = 512, .k = 128,
//                               .batch = N}, stream);
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace latte::cuda {

struct HeadsProductParams {
  const float* a = nullptr;  ///< A_b row t at a + t lda + b stride_a (16-byte aligned; lda, stride_a % 4 == 0)
  int64_t lda = 0;
  int64_t stride_a = 0;
  const float* w = nullptr;  ///< W_b row j at w + b stride_w + j ldw (16-byte aligned; ldw, stride_w % 4 == 0)
  int64_t ldw = 0;
  int64_t stride_w = 0;
  float* c = nullptr;               ///< optional fp32 output: C_b[t, j] at c[t ldc + b stride_c + j]
  __nv_bfloat16* c_bf16 = nullptr;  ///< optional bf16 output at the same offsets (at least one of the two)
  int64_t ldc = 0;
  int64_t stride_c = 0;
  int m = 0;  ///< rows of A: 1 to kHeadsProductMaxRows
  int n = 0;
  int k = 0;
  int batch = 0;
};

/// Most rows of A heads_product takes.
inline constexpr int kHeadsProductMaxRows = 16;

/// Whether heads_product takes m rows of k values: 1 <= m <= kHeadsProductMaxRows, k a multiple of 32 that some
/// G of 8, 16, 32 reads as 1-4 float4 per lane, and the staged rows (m k fp32) within 48 KB.
bool heads_product_takes(int m, int k);

/// Whether heads_product takes p as it is: heads_product_takes(p.m, p.k), n and batch (at most 65,535) positive,
/// non-null operands, an output, and the alignments above.
bool heads_product_takes(const HeadsProductParams& p);

class BlasHandle;

/// The same products as the batched fp32 cuBLAS product (no TF32), into p.c or, where p.c is null, into `scratch`
/// (p.m ldc floats), then converted into p.c_bf16 where that is set: the path heads_product replaces, kept for shapes
/// it does not take and to compare (heads_product_blas.cpp; not in the CPU emulation). Throws Error as
/// gemm_f32_batched does.
void heads_product_via_blas(BlasHandle& blas, const HeadsProductParams& p, float* scratch, cudaStream_t stream);

/// Runs the products on `stream`. Throws Error on a shape heads_product_takes refuses, null or misaligned
/// operands, or no output.
void heads_product(const HeadsProductParams& p, cudaStream_t stream);

}  // namespace latte::cuda
