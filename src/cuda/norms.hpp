// Row normalisations:
//   rms_norm:   [h += x;] y = h / sqrt(mean(h^2) + eps) * w        (fused residual add when h is given)
//   layer_norm: y = (x - mean) / sqrt(var + eps) * w + b            (the GLM-5 indexer key norm)
// One block per row; sums in fp32 (two-pass for the layer norm's variance). Output fp32 or bf16.
// rms_norm can also multiply its fp32 output by a MoE router's fp32 rows in the same launch (the router
// logits of a decode step): blocks (row, j) each normalise the row and take 8 router rows; (row, 0) alone
// writes the outputs.
//
//   latte::cuda::rms_norm({.x = attn_out, .residual = h, .weight = w, .n = 2048, .rows = t, .eps = 1e-6f,
//                          .out = x_norm, .out_stride = 2048}, stream);
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/activations.hpp"

namespace latte::cuda {

struct RmsNormParams {
  const float* x = nullptr;  ///< fp32 [rows, x_stride]
  int64_t x_stride = 0;
  float* residual = nullptr;  ///< optional fp32 [rows, residual_stride]: h += x, then normalise h
  int64_t residual_stride = 0;
  const float* weight = nullptr;  ///< fp32 [n]
  int n = 0;                      ///< values per row
  int rows = 0;
  float eps = 1e-6f;
  void* out = nullptr;  ///< fp32 or bf16 [rows, out_stride] (may equal x for fp32)
  int64_t out_stride = 0;
  ActOut out_type = ActOut::f32;
  uint8_t* out_q = nullptr;  ///< optional: the output's split-int8 records too (x_int8.hpp; n % 32 == 0)
  int64_t out_q_stride = 0;  ///< bytes between rows' records
  /// Optional: the fp32 output's values also as bf16 [rows, out_bf16_stride] (what convert_to_bf16 of the fp32 rows
  /// gives, bit for bit), for a cuBLAS product that reads the rows after it; out_type f32.
  void* out_bf16 = nullptr;
  int64_t out_bf16_stride = 0;
  /// Optional fp32 [router_rows, n] rows (contiguous): also router_out[row * router_out_stride + e] =
  /// router[e] . y[row] for every router row e, y being the fp32 output values (out_type f32, no residual,
  /// out apart from x, n % 4 == 0, 16-byte aligned rows).
  const float* router = nullptr;
  int router_rows = 0;
  float* router_out = nullptr;
  int64_t router_out_stride = 0;
};
/// Where a kernel that finishes rows also normalises them with rms_norm's arithmetic (row_norm.cuh: the same
/// bits as an rms_norm of the finished rows): out = rms(row) * weight, fp32, with the split-int8 records in
/// out_q when set. weight == nullptr: no normalisation.
struct RowNormTarget {
  const float* weight = nullptr;  ///< fp32 [n]
  float eps = 1e-6f;
  float* out = nullptr;  ///< fp32 [rows, out_stride]
  int64_t out_stride = 0;
  uint8_t* out_q = nullptr;  ///< optional split-int8 records (n % 32 == 0, 16-byte aligned)
  int64_t out_q_stride = 0;
};

/// Router rows per block of rms_norm's router product.
inline constexpr int kRmsNormRouterRowsPerBlock = 8;
void rms_norm(const RmsNormParams& p, cudaStream_t stream);

struct LayerNormParams {
  const float* x = nullptr;  ///< fp32 [rows, x_stride]
  int64_t x_stride = 0;
  const float* weight = nullptr;  ///< fp32 [n]
  const float* bias = nullptr;    ///< fp32 [n]
  int n = 0;
  int rows = 0;
  float eps = 1e-5f;
  float* out = nullptr;  ///< fp32 [rows, out_stride] (may equal x)
  int64_t out_stride = 0;
};
void layer_norm(const LayerNormParams& p, cudaStream_t stream);

}  // namespace latte::cuda
