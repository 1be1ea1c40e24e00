// Turning CUDA / cuBLAS status codes into latte::Error. Every runtime call and every launch is checked.
//
//   LATTE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
//   my_kernel<<<grid, block, 0, stream>>>(params); LATTE_CUDA_CHECK_LAUNCH();
#pragma once

#include <latte/error.hpp>

#include <cuda_runtime.h>

#include <string>

namespace latte::cuda {

/// Throws Error(device) (or Error(out_of_memory)) describing `status` raised by `what` at file:line.
[[noreturn]] void throw_cuda_error(cudaError_t status, const char* what, const char* file, int line);

inline void check(cudaError_t status, const char* what, const char* file, int line) {
  if (status != cudaSuccess) throw_cuda_error(status, what, file, line);
}

}  // namespace latte::cuda

#define LATTE_CUDA_CHECK(expr) ::latte::cuda::check((expr), #expr, __FILE__, __LINE__)
#define LATTE_CUDA_CHECK_LAUNCH() ::latte::cuda::check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

namespace latte::cuda {

/// Whether `stream` is capturing a graph: what is made once (weight copies) is made only outside a capture, so a
/// captured step never changes path and never records the one-off work.
inline bool stream_is_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  LATTE_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  return capture != cudaStreamCaptureStatusNone;
}

}  // namespace latte::cuda
