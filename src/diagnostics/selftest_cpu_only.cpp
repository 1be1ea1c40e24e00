// A build without CUDA has no GPU kernels to check. (With CUDA, src/cuda/selftest_cases.cpp is built.)
#ifndef LATTE_WITH_CUDA
#include "diagnostics/selftest_cases.hpp"

#include <latte/error.hpp>

namespace latte::diagnostics::detail {

bool selftest_built() noexcept { return false; }

std::string selftest_identity(int) { throw Error(ErrorCode::unsupported, "the GPU self-test needs a build with CUDA"); }

SelftestResult run_selftest_cases(int, const SelftestPlan&) {
  return {.ran = false, .passed = false, .reason = "this build of latte has no CUDA backend", .table = {}};
}

}  // namespace latte::diagnostics::detail
#endif
