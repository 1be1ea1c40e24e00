// The GPU self-test cases: defined in src/cuda/selftest_cases.cpp (CUDA builds) or
// selftest_cpu_only.cpp (builds without CUDA, where nothing can run).
#pragma once

#include "diagnostics/selftest_plan.hpp"

#include <latte/diagnostics.hpp>

#include <string>

namespace latte::diagnostics::detail {

/// Whether this build carries the GPU self-test (a CUDA build).
bool selftest_built() noexcept;
/// "sm<major><minor>-<driver version>" of device `ordinal`: the key of the cached verdict.
std::string selftest_identity(int ordinal);
/// Runs every case of `plan` on device `ordinal` (which exists).
SelftestResult run_selftest_cases(int ordinal, const SelftestPlan& plan);
/// Forgets which devices ensure_selftest verified in this process (tests of the cached verdicts).
void forget_verified_devices() noexcept;

}  // namespace latte::diagnostics::detail
