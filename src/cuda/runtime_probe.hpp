// Probing for CUDA devices from code that is compiled with or without the CUDA backend.
#pragma once

namespace latte::cuda {

/// Number of usable CUDA devices; 0 when the build has no CUDA backend, no driver or no device.
int probe_device_count() noexcept;

}  // namespace latte::cuda
