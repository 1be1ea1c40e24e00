// Which GGUF types the quantized matmul launchers accept, and how they reject what they cannot run:
// host-side answers of gemm_quant_supports() / gemv_supports() and the launchers' precondition
// errors, which are thrown before anything touches a device.
#include <doctest/doctest.h>

#include <latte/error.hpp>
#include <latte/quant.hpp>

#include <cstdint>
#include <set>
#include <string>

#include "cuda/gemm_quant.hpp"
#include "cuda/gemv_quant.hpp"

namespace {

using latte::GgmlType;

// Written out per type (not taken from the launchers' lists): the answers before the lists were shared.
const std::set<GgmlType> gemm_types = {
    GgmlType::bf16, GgmlType::q4_0, GgmlType::q4_1, GgmlType::q5_0, GgmlType::q5_1,   GgmlType::q8_0,  GgmlType::q2_k,
    GgmlType::q3_k, GgmlType::q4_k, GgmlType::q5_k, GgmlType::q6_k, GgmlType::iq4_nl, GgmlType::iq4_xs};
const std::set<GgmlType> gemv_only_types = {GgmlType::f32, GgmlType::f16, GgmlType::mxfp4};

// The latte::Error the call throws; a failed check when it throws none.
template <class Call>
latte::Error error_of(Call call) {
  try {
    call();
  } catch (const latte::Error& e) {
    return e;
  }
  FAIL("no latte::Error thrown");
  return latte::Error(latte::ErrorCode::internal, "unreachable");
}

}  // namespace

TEST_CASE("the GEMV takes every GEMM type plus f32, f16, mxfp4, iq4_nl and iq4_xs; no other GGUF type") {
  for (uint32_t raw = 0; raw < 64; ++raw) {
    const auto type = static_cast<GgmlType>(raw);
    const bool gemm = gemm_types.count(type) != 0;
    const bool gemv = gemm || gemv_only_types.count(type) != 0;
    CHECK_MESSAGE(latte::cuda::gemm_quant_supports(type) == gemm, "GGUF type " << raw);
    CHECK_MESSAGE(latte::cuda::gemv_supports(type) == gemv, "GGUF type " << raw);
  }
}

TEST_CASE("the quantized matmul launchers name themselves in argument errors and reject other types") {
  latte::cuda::QuantGemmParams gemm{.type = GgmlType::q4_k};
  const latte::Error gemm_args = error_of([&] { latte::cuda::gemm_quant(gemm, nullptr); });
  CHECK(gemm_args.code() == latte::ErrorCode::invalid_argument);
  CHECK(std::string(gemm_args.what()) == "gemm_quant: weight, a and c must be set");
  gemm.type = GgmlType::f16;
  const latte::Error gemm_type = error_of([&] { latte::cuda::gemm_quant(gemm, nullptr); });
  CHECK(gemm_type.code() == latte::ErrorCode::unsupported);
  CHECK(std::string(gemm_type.what()).find("gemm_quant: no fused GEMM for type f16") == 0);

  latte::cuda::GemvParams gemv{.type = GgmlType::mxfp4};
  const latte::Error gemv_args = error_of([&] { latte::cuda::gemv_quant(gemv, nullptr); });
  CHECK(gemv_args.code() == latte::ErrorCode::invalid_argument);
  CHECK(std::string(gemv_args.what()) == "gemv_quant: weight, x and exactly one of y and y_bf16 must be set");
  {  // both outputs at once is the same error (checked before any CUDA call)
    float dummy[4] = {};
    __nv_bfloat16 dummy_bf16[4] = {};
    latte::cuda::GemvParams both{.type = GgmlType::q8_0, .weight = dummy, .x = dummy, .y = dummy, .y_bf16 = dummy_bf16};
    const latte::Error both_args = error_of([&] { latte::cuda::gemv_quant(both, nullptr); });
    CHECK(both_args.code() == latte::ErrorCode::invalid_argument);
    CHECK(std::string(both_args.what()) == "gemv_quant: weight, x and exactly one of y and y_bf16 must be set");
  }
  gemv.type = GgmlType::q8_k;
  const latte::Error gemv_type = error_of([&] { latte::cuda::gemv_quant(gemv, nullptr); });
  CHECK(gemv_type.code() == latte::ErrorCode::unsupported);
  CHECK(std::string(gemv_type.what()) == "gemv_quant: no GEMV kernel for type q8_K");
}
