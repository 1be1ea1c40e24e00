#include "cuda/gemm_bf16.hpp"

#include <latte/error.hpp>

#include <climits>
#include <cstdint>
#include <string>
#include <utility>

#include "cuda/dequantize.hpp"
#include "cuda/device_buffer.hpp"

namespace latte::cuda {
namespace {

constexpr size_t kWorkspaceBytes = 32u << 20;  // cuBLAS's recommendation for Hopper

void check_blas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw Error(status == CUBLAS_STATUS_ALLOC_FAILED ? ErrorCode::out_of_memory : ErrorCode::device,
                std::string("cuBLAS error ") + cublasGetStatusName(status) + " (" + cublasGetStatusString(status) +
                    ") in " + what);
  }
}

}  // namespace

BlasHandle::BlasHandle() {
  check_blas(cublasCreate(&handle_), "cublasCreate");
  try {
    workspace_ = device_alloc(kWorkspaceBytes, "cuBLAS workspace");
    check_blas(cublasSetWorkspace(handle_, workspace_, kWorkspaceBytes), "cublasSetWorkspace");
  } catch (...) {
    device_free(workspace_);
    cublasDestroy(handle_);
    throw;
  }
}

BlasHandle::~BlasHandle() {
  if (handle_) cublasDestroy(handle_);
  device_free(workspace_);
}

BlasHandle::BlasHandle(BlasHandle&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)), workspace_(std::exchange(other.workspace_, nullptr)) {}

BlasHandle& BlasHandle::operator=(BlasHandle&& other) noexcept {
  if (this != &other) {
    if (handle_) cublasDestroy(handle_);
    device_free(workspace_);
    handle_ = std::exchange(other.handle_, nullptr);
    workspace_ = std::exchange(other.workspace_, nullptr);
  }
  return *this;
}

namespace {

/// C = A W^T (+ C) through cublasGemmEx for either operand struct (bf16 or fp32 A and W, fp32 C).
template <class Params>
void gemm_ex(const char* label, BlasHandle& blas, const Params& p, cudaDataType_t input_type,
             cublasComputeType_t compute, cudaStream_t stream) {
  if (p.a == nullptr || p.w == nullptr || p.c == nullptr || p.m < 0 || p.n <= 0 || p.k <= 0 || p.lda < p.k ||
      p.ldw < p.k || p.ldc < p.n) {
    throw Error(ErrorCode::invalid_argument, "gemm_" + std::string(label) + ": invalid shape m=" + std::to_string(p.m) +
                                                 " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k) +
                                                 " or strides");
  }
  if (p.m == 0) return;
  check_blas(cublasSetStream(blas.get(), stream), "cublasSetStream");
  const float alpha = 1.0f, beta = p.accumulate ? 1.0f : 0.0f;
  // Column-major view: C^T[n, m] = W[n, k] (stored as k x n, op T) * A^T (k x m, op N).
  check_blas(cublasGemmEx(blas.get(), CUBLAS_OP_T, CUBLAS_OP_N, p.n, p.m, p.k, &alpha, p.w, input_type,
                          static_cast<int>(p.ldw), p.a, input_type, static_cast<int>(p.lda), &beta, p.c, CUDA_R_32F,
                          static_cast<int>(p.ldc), compute, CUBLAS_GEMM_DEFAULT),
             (std::string("cublasGemmEx (") + label + ")").c_str());
}

}  // namespace

void gemm_bf16(BlasHandle& blas, const Bf16GemmParams& p, cudaStream_t stream) {
  gemm_ex("bf16", blas, p, CUDA_R_16BF, CUBLAS_COMPUTE_32F, stream);
}

namespace {

/// The shape and strides of a strided-batched product (either operand struct): inputs set, m >= 0, n, k and batch
/// positive, leading dimensions within cuBLAS's int and no smaller than the rows, strides not negative.
template <class Params>
bool batched_shape_valid(const Params& p) {
  const auto fits = [](int64_t v) { return v >= 0 && v <= INT32_MAX; };
  return p.a != nullptr && p.w != nullptr && p.m >= 0 && p.n > 0 && p.k > 0 && p.batch >= 1 && p.lda >= p.k &&
         p.ldw >= p.k && p.ldc >= p.n && fits(p.lda) && fits(p.ldw) && fits(p.ldc) && p.stride_a >= 0 &&
         p.stride_w >= 0 && p.stride_c >= 0;
}

}  // namespace

void gemm_bf16_batched(BlasHandle& blas, const Bf16BatchedGemmParams& p, cudaStream_t stream) {
  if (!batched_shape_valid(p) || (p.c == nullptr) == (p.c_f32 == nullptr)) {
    throw Error(ErrorCode::invalid_argument, "gemm_bf16_batched: invalid shape m=" + std::to_string(p.m) +
                                                 " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k) +
                                                 " batch=" + std::to_string(p.batch) +
                                                 ", strides, or not exactly one output (c, c_f32)");
  }
  if (p.m == 0) return;
  check_blas(cublasSetStream(blas.get(), stream), "cublasSetStream");
  const float alpha = 1.0f, beta = 0.0f;
  const bool f32 = p.c_f32 != nullptr;
  // Column-major view as in gemm_ex: C_b^T[n, m] = W_b (op T) * A_b^T.
  check_blas(cublasGemmStridedBatchedEx(blas.get(), CUBLAS_OP_T, CUBLAS_OP_N, p.n, p.m, p.k, &alpha, p.w, CUDA_R_16BF,
                                        static_cast<int>(p.ldw), p.stride_w, p.a, CUDA_R_16BF,
                                        static_cast<int>(p.lda), p.stride_a, &beta,
                                        f32 ? static_cast<void*>(p.c_f32) : static_cast<void*>(p.c),
                                        f32 ? CUDA_R_32F : CUDA_R_16BF, static_cast<int>(p.ldc), p.stride_c, p.batch,
                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
             f32 ? "cublasGemmStridedBatchedEx (fp32 out)" : "cublasGemmStridedBatchedEx (bf16 out)");
}

void gemm_f32_batched(BlasHandle& blas, const F32BatchedGemmParams& p, cudaStream_t stream) {
  if (!batched_shape_valid(p) || p.c == nullptr) {
    throw Error(ErrorCode::invalid_argument, "gemm_f32_batched: invalid shape m=" + std::to_string(p.m) +
                                                 " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k) +
                                                 " batch=" + std::to_string(p.batch) + " or strides");
  }
  if (p.m == 0) return;
  check_blas(cublasSetStream(blas.get(), stream), "cublasSetStream");
  const float alpha = 1.0f, beta = 0.0f;
  // Column-major view as in gemm_ex: C_b^T[n, m] = W_b (op T) * A_b^T; PEDANTIC: no TF32 rounding of the inputs.
  check_blas(cublasGemmStridedBatchedEx(blas.get(), CUBLAS_OP_T, CUBLAS_OP_N, p.n, p.m, p.k, &alpha, p.w, CUDA_R_32F,
                                        static_cast<int>(p.ldw), p.stride_w, p.a, CUDA_R_32F, static_cast<int>(p.lda),
                                        p.stride_a, &beta, p.c, CUDA_R_32F, static_cast<int>(p.ldc), p.stride_c,
                                        p.batch, CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT),
             "cublasGemmStridedBatchedEx (f32)");
}

void gemm_f32(BlasHandle& blas, const F32GemmParams& p, cudaStream_t stream) {
  // PEDANTIC keeps fp32 products (no TF32 rounding of the inputs).
  gemm_ex("f32", blas, p, CUDA_R_32F, CUBLAS_COMPUTE_32F_PEDANTIC, stream);
}

void dequantize_weight_bf16(const QuantGemmParams& p, __nv_bfloat16* scratch, size_t scratch_elems,
                            cudaStream_t stream) {
  const int64_t ldw = bf16_weight_stride(p.k);
  if (scratch == nullptr || scratch_elems < static_cast<size_t>(ldw) * static_cast<size_t>(p.n_rows)) {
    throw Error(ErrorCode::invalid_argument, "dequantize_weight_bf16: scratch needs " +
                                                 std::to_string(ldw * p.n_rows) + " bf16 elements, got " +
                                                 std::to_string(scratch_elems));
  }
  dequantize_rows({.type = p.type,
                   .weight = p.weight,
                   .weight_bytes = p.weight_bytes,
                   .n_source_rows = p.n_rows,
                   .n_rows = p.n_rows,
                   .k = p.k,
                   .out = scratch,
                   .out_stride = ldw,
                   .out_type = DequantOut::bf16},
                  stream);
}

namespace {

// The shapes gemm_quant_over_bf16 takes: dense, A rows in place, the residual (if any) C itself.
void check_dense_over_bf16(const QuantGemmParams& p, const char* what) {
  const auto refuse = [what](const char* why) {
    throw Error(ErrorCode::invalid_argument, std::string(what) + ": " + why);
  };
  if (p.tiles != nullptr) refuse("dense mode only");
  if (p.a_rows != nullptr) refuse("no A row gather");
  if (p.residual != nullptr && p.residual != p.c) refuse("residual must be c itself (C += A W^T)");
}

}  // namespace

void gemm_quant_over_bf16(BlasHandle& blas, const QuantGemmParams& p, const __nv_bfloat16* w_bf16,
                          cudaStream_t stream) {
  check_dense_over_bf16(p, "gemm_quant_over_bf16");
  gemm_bf16(blas,
            {.a = p.a,
             .lda = p.lda,
             .w = w_bf16,
             .ldw = bf16_weight_stride(p.k),
             .c = p.c,
             .ldc = p.ldc,
             .m = p.m,
             .n = p.n_rows,
             .k = p.k,
             .accumulate = p.residual != nullptr},
            stream);
}

void gemm_quant_via_bf16(BlasHandle& blas, const QuantGemmParams& p, __nv_bfloat16* scratch, size_t scratch_elems,
                         cudaStream_t stream) {
  check_dense_over_bf16(p, "gemm_quant_via_bf16");
  dequantize_weight_bf16(p, scratch, scratch_elems, stream);
  gemm_quant_over_bf16(blas, p, scratch, stream);
}

}  // namespace latte::cuda
