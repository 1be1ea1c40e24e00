// Dequantization of GGUF rows on the GPU: rows of any supported type -> a bf16 or fp32 matrix. Used
// by the prefill GEMM fallback (dequantize to a bf16 scratch, then cuBLAS), the embedding lookup
// (selected rows -> fp32) and the tests.
//
//   latte::cuda::dequantize_rows({.type = GgmlType::q6_k, .weight = w, .weight_bytes = wb, .n_rows = 2048,
//                                 .k = 2048, .out = scratch, .out_stride = 2048, .out_type = DequantOut::bf16}, s);
#pragma once

#include <latte/quant.hpp>

#include <cuda_runtime.h>

#include <cstdint>

namespace latte::cuda {

/// Element type of dequantize_rows' output.
enum class DequantOut { bf16, f32 };

/// One dequantize_rows launch. Pointers are device pointers.
struct DequantizeParams {
  GgmlType type = GgmlType::f32;
  const void* weight = nullptr;      ///< source rows: n_source_rows rows of row_bytes(type, k) bytes
  int64_t weight_bytes = 0;          ///< bytes readable from `weight`
  int n_source_rows = 0;             ///< rows in the source matrix
  int n_rows = 0;                    ///< rows to produce
  int k = 0;                         ///< values per row (a multiple of the block size; of 32 for floats)
  const int32_t* row_ids = nullptr;  ///< optional [n_rows]: output row i = source row row_ids[i]
                                     ///< (clamped to the valid range; validate on the host first)
  void* out = nullptr;               ///< [n_rows, out_stride] of bf16 or fp32
  int64_t out_stride = 0;            ///< elements between output rows (>= k, a multiple of 8)
  DequantOut out_type = DequantOut::bf16;
};

/// Launches the dequantization. Throws Error(invalid_argument) on violated preconditions,
/// Error(unsupported) for types without a decoder.
void dequantize_rows(const DequantizeParams& p, cudaStream_t stream);

/// Bytes the launch must move: source rows read + output written.
double dequantize_min_bytes(const DequantizeParams& p);

/// Per-type launcher (dequantize.cu); use dequantize_rows().
template <GgmlType T>
void launch_dequantize(const DequantizeParams& p, cudaStream_t stream);

}  // namespace latte::cuda
