#include "cuda/linear.hpp"

#include "core/environment.hpp"
#include "cuda/activations.hpp"
#include "cuda/check.hpp"
#include "cuda/gemm_bf16.hpp"
#include "cuda/gemm_quant.hpp"
#include "cuda/gemv_quant.hpp"
#include "cuda/x_int8.hpp"

#include <latte/error.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>

namespace latte::cuda {

namespace {
std::atomic<uint64_t> g_scratch_generation{0};
}  // namespace

uint64_t scratch_generation() noexcept { return g_scratch_generation.load(); }
void bump_scratch_generation() noexcept { g_scratch_generation.fetch_add(1); }

namespace {

GemvParams gemv_params(const DeviceMatrix& w, const float* x, int64_t x_stride, float* y, int64_t y_stride,
                       const float* residual, int n_tokens, const uint8_t* x_q = nullptr, int64_t x_q_stride = 0) {
  return {.type = w.type,
          .weight = w.data,
          .weight_bytes = w.bytes(),
          .n_rows = static_cast<int>(w.rows),
          .k = static_cast<int>(w.k),
          .x = x,
          .x_stride = x_stride,
          .y = y,
          .y_stride = y_stride,
          .residual = residual,
          .n_tokens = n_tokens,
          .x_q = x_q,
          .x_q_stride = x_q_stride};
}

/// Whether a dense product of `rows` rows of w with records runs on the tensor-core GEMV (gemv_takes_dense_records,
/// asked with a probe of the launch: the records' address only has to be set).
bool dense_records_on_tensor_cores(const DeviceMatrix& w, int rows) {
  return gemv_takes_dense_records(gemv_params(w, nullptr, w.k, nullptr, w.rows, nullptr, rows,
                                              reinterpret_cast<const uint8_t*>(w.data), x_int8_record_bytes(w.k)));
}

}  // namespace

__nv_bfloat16* Linear::staged(const float* x, int64_t x_stride, int rows, int k, cudaStream_t stream) {
  __nv_bfloat16* a = grow_scratch(x_bf16_, static_cast<size_t>(rows) * static_cast<size_t>(k), "bf16 activations");
  convert_to_bf16(x, x_stride, a, k, rows, k, stream);
  return a;
}

QuantGemmParams Linear::quant_gemm_params(const DeviceMatrix& w, const LinearCall& c, cudaStream_t stream) {
  return {.type = w.type,
          .weight = w.data,
          .weight_bytes = w.bytes(),
          .n_rows = static_cast<int>(w.rows),
          .k = static_cast<int>(w.k),
          .a = c.x_bf16 != nullptr ? c.x_bf16 : staged(c.x, c.x_stride, c.rows, static_cast<int>(w.k), stream),
          .lda = c.x_bf16 != nullptr ? c.x_bf16_stride : w.k,
          .c = c.y,
          .ldc = c.y_stride,
          .residual = c.residual,
          .m = c.rows};
}

BlasHandle& Linear::blas() {
  if (!blas_) blas_ = std::make_unique<BlasHandle>();
  return *blas_;
}

void Linear::residual_into_y(const DeviceMatrix& w, const LinearCall& c, cudaStream_t stream) {
  if (c.residual == nullptr || c.residual == c.y) return;
  LATTE_CUDA_CHECK(cudaMemcpy2DAsync(
      c.y, static_cast<size_t>(c.y_stride) * sizeof(float), c.residual, static_cast<size_t>(c.y_stride) * sizeof(float),
      static_cast<size_t>(w.rows) * sizeof(float), static_cast<size_t>(c.rows), cudaMemcpyDeviceToDevice, stream));
}

bool linear_normalises(const DeviceMatrix& w) {
  static const bool on = latte::detail::env_flag("LATTE_GEMV_NORM", true);
  return on && w && gemv_self_quantize() && gemv_reads_x_int8(w.type, w.k, 1);
}

int Linear::copy_rows() {
  static const int rows = latte::detail::env_int("LATTE_DENSE_BF16_ROWS", kCopyMinRows);
  return rows;
}

bool Linear::direct_bf16() {
  static const bool on = latte::detail::env_flag("LATTE_DIRECT_BF16", true);
  return on;
}

int Linear::blas_min_rows() {
  static_assert(gemv_max_tokens + 1 == 9, "LATTE_BLAS_MIN_ROWS's range in core/environment.cpp");
  static const int rows = latte::detail::env_int("LATTE_BLAS_MIN_ROWS", kBlasMinRows);
  return rows;
}

bool Linear::gemv_passes(const DeviceMatrix& w, int rows) {
  static const bool on = latte::detail::env_flag("LATTE_GEMV_PASSES", true);
  return on && w && rows > gemv_max_tokens && rows <= kPassRows && w.bytes() <= kPassMaxBytes &&
         gemv_reads_x_int8(w.type, w.k, gemv_max_tokens);
}

bool Linear::gemv_rows(const DeviceMatrix& w, int rows) {
  return w && rows > gemv_max_tokens && rows <= gemv_dense_rows() && dense_records_on_tensor_cores(w, rows);
}

bool Linear::reads_records(const DeviceMatrix& w, int rows) {
  return w && ((rows <= gemv_max_tokens && gemv_reads_x_int8(w.type, w.k, rows)) || gemv_passes(w, rows) ||
               gemv_rows(w, rows) || gemv_wide_records(w, rows));
}

bool Linear::gemv_wide_records(const DeviceMatrix& w, int rows) {
  static const bool on = latte::detail::env_flag("LATTE_GEMV_WIDE_RECORDS", true);
  return on && w && rows <= gemv_max_tokens && dense_records_on_tensor_cores(w, rows);
}

bool Linear::bf16_operands(const DeviceMatrix& w, int rows) {
  if (rows <= gemv_max_tokens || w.k % 32 != 0 || reinterpret_cast<uintptr_t>(w.data) % 16 != 0) return false;
  if (gemm_quant_supports(w.type)) return true;
  // quantized types without a fused GEMM, where the bf16 dequantization applies (f32 and f16 rows keep the fp32
  // paths: bf16 would round them)
  return dequantizes(w, rows) && w.type != GgmlType::f32 && w.type != GgmlType::f16 && gemv_supports(w.type);
}

bool Linear::dequantizes(const DeviceMatrix& w, int rows) {
  const size_t weight_elems = static_cast<size_t>(w.rows) * static_cast<size_t>(bf16_weight_stride(w.k));
  return rows >= blas_min_rows() && weight_elems <= kMaxDequantizedElems;
}

void Linear::operator()(const DeviceMatrix& w, const LinearCall& c, cudaStream_t stream) {
  if (!w) throw Error(ErrorCode::internal, "linear: absent weight matrix");
  if (c.rows <= 0) return;
  if (c.x_bf16 != nullptr &&
      (c.x_bf16_stride < w.k || c.x_bf16_stride % 8 != 0 || reinterpret_cast<uintptr_t>(c.x_bf16) % 16 != 0)) {
    throw Error(ErrorCode::internal, "linear: x_bf16 needs 16-byte aligned rows of at least k values");
  }
  if (c.x_norm_weight != nullptr && (c.rows != 1 || c.x_q != nullptr || !linear_normalises(w))) {
    throw Error(ErrorCode::internal, "linear: x_norm_weight needs one row without records and the split-int8 GEMV");
  }
  const __nv_bfloat16* const copy =
      c.w_bf16 != nullptr ? c.w_bf16 : (c.x_norm_weight == nullptr ? copy_of(w, c.rows) : nullptr);
  if (copy != nullptr) {
    if (c.x_norm_weight != nullptr || w.k % 8 != 0) {
      throw Error(ErrorCode::internal, "linear: a bf16 copy of the weights takes plain x (no x_norm_weight)");
    }
    residual_into_y(w, c, stream);
    QuantGemmParams p = quant_gemm_params(w, c, stream);
    p.residual = c.residual != nullptr ? c.y : nullptr;
    gemm_quant_over_bf16(blas(), p, copy, stream);
    return;
  }
  if (c.x_q != nullptr && c.x_norm_weight == nullptr && gemv_rows(w, c.rows)) {
    // 9-64 rows with records: one tensor-core GEMV launch, a row of blocks per 8 rows
    gemv_quant(gemv_params(w, c.x, c.x_stride, c.y, c.y_stride, c.residual, c.rows, c.x_q, c.x_q_stride), stream);
    return;
  }
  const bool passes = c.x_q != nullptr && gemv_passes(w, c.rows);  // GEMV passes over the records (below)
  const bool gemm = !passes && bf16_operands(w, c.rows);
  if (gemm) {
    QuantGemmParams p = quant_gemm_params(w, c, stream);
    if (dequantizes(w, c.rows)) {
      // Dequantize the matrix to bf16 once and let cuBLAS run the product: at 512 rows several times faster
      // than the fused kernel, which decodes every weight tile once per 64 rows of x with mma.sync, and at
      // 17-64 rows it fills the chip where the fused GEMM has a few dozen CTAs (BENCHMARKS.md); the bf16
      // rounding of the weights is the same.
      residual_into_y(w, c, stream);
      p.residual = c.residual != nullptr ? c.y : nullptr;
      // The scratch first: its size is read after it grew (argument order is unspecified).
      const size_t weight_elems = static_cast<size_t>(w.rows) * static_cast<size_t>(bf16_weight_stride(w.k));
      __nv_bfloat16* w_bf16 = grow_scratch(w_bf16_, weight_elems, "bf16 weight scratch");
      gemm_quant_via_bf16(blas(), p, w_bf16, w_bf16_.size(), stream);
    } else {
      gemm_quant(p, stream);
    }
    return;
  }
  if (c.rows > gemv_max_tokens && w.type == GgmlType::f32 && w.row_bytes % 16 == 0 &&
      reinterpret_cast<uintptr_t>(w.data) % 16 == 0) {
    // fp32 weights (routers): one fp32 cuBLAS product instead of a GEMV pass per 8 rows.
    residual_into_y(w, c, stream);
    gemm_f32(blas(),
             {.a = c.x,
              .lda = c.x_stride,
              .w = reinterpret_cast<const float*>(w.data),
              .ldw = static_cast<int64_t>(w.row_bytes / sizeof(float)),
              .c = c.y,
              .ldc = c.y_stride,
              .m = c.rows,
              .n = static_cast<int>(w.rows),
              .k = static_cast<int>(w.k),
              .accumulate = c.residual != nullptr},
             stream);
    return;
  }
  for (int r0 = 0; r0 < c.rows; r0 += gemv_max_tokens) {
    const int n = std::min(gemv_max_tokens, c.rows - r0);
    GemvParams p = gemv_params(w, c.x + r0 * c.x_stride, c.x_stride, c.y + r0 * c.y_stride, c.y_stride,
                               c.residual ? c.residual + r0 * c.y_stride : nullptr, n,
                               c.x_q ? c.x_q + r0 * c.x_q_stride : nullptr, c.x_q_stride);
    // one token without records: the split-int8 GEMV (where the type has one) quantizes x in its blocks
    p.x_quantize = p.x_q == nullptr && n == 1 && gemv_self_quantize();
    p.x_norm_weight = c.x_norm_weight;
    p.x_norm_eps = c.x_norm_eps;
    gemv_quant(p, stream);
  }
}

bool Linear::gated(const DeviceGatedFfn& ffn, const float* x, int64_t x_stride, int rows, float* y, int64_t y_stride,
                   float* scratch, cudaStream_t stream, const uint8_t* x_q, const __nv_bfloat16* x_bf16,
                   __nv_bfloat16* y_bf16) {
  const int64_t F = ffn.gate.rows;
  const bool same = ffn.gate.type == ffn.up.type;
  const bool copied = gated_over_copies(ffn, rows);
  // without bf16 copies, up to 8 rows, or 9-64 with records on the tensor cores: silu(gate) * up from one GEMV
  if (same && !copied &&
      (rows <= gemv_max_tokens || (x_q != nullptr && ffn.gate.bytes() == ffn.up.bytes() && gemv_rows(ffn.gate, rows) &&
                                   gemv_rows(ffn.up, rows)))) {
    GemvParams p = gemv_params(ffn.gate, x, x_stride, y, y_stride, nullptr, rows, x_q, x_int8_record_bytes(x_stride));
    p.weight_up = ffn.up.data;
    gemv_quant(p, stream);
    return false;
  }
  // [gate | up] into scratch [rows, 2F], then silu(gate) * up.
  const int64_t x_q_stride = x_q ? x_int8_record_bytes(x_stride) : 0;
  auto product = [&](const DeviceMatrix& m, float* out) {
    (*this)(m,
            {.x = x,
             .x_stride = x_stride,
             .rows = rows,
             .y = out,
             .y_stride = 2 * F,
             .x_q = x_q,
             .x_q_stride = x_q_stride,
             .x_bf16 = x_bf16,
             .x_bf16_stride = x_stride},
            stream);
  };
  if (ffn.gate_up) {
    product(ffn.gate_up, scratch);
  } else {
    product(ffn.gate, scratch);
    product(ffn.up, scratch + F);
  }
  silu_gate({.gate = scratch,
             .gate_stride = 2 * F,
             .up = scratch + F,
             .up_stride = 2 * F,
             .out = y_bf16 != nullptr ? static_cast<void*>(y_bf16) : static_cast<void*>(y),
             .out_stride = y_stride,
             .out_type = y_bf16 != nullptr ? ActOut::bf16 : ActOut::f32,
             .rows = rows,
             .cols = static_cast<int>(F)},
            stream);
  return y_bf16 != nullptr;
}

}  // namespace latte::cuda
