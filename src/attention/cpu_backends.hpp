// Factories of the built-in CPU attention backends (registered by the registry on first use).
#pragma once

#include <latte/attention.hpp>

#include <cstdint>

namespace latte::detail {

/// `mla`: weight-absorbed attention over the latent cache c|k_pe (L + R floats per token per layer).
AttentionBackendInfo cpu_mla_backend_info();
/// `standard`: decompressed attention over per-head K (P + R) and V (V) floats per token per layer.
AttentionBackendInfo cpu_standard_backend_info();

/// Query rows per attention task of the CPU backends.
inline constexpr int kCpuQueryBlock = 32;

/// `runner` when `multiply_adds` of attention work pay for a parallel region, else a serial one.
inline const TaskRunner& runner_for(int64_t multiply_adds, const TaskRunner* runner, const TaskRunner& serial) {
  constexpr int64_t kMinParallelWork = 512 * 1024;
  return runner && multiply_adds >= kMinParallelWork ? *runner : serial;
}

}  // namespace latte::detail
