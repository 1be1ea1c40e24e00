// Factories of the built-in CPU attention backends (registered by the registry on first use).
#pragma once

#include <latte/attention.hpp>

namespace latte::detail {

/// `mla`: weight-absorbed attention over the latent cache c|k_pe (L + R floats per token per layer).
AttentionBackendInfo cpu_mla_backend_info();
/// `standard`: decompressed attention over per-head K (P + R) and V (V) floats per token per layer.
AttentionBackendInfo cpu_standard_backend_info();

/// Query rows per attention task of the CPU backends.
inline constexpr int kCpuQueryBlock = 32;

}  // namespace latte::detail
