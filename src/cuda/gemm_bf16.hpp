// bf16 GEMM through cuBLAS (C = A W^T, fp32 accumulation and output), and the prefill fallback for
// weight types without a fused kernel: dequantize the weight to a bf16 scratch, then cuBLAS.
//
//   latte::cuda::BlasHandle blas;                      // one per stream / thread
//   latte::cuda::gemm_bf16(blas, {.a = x, .lda = 2048, .w = w, .ldw = 2048, .c = y, .ldc = 3072,
//                                 .m = 512, .n = 3072, .k = 2048}, stream);
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/gemm_quant.hpp"

namespace latte::cuda {

/// Owns a cuBLAS handle (and its workspace, so that launches are graph-capturable). Move-only.
class BlasHandle {
 public:
  BlasHandle();
  ~BlasHandle();
  BlasHandle(BlasHandle&& other) noexcept;
  BlasHandle& operator=(BlasHandle&& other) noexcept;
  BlasHandle(const BlasHandle&) = delete;
  BlasHandle& operator=(const BlasHandle&) = delete;
  [[nodiscard]] cublasHandle_t get() const noexcept { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
};

/// C[m, n] (fp32, ldc) = A[m, k] (bf16, lda) * W[n, k]^T (bf16, ldw) (+ C when accumulate).
struct Bf16GemmParams {
  const __nv_bfloat16* a = nullptr;
  int64_t lda = 0;
  const __nv_bfloat16* w = nullptr;
  int64_t ldw = 0;
  float* c = nullptr;
  int64_t ldc = 0;
  int m = 0, n = 0, k = 0;
  bool accumulate = false;  ///< C += A W^T instead of C = A W^T
};

/// Runs the cuBLAS GEMM on `stream`. Throws Error on invalid arguments or a cuBLAS failure.
void gemm_bf16(BlasHandle& blas, const Bf16GemmParams& p, cudaStream_t stream);

/// For b in [0, batch): C_b[m, n] (ldc, at c + b * stride_c) = A_b[m, k] (bf16, lda, at a + b * stride_a)
/// * W_b[n, k]^T (bf16, ldw, at w + b * stride_w); fp32 accumulation, written as bf16 (c, each output rounded
/// once) or fp32 (c_f32): exactly one of the two is set. The mla backend's decompression writes every head's
/// K and V straight into the flash-prefill layout with it (A shared: stride_a 0), and decode steps of many
/// rows multiply each head's queries by its W_UK and its attention output by its W_UV.
struct Bf16BatchedGemmParams {
  const __nv_bfloat16* a = nullptr;
  int64_t lda = 0;
  int64_t stride_a = 0;  ///< elements between A_b and A_{b+1}; 0: one A for every b
  const __nv_bfloat16* w = nullptr;
  int64_t ldw = 0;
  int64_t stride_w = 0;  ///< elements between W_b and W_{b+1}
  __nv_bfloat16* c = nullptr;
  float* c_f32 = nullptr;
  int64_t ldc = 0;
  int64_t stride_c = 0;  ///< elements between C_b and C_{b+1}
  int m = 0, n = 0, k = 0, batch = 0;
};

/// Runs the strided-batched cuBLAS GEMM on `stream`. Throws Error on invalid arguments or a cuBLAS failure.
void gemm_bf16_batched(BlasHandle& blas, const Bf16BatchedGemmParams& p, cudaStream_t stream);

/// For b in [0, batch): C_b[m, n] (fp32, ldc, at c + b * stride_c) = A_b[m, k] (fp32, lda, at a + b * stride_a)
/// * W_b[n, k]^T (fp32, ldw, at w + b * stride_w), fp32 products throughout (no TF32): the mla backend's W_UK /
/// W_UV of a decode step over fp32 copies of the weights, as exact as the fp32 reference.
struct F32BatchedGemmParams {
  const float* a = nullptr;
  int64_t lda = 0;
  int64_t stride_a = 0;  ///< elements between A_b and A_{b+1}; 0: one A for every b
  const float* w = nullptr;
  int64_t ldw = 0;
  int64_t stride_w = 0;  ///< elements between W_b and W_{b+1}
  float* c = nullptr;
  int64_t ldc = 0;
  int64_t stride_c = 0;  ///< elements between C_b and C_{b+1}
  int m = 0, n = 0, k = 0, batch = 0;
};

/// Runs the strided-batched fp32 cuBLAS GEMM on `stream`. Throws Error on invalid arguments or a cuBLAS failure.
void gemm_f32_batched(BlasHandle& blas, const F32BatchedGemmParams& p, cudaStream_t stream);

/// C[m, n] (fp32, ldc) = A[m, k] (fp32, lda) * W[n, k]^T (fp32, ldw) (+ C when accumulate), fp32 products
/// throughout: for small fp32 weights (the MoE router) where rounding to bf16 could change the routing.
struct F32GemmParams {
  const float* a = nullptr;
  int64_t lda = 0;
  const float* w = nullptr;
  int64_t ldw = 0;
  float* c = nullptr;
  int64_t ldc = 0;
  int m = 0, n = 0, k = 0;
  bool accumulate = false;
};

/// Runs the fp32 cuBLAS GEMM on `stream`. Throws Error on invalid arguments or a cuBLAS failure.
void gemm_f32(BlasHandle& blas, const F32GemmParams& p, cudaStream_t stream);

/// Elements between the rows of a bf16 copy of a weight of k values per row (16-byte aligned rows).
constexpr int64_t bf16_weight_stride(int64_t k) { return (k + 7) / 8 * 8; }

/// Dequantizes p's weight (p.n_rows rows of p.k values of p.type) into `scratch` as bf16 rows of
/// bf16_weight_stride(p.k) elements. Throws Error unless the scratch holds them.
void dequantize_weight_bf16(const QuantGemmParams& p, __nv_bfloat16* scratch, size_t scratch_elems,
                            cudaStream_t stream);

/// C[m, n_rows] (+)= A W^T over `w_bf16`, a bf16 copy of p's weight (rows bf16_weight_stride(p.k) apart, as
/// dequantize_weight_bf16 writes them): one gemm_bf16 call. p.weight is not read; p.residual must be null or equal
/// p.c (accumulate), and p must be dense (no tiles, no A row gather).
void gemm_quant_over_bf16(BlasHandle& blas, const QuantGemmParams& p, const __nv_bfloat16* w_bf16, cudaStream_t stream);

/// Dense prefill GEMM for any dequantizable weight type: dequantizes p.weight into `scratch`
/// (bf16, at least n_rows * k elements), then gemm_quant_over_bf16. p.residual must be null or equal p.c.
void gemm_quant_via_bf16(BlasHandle& blas, const QuantGemmParams& p, __nv_bfloat16* scratch, size_t scratch_elems,
                         cudaStream_t stream);

}  // namespace latte::cuda
