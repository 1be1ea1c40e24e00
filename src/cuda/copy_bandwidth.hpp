// The device's measured memory bandwidth: a timed loop of device-to-device cudaMemcpyAsync over
// buffers much larger than L2. The figure counts bytes read plus bytes written, so a kernel that
// streams B bytes of weights has a floor of B / copy_bandwidth() seconds.
//
//   const double bytes_per_s = latte::cuda::measure_copy_bandwidth(0);
//   std::printf("%.0f GB/s\n", bytes_per_s / 1e9);
#pragma once

#include <cstddef>

namespace latte::cuda {

/// Copies `bytes` (default 1 GiB; at least 1 MiB) from one device buffer to another on device
/// `ordinal`: one warm-up copy, then `reps` timed batches of 3 copies; returns the best batch's
/// (read + write) bytes per second. Throws Error(invalid_argument) for bytes < 1 MiB or reps < 1,
/// Error(out_of_memory) when the buffers do not fit, Error(device) for driver failures.
double measure_copy_bandwidth(int ordinal, size_t bytes = size_t{1} << 30, int reps = 5);

}  // namespace latte::cuda
