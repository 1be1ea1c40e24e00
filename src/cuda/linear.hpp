// y = x W^T (+ residual) for a device weight matrix of any GGUF type and any number of rows of x:
// up to 8 rows through one quantized GEMV pass (fp32 exact), more rows through the tensor-core GEMM
// (x rounded to bf16) when the type has one -- from 128 rows as a bf16 dequantization of the matrix and
// a cuBLAS product --, fp32 weights through an fp32 cuBLAS product, else through GEMV passes of 8 rows.
//
//   latte::cuda::Linear linear;                       // owns the bf16 staging of x
//   linear(w, {.x = xn, .x_stride = H, .rows = T, .y = q, .y_stride = Nqk}, stream);
#pragma once

#include "cuda/device_buffer.hpp"
#include "cuda/device_weights.hpp"
#include "cuda/gemm_bf16.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

namespace latte::cuda {

/// Counts reallocations of the forward pass's device scratch (activations, staging, workspaces).
/// A captured CUDA graph bakes in buffer addresses: graphs recorded under another count are stale.
uint64_t scratch_generation() noexcept;
/// Records that some scratch buffer was reallocated.
void bump_scratch_generation() noexcept;

/// Grows a scratch buffer to at least n elements (recording the reallocation) and returns its data.
template <class T>
T* grow_scratch(DeviceBuffer<T>& buf, size_t n, const char* what) {
  if (buf.size() < n) {
    buf = DeviceBuffer<T>(n, what);
    bump_scratch_generation();
  }
  return buf.data();
}

/// Operands of one product. Device pointers, fp32.
struct LinearCall {
  const float* x = nullptr;  ///< [rows, x_stride], 16-byte aligned, x_stride % 8 == 0
  int64_t x_stride = 0;
  int rows = 0;
  float* y = nullptr;  ///< [rows, y_stride]
  int64_t y_stride = 0;
  const float* residual = nullptr;  ///< optional: y = x W^T + residual (may equal y)
  const uint8_t* x_q = nullptr;     ///< optional: x's rows as split-int8 records too (GemvParams::x_q)
  int64_t x_q_stride = 0;
  /// Optional, one row without x_q, where gemv_reads_x_int8 (linear_normalises): x is RMS-normalised with
  /// this weight first (GemvParams::x_norm_weight).
  const float* x_norm_weight = nullptr;
  float x_norm_eps = 0.0f;
  /// Optional, without x_norm_weight: a bf16 copy of w (rows of bf16_weight_stride(k) values:
  /// DeviceWeights::output_bf16). The product then runs on cuBLAS over the copy, x rounded to bf16, whatever
  /// path w itself would take.
  const __nv_bfloat16* w_bf16 = nullptr;
  /// Optional: x's rows already as bf16 (row t at x_bf16 + t x_bf16_stride, 16-byte aligned, the stride a multiple of
  /// 8), as the kernel that made x wrote them. A product on bf16 operands (a copy of w, the fused GEMM, cuBLAS over a
  /// dequantized w) reads them instead of converting x in a launch of its own; the other paths read x.
  const __nv_bfloat16* x_bf16 = nullptr;
  int64_t x_bf16_stride = 0;
};

/// Whether Linear takes LinearCall::x_norm_weight for a product with w (one row, the split-int8 GEMV
/// quantizing x itself); LATTE_GEMV_NORM=0: the caller normalises (rms_norm with records). Measured on an H100
/// (BENCHMARKS.md, thirty-third round): tg128 +2.0%, tg128 at depth 4096 +1.7% (an H200 had found it no faster in
/// the fourth round, before the one-token chain lost its other launches).
bool linear_normalises(const DeviceMatrix& w);

/// Runs products, keeping a bf16 copy of x for the GEMM path. One per stream.
class Linear {
 public:
  /// From this many rows on (without GEMV passes: kPassRows), a weight matrix of at most kMaxDequantizedElems
  /// values is dequantized to a bf16 scratch and multiplied by cuBLAS; below it, and for larger matrices (the
  /// output head), the fused quantized GEMM runs. It was 128; on an H200 (BENCHMARKS.md, sixth round) 17
  /// made 32- and 64-sequence decode 7% and 13% faster: the fused GEMM gives a 2048 x 2048 projection 32
  /// CTAs, while the dequantization streams the matrix at the copy rate and cuBLAS fills the chip.
  static constexpr int kBlasMinRows = 17;
  static constexpr size_t kMaxDequantizedElems = size_t{64} << 20;  ///< 128 MiB of bf16 scratch at most
  /// kBlasMinRows, or LATTE_BLAS_MIN_ROWS (9-4096) where set.
  static int blas_min_rows();
  /// Whether a product of `rows` rows of x (without records) with `w` runs on bf16 operands: the fused GEMM, or
  /// the bf16 dequantization + cuBLAS, which also takes the quantized types without a fused GEMM (MXFP4, IQ4_NL,
  /// IQ4_XS) from blas_min_rows() rows. Otherwise fp32: GEMV passes of 8 rows, or fp32 cuBLAS for f32 weights.
  static bool bf16_operands(const DeviceMatrix& w, int rows);
  /// Up to this many rows with split-int8 records (LinearCall::x_q), a matrix of at most kPassMaxBytes runs
  /// as split-int8 GEMV passes of 8 rows instead of the fused GEMM (the passes after the first read it from
  /// L2; the GEMM's 32-88 CTAs of 64 weight rows took 38-48 us per 2-6 MB projection on an H200).
  /// LATTE_GEMV_PASSES=0 turns it off. Measured on an H200 (BENCHMARKS.md, sixth round): 16 sequences
  /// +13%; at 32 rows within noise of the GEMM (-3%..+1%), so the passes stop at 16.
  static constexpr int kPassRows = 16;
  static constexpr int64_t kPassMaxBytes = int64_t{24} << 20;
  /// Whether a product of `rows` rows of w with records runs as GEMV passes (see kPassRows).
  static bool gemv_passes(const DeviceMatrix& w, int rows);
  /// Whether a product of 9 to gemv_dense_rows() (LATTE_GEMV_DENSE_ROWS) rows of w with records runs as one tensor-core
  /// GEMV launch (gemv_takes_dense_rows: Q4_K, Q5_K and the legacy types), ahead of GEMV passes and the GEMM.
  static bool gemv_rows(const DeviceMatrix& w, int rows);
  /// Whether 2-8 rows of w whose records the dp4a GEMV cannot hold (a dense FFN's down, k = 10,944) get records
  /// anyway, for the tensor-core GEMV (gemv_takes_dense_records) rather than the fp32 GEMV on x
  /// (LATTE_GEMV_WIDE_RECORDS=0: never).
  static bool gemv_wide_records(const DeviceMatrix& w, int rows);
  /// Whether a product of `rows` rows of w with records reads them (one GEMV, GEMV passes, gemv_rows or
  /// gemv_wide_records).
  static bool reads_records(const DeviceMatrix& w, int rows);

  void operator()(const DeviceMatrix& w, const LinearCall& call, cudaStream_t stream);

  /// From copy_rows() rows, products with a matrix `weights` holds a bf16 copy of (DeviceWeights::dense_bf16) run on
  /// cuBLAS over the copy (as LinearCall::w_bf16). `weights` must outlive this Linear's products; null: no copies.
  void use_copies(const DeviceWeights* weights) noexcept { copies_ = weights; }
  /// Fewest rows of a product over a copy: LATTE_DENSE_BF16_ROWS (2-4096), default kCopyMinRows. Measured on an H100
  /// (BENCHMARKS.md, twenty-fourth round) against the GEMVs over records and the per-step dequantization, with the
  /// output head's copy: x5 +7%, x8 +4%, x10 +8%, x16 +4%, x32 +11%, x64 +21%, x128 +12%, pp512 +5%; from 2 rows x4
  /// lost 1.2%.
  static int copy_rows();
  static constexpr int kCopyMinRows = 5;
  /// Whether the kernels that make the inputs of products on bf16 operands write them as bf16 themselves, where they
  /// can, instead of a conversion launch before each product (LATTE_DIRECT_BF16=0: the launches): the FFN norm and silu
  /// (CudaForward), the rope launch's q_nope and the batched W_UV's output (the MLA backend). Measured on an H100
  /// (BENCHMARKS.md, thirty-third round): pp512 +2.5%, x32 +1.7%, x128 +1.9%, x8 and tg unchanged.
  static bool direct_bf16();
  /// The copy of w a product of `rows` rows multiplies (use_copies), or null: such a product reads no records.
  [[nodiscard]] const __nv_bfloat16* copy_of(const DeviceMatrix& w, int rows) const noexcept {
    return copies_ != nullptr && rows >= copy_rows() ? copies_->dense_bf16(w) : nullptr;
  }

  /// y = silu(x G^T) * (x U^T) [rows, F] for a gated FFN (GEMV gated mode; GEMM + silu_gate beyond 8
  /// rows, with `scratch` of rows * 2F floats). Over bf16 copies (gated_over_copies): x_bf16, when given, holds x's
  /// rows as bf16 (x_stride apart) and the products read it instead of converting x; y_bf16, when given, takes y's
  /// rows as bf16 (y_stride apart; y is then not written). Returns whether y_bf16 was written.
  bool gated(const DeviceGatedFfn& ffn, const float* x, int64_t x_stride, int rows, float* y, int64_t y_stride,
             float* scratch, cudaStream_t stream, const uint8_t* x_q = nullptr, const __nv_bfloat16* x_bf16 = nullptr,
             __nv_bfloat16* y_bf16 = nullptr);
  /// Whether gated() of `rows` rows multiplies bf16 copies of the gate and up matrices with cuBLAS, then silu_gate.
  [[nodiscard]] bool gated_over_copies(const DeviceGatedFfn& ffn, int rows) const noexcept {
    return ffn.gate_up ? copy_of(ffn.gate_up, rows) != nullptr
                       : copy_of(ffn.gate, rows) != nullptr && copy_of(ffn.up, rows) != nullptr;
  }

 private:
  /// Whether a product of `rows` rows with `w` dequantizes w to bf16 for cuBLAS when it takes the GEMM path: from
  /// blas_min_rows() rows, for matrices of at most kMaxDequantizedElems values.
  static bool dequantizes(const DeviceMatrix& w, int rows);
  __nv_bfloat16* staged(const float* x, int64_t x_stride, int rows, int k, cudaStream_t stream);
  /// The GEMM parameters of c over w, with c's rows of x staged as bf16 on `stream` (the residual as c gives it).
  QuantGemmParams quant_gemm_params(const DeviceMatrix& w, const LinearCall& c, cudaStream_t stream);
  BlasHandle& blas();  // made on first use
  /// y = residual when the call has a residual other than y (the cuBLAS paths then accumulate into y).
  static void residual_into_y(const DeviceMatrix& w, const LinearCall& c, cudaStream_t stream);
  DeviceBuffer<__nv_bfloat16> x_bf16_;
  DeviceBuffer<__nv_bfloat16> w_bf16_;  // a dequantized weight matrix (long prefill chunks)
  std::unique_ptr<BlasHandle> blas_;    // cuBLAS for fp32 weights and long chunks
  const DeviceWeights* copies_ = nullptr;
};

}  // namespace latte::cuda
