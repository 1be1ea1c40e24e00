// Device-to-device copy bandwidth (see copy_bandwidth.hpp).
#include "cuda/copy_bandwidth.hpp"

#include "cuda/device_buffer.hpp"

#include <latte/error.hpp>

#include <algorithm>
#include <string>

namespace latte::cuda {

double measure_copy_bandwidth(int ordinal, size_t bytes, int reps) {
  if (bytes < (size_t{1} << 20) || reps < 1) {
    throw Error(ErrorCode::invalid_argument, "measure_copy_bandwidth: needs at least 1 MiB and 1 rep (got " +
                                                 std::to_string(bytes) + " bytes, " + std::to_string(reps) + " reps)");
  }
  LATTE_CUDA_CHECK(cudaSetDevice(ordinal));
  DeviceBuffer<unsigned char> src(bytes, "copy bandwidth source"), dst(bytes, "copy bandwidth destination");
  LATTE_CUDA_CHECK(cudaMemset(src.data(), 0x5a, bytes));
  Stream stream;
  Event start, stop;
  constexpr int kCopiesPerBatch = 3;
  LATTE_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, stream.get()));
  double best_ms = 0;
  for (int r = 0; r < reps; ++r) {
    start.record(stream.get());
    for (int i = 0; i < kCopiesPerBatch; ++i) {
      LATTE_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, stream.get()));
    }
    stop.record(stream.get());
    LATTE_CUDA_CHECK(cudaEventSynchronize(stop.get()));
    const double ms = stop.elapsed_ms_since(start);
    best_ms = r == 0 ? ms : std::min(best_ms, ms);
  }
  return 2.0 * static_cast<double>(bytes) * kCopiesPerBatch / (best_ms * 1e-3);
}

}  // namespace latte::cuda
