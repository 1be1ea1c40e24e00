// gemm_quant(): precondition checks and the per-type dispatch; kernels in gemm_kernel.cuh, instantiated
// per family in gemm_quant_{kquants,legacy,iq4}.cu.
#include "cuda/gemm_quant.hpp"

#include "cuda/quant_type_families.hpp"

#include <latte/error.hpp>

#include <cstdint>
#include <string>

namespace latte::cuda {

namespace {
// bf16 tiles are what the tensor cores multiply: f32 / f16 / mxfp4 weights are dequantized to bf16 and
// go through gemm_bf16 instead.
using GemmTypes = JoinedTypeList<GgmlTypeList<GgmlType::bf16>, LegacyQuantTypes, KQuantTypes, Iq4Types>;
constexpr ArgumentCheck require_arg{"gemm_quant"};
}  // namespace

bool gemm_quant_supports(GgmlType type) noexcept { return GemmTypes::contains(type); }

void gemm_quant(const QuantGemmParams& p, cudaStream_t stream) {
  const auto type_name = std::string(type_traits(p.type).name);
  if (!gemm_quant_supports(p.type)) {
    throw Error(ErrorCode::unsupported,
                "gemm_quant: no fused GEMM for type " + type_name + " (dequantize to bf16 and use gemm_bf16)");
  }
  require_arg(p.weight != nullptr && p.a != nullptr && p.c != nullptr, "weight, a and c must be set");
  require_arg(p.n_rows > 0 && p.k > 0, "n_rows and k must be positive");
  const int64_t block_values = type_traits(p.type).block_values;
  require_arg(p.k % 32 == 0 && p.k % block_values == 0,
              "k = " + std::to_string(p.k) + " must be a multiple of 32 and of the block size of " + type_name);
  const int64_t rb = static_cast<int64_t>(row_bytes(p.type, static_cast<uint64_t>(p.k)));
  require_arg(p.weight_bytes >= rb * p.n_rows, "weight_bytes = " + std::to_string(p.weight_bytes) +
                                                   " is less than one matrix (" + std::to_string(rb * p.n_rows) +
                                                   " bytes)");
  require_arg(reinterpret_cast<uintptr_t>(p.weight) % 16 == 0 && p.matrix_stride_bytes % 16 == 0,
              "weight and matrix_stride_bytes must be 16-byte aligned");
  require_arg(reinterpret_cast<uintptr_t>(p.a) % 16 == 0 && p.lda % 8 == 0 && p.lda >= p.k,
              "a must be 16-byte aligned with lda % 8 == 0 and lda >= k");
  require_arg(p.ldc >= p.n_rows, "ldc < n_rows");
  if (p.tiles == nullptr) {
    require_arg(p.m >= 0, "m must be >= 0");
    if (p.m == 0) return;
    require_arg((p.n_rows + 63) / 64 <= 65535, "n_rows too large for one launch");
  } else {
    require_arg(p.n_tiles != nullptr && p.max_tiles >= 1, "grouped mode needs n_tiles and max_tiles >= 1");
    require_arg(p.matrix_stride_bytes >= rb * p.n_rows, "matrix_stride_bytes is smaller than one matrix");
  }
  if (GemmTypes::dispatch(p.type, [&]<GgmlType T>() { launch_gemm<T>(p, stream); })) return;
  throw Error(ErrorCode::internal, "gemm_quant: dispatch missed type " + type_name);
}

double gemm_min_bytes(const QuantGemmParams& p) {
  const double w = static_cast<double>(row_bytes(p.type, static_cast<uint64_t>(p.k))) * p.n_rows;
  const double c = 4.0 * p.m * p.n_rows * (p.residual ? 2.0 : 1.0);
  return w + 2.0 * p.m * static_cast<double>(p.k) + c;
}

double gemm_flops(const QuantGemmParams& p) { return 2.0 * p.m * static_cast<double>(p.n_rows) * p.k; }

}  // namespace latte::cuda
