// gemv_quant(): precondition checks and the per-type dispatch. The kernels live in gemv_kernel.cuh and
// are instantiated per type family in gemv_quant_{float,legacy,kquants}.cu (parallel compilation).
#include "cuda/gemv_quant.hpp"

#include "core/environment.hpp"

#include "cuda/check.hpp"
#include "cuda/gemv_kernel.cuh"

#include "cuda/quant_type_families.hpp"

#include <latte/error.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>

namespace latte::cuda {

// Instantiated in gemv_quant_{float,legacy,kquants}.cu: without these declarations the dispatch below
// instantiated every kernel here a second time (this file took longer to compile than the three together).
extern template void launch_gemv<GgmlType::f32>(const GemvParams&, cudaStream_t);
extern template void launch_gemv<GgmlType::f16>(const GemvParams&, cudaStream_t);
extern template void launch_gemv<GgmlType::bf16>(const GemvParams&, cudaStream_t);
extern template void launch_gemv<GgmlType::q4_0>(const GemvParams&, cudaStream_t);
extern template void launch_gemv<GgmlType::q4_1>(const GemvParams&, cudaStream_t);
extern template void launch_gemv<GgmlType::q5_0>(const GemvParams&, cudaStream_t);
extern template void launch_gemv<GgmlType::q5_1>(const GemvParams&, cudaStream_t);
extern template void launch_gemv<GgmlType::q8_0>(const GemvParams&, cudaStream_t);
extern template void launch_gemv<GgmlType::mxfp4>(const GemvParams&, cudaStream_t);
extern template void launch_gemv<GgmlType::iq4_nl>(const GemvParams&, cudaStream_t);
extern template void launch_gemv<GgmlType::iq4_xs>(const GemvParams&, cudaStream_t);
extern template void launch_gemv<GgmlType::q2_k>(const GemvParams&, cudaStream_t);
extern template void launch_gemv<GgmlType::q3_k>(const GemvParams&, cudaStream_t);
extern template void launch_gemv<GgmlType::q4_k>(const GemvParams&, cudaStream_t);
extern template void launch_gemv<GgmlType::q5_k>(const GemvParams&, cudaStream_t);
extern template void launch_gemv<GgmlType::q6_k>(const GemvParams&, cudaStream_t);

namespace {
// Float rows of every width, MXFP4 and the IQ4 types as well as the GEMM's types: decode reads the weights as stored.
using GemvTypes = JoinedTypeList<FloatTypes, LegacyQuantTypes, Mxfp4Types, KQuantTypes, Iq4Types>;
constexpr ArgumentCheck require_arg{"gemv_quant"};
}  // namespace

bool gemv_supports(GgmlType type) noexcept { return GemvTypes::contains(type); }

bool gemv_reads_x_int8(GgmlType type, int64_t k, int tokens) {
  bool reads = false;
  GemvTypes::dispatch(type, [&]<GgmlType T>() {
    if constexpr (kGemvX8Type<T>) {
      reads = k > 0 && k % kGemvX8BlockValues<T> == 0 && tokens >= 1 && tokens <= gemv_max_tokens &&
              gemv_x8_tokens(tokens) * x_int8_record_bytes(k) <= kGemvX8MaxRecordBytes && gemv_int8_enabled();
    }
  });
  return reads;
}

int gemv_dense_rows() {
  static_assert(gemv_max_tokens + 1 == 9 && gemv_max_dense_rows == 128,
                "LATTE_GEMV_DENSE_ROWS's range (environment.cpp)");
  static const int rows = latte::detail::env_int("LATTE_GEMV_DENSE_ROWS", 64);
  return rows;
}

bool gemv_takes_dense_records(const GemvParams& p) noexcept {
  bool takes = false;
  try {
    if (p.groups != nullptr || p.choice_ids != nullptr || p.n_tokens < 2 || p.n_tokens > gemv_max_dense_rows ||
        p.x_q == nullptr) {
      return false;
    }
    GemvTypes::dispatch(p.type, [&]<GgmlType T>() { takes = gemv_mma_applies<T>(p); });
  } catch (...) {
    return false;  // no device to ask about its shared memory
  }
  return takes;
}

bool gemv_takes_wide_groups(const GemvParams& p) noexcept {
  bool takes = false;
  try {
    if (p.groups == nullptr || p.choice_ids != nullptr || p.max_tokens_per_group <= gemv_max_tokens ||
        p.max_tokens_per_group > gemv_group_max_tokens) {
      return false;
    }
    GemvTypes::dispatch(p.type, [&]<GgmlType T>() { takes = gemv_mma_applies<T>(p); });
  } catch (...) {
    return false;  // no device to ask about its shared memory
  }
  return takes;
}

bool gemv_takes_dense_rows(const GemvParams& p) noexcept {
  return p.n_tokens > gemv_max_tokens && gemv_takes_dense_records(p);
}

int gemv_x_async_tokens() {
  static const int n = [] {
    const int t = latte::detail::env_int("LATTE_GEMV_X_ASYNC", gemv_max_tokens);
    return t == 0 ? gemv_max_tokens + 1 : t;
  }();
  return n;
}

bool gemv_self_quantize() {
  static const bool on = latte::detail::env_flag("LATTE_GEMV_SELF_QUANTIZE", true);
  return on;
}

void gemv_quant(const GemvParams& p, cudaStream_t stream) {
  const auto type_name = std::string(type_traits(p.type).name);
  if (!gemv_supports(p.type)) throw Error(ErrorCode::unsupported, "gemv_quant: no GEMV kernel for type " + type_name);
  const auto& tr = type_traits(p.type);
  const bool is_float = FloatTypes::contains(p.type);
  const int64_t block_values = is_float ? 32 : tr.block_values;
  require_arg(p.weight != nullptr && p.x != nullptr && (p.y != nullptr) != (p.y_bf16 != nullptr),
              "weight, x and exactly one of y and y_bf16 must be set");
  require_arg(p.y_bf16 == nullptr || p.residual == nullptr, "a residual needs the fp32 y");
  require_arg(p.n_rows > 0 && p.k > 0,
              "n_rows and k must be positive (got " + std::to_string(p.n_rows) + " x " + std::to_string(p.k) + ")");
  require_arg(p.k % block_values == 0, "k = " + std::to_string(p.k) + " is not a multiple of " +
                                           std::to_string(block_values) + " for type " + type_name);
  const int64_t rb = static_cast<int64_t>(row_bytes(p.type, static_cast<uint64_t>(p.k)));
  require_arg(p.weight_bytes >= rb * p.n_rows, "weight_bytes = " + std::to_string(p.weight_bytes) +
                                                   " is less than one matrix (" + std::to_string(rb * p.n_rows) +
                                                   " bytes)");
  require_arg(reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && p.x_stride % 4 == 0 && p.x_stride >= p.k,
              "x must be 16-byte aligned with x_stride % 4 == 0 and x_stride >= k");
  const int64_t out_cols = p.n_rows;
  require_arg(p.y_stride >= out_cols, "y_stride < n_rows");
  if (is_float) {
    require_arg(reinterpret_cast<uintptr_t>(p.weight) % 16 == 0 &&
                    (p.weight_up == nullptr || reinterpret_cast<uintptr_t>(p.weight_up) % 16 == 0) &&
                    p.matrix_stride_bytes % 16 == 0,
                "float weights must be 16-byte aligned (and so must matrix_stride_bytes)");
  }
  if (p.choice_ids != nullptr) {
    // checked below, with the split-int8 path
  } else if (p.groups == nullptr) {
    require_arg((p.n_tokens >= 1 && p.n_tokens <= gemv_max_tokens) || gemv_takes_dense_rows(p),
                "n_tokens = " + std::to_string(p.n_tokens) +
                    " outside 1..8 and not a launch of up to 64 rows with records the tensor-core GEMV takes "
                    "(use the GEMM)");
  } else {
    require_arg(p.n_groups != nullptr, "gathered mode needs the device group count n_groups");
    require_arg(p.max_groups >= 1 && p.max_groups <= 65535, "max_groups outside 1..65535");
    require_arg((p.max_tokens_per_group >= 1 && p.max_tokens_per_group <= gemv_max_tokens) || gemv_takes_wide_groups(p),
                "max_tokens_per_group = " + std::to_string(p.max_tokens_per_group) +
                    " outside 1..8 and not groups of up to 16 that the tensor-core GEMV takes");
    require_arg(p.matrix_stride_bytes >= rb * p.n_rows, "matrix_stride_bytes is smaller than one matrix");
  }
  if (p.choice_ids != nullptr) {
    require_arg(p.groups == nullptr && (p.x_q != nullptr || p.x_quantize) && p.max_groups >= 1 &&
                    p.max_groups <= 65535 && p.matrix_stride_bytes >= rb * p.n_rows,
                "choice_ids needs x_q or x_quantize, no groups, max_groups in 1..65535 and a matrix stride");
    require_arg(p.choices_per_token >= 0, "choices_per_token must not be negative");
    bool reads = false;
    GemvTypes::dispatch(p.type, [&]<GgmlType T>() { reads = gemv_x8_applies<T>(p); });
    if (!reads) {
      throw Error(ErrorCode::unsupported, "gemv_quant: choice_ids needs the split-int8 GEMV (type " + type_name + ")");
    }
  }
  require_arg(p.x_q == nullptr || !p.x_quantize, "x_q and x_quantize exclude each other");
  if (p.route.logits != nullptr) {
    require_arg(p.choice_ids != nullptr && p.choice_ids == p.route.ids && p.route.n_tokens == 1 &&
                    p.max_groups == p.route.k && p.route.weights != nullptr,
                "route needs choice_ids == route.ids, one token, max_groups == route.k and route.weights");
    check_moe_route(p.route);
  }
  if (p.x_norm_weight != nullptr) {
    require_arg(p.x_quantize && p.x_norm_eps >= 0.0f, "x_norm_weight needs x_quantize and x_norm_eps >= 0");
    bool reads = false;
    GemvTypes::dispatch(p.type, [&]<GgmlType T>() { reads = gemv_x8_applies<T>(p); });
    if (!reads) {
      throw Error(ErrorCode::unsupported, "gemv_quant: x_norm_weight needs the split-int8 GEMV (type " + type_name +
                                              ", k " + std::to_string(p.k) + ")");
    }
  }
  if (p.x_q != nullptr) {
    require_arg(x_int8_records_fit(p.x_q, p.x_q_stride, p.k),
                "x_q must be 16-byte aligned, with x_q_stride a multiple of 16 and >= 80 k / 32 (k % 32 == 0)");
  }
  GemvParams q = p;
  q.x_async_tokens = gemv_x_async_tokens();
  if (GemvTypes::dispatch(p.type, [&]<GgmlType T>() { launch_gemv<T>(q, stream); })) return;
  throw Error(ErrorCode::internal, "gemv_quant: dispatch missed type " + type_name);
}

int gemv_resident_blocks(const void* kernel, int smem) {
  static std::mutex mutex;
  static std::map<std::tuple<const void*, int, int>, int> known;  // (kernel, device, smem) -> blocks
  int device = 0;
  LATTE_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard lock(mutex);
  const auto key = std::make_tuple(kernel, device, smem);
  if (const auto it = known.find(key); it != known.end()) return it->second;
  int blocks = 0;
  LATTE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, 128, static_cast<size_t>(smem)));
  blocks = std::max(blocks, 1);
  known.emplace(key, blocks);
  return blocks;
}

double gemv_min_bytes(const GemvParams& p) {
  const double matrices = p.weight_up ? 2.0 : 1.0;
  const double w = static_cast<double>(row_bytes(p.type, static_cast<uint64_t>(p.k))) * p.n_rows * matrices;
  return w + 4.0 * p.n_tokens * (static_cast<double>(p.k) + p.n_rows);
}

double gemv_flops(const GemvParams& p) {
  return 2.0 * p.n_tokens * static_cast<double>(p.n_rows) * p.k * (p.weight_up ? 2.0 : 1.0);
}

}  // namespace latte::cuda
