// x as a "split int8" record: the form in which single-token GEMVs of 4- and 5-bit K-quants read their
// input (gemv_x8_kernel.cuh), two int8 planes per 32 values (split_int8_dot.cuh gives the arithmetic:
// |x_i - dx (hi_i + lo_i / 254)| <= dx / 508, dx = max|x| / 127 of the 32 values).
//
// A row of k values (k % 32 == 0, n = k / 32 units) is 80 n bytes: four planes of 16 bytes per unit
// (hi values 0-15, hi 16-31, lo 0-15, lo 16-31; plane p of unit u at 16 (p n + u)), then per unit the
// record {dx / 254, S_0, S_1, 0} at 64 n + 16 u (S_h = sum over the half of 254 hi + lo). A consumer
// copies the record into shared memory unchanged. Producers: rms_norm (RmsNormParams::out_q, for the
// normalised inputs of the projections) and quantize_x_int8 (any fp32 rows).
//
//   std::vector<uint8_t> record(x_int8_record_bytes(2048));
//   latte::cuda::quantize_x_int8({.x = x, .x_stride = 2048, .rows = 1, .k = 2048, .out = xq,
//                                 .out_stride = x_int8_record_bytes(2048)}, stream);
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace latte::cuda {

/// Bytes of one row's record (k a multiple of 32).
constexpr int64_t x_int8_record_bytes(int64_t k) { return k / 32 * 80; }

/// Whether rows' records of k values can live at `area`, one every `stride` bytes, as the kernels read and
/// write them: k a multiple of 32, stride at least a record and a multiple of 16, area 16-byte aligned.
inline bool x_int8_records_fit(const void* area, int64_t stride, int64_t k) {
  return k % 32 == 0 && stride >= x_int8_record_bytes(k) && stride % 16 == 0 &&
         reinterpret_cast<uintptr_t>(area) % 16 == 0;
}

struct QuantizeXParams {
  const float* x = nullptr;  ///< fp32 [rows, x_stride]
  int64_t x_stride = 0;
  int rows = 0;
  int k = 0;               ///< values per row, a multiple of 32
  uint8_t* out = nullptr;  ///< [rows, out_stride] bytes, 16-byte aligned
  int64_t out_stride = 0;  ///< bytes between records, >= x_int8_record_bytes(k), a multiple of 16
};

/// Writes the records of rows of x. Throws Error(invalid_argument) on a violated precondition.
void quantize_x_int8(const QuantizeXParams& p, cudaStream_t stream);

}  // namespace latte::cuda
