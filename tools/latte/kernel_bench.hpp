// Registry of `latte kernel-bench` cases. Each case names a kernel and a shape, states the bytes it
// must move and the FLOPs it must do, and prepares a launcher on freshly allocated random inputs
// (rotated over several copies so that the set is larger than L2). Add cases from any file:
//
//   static const latte::cli::KernelBenchRegistration reg{{{.kernel = "mla decode", .shape = "...",
//       .bytes = b, .flops = f, .prepare = [](latte::cli::BenchContext& ctx) { ...; return launcher; }}}};
#pragma once

#ifdef LATTE_WITH_CUDA

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace latte::cli {

/// What a case's prepare() gets: the device's L2 size, a random generator and a place to keep
/// the buffers alive for the duration of the case.
struct BenchContext {
  int64_t l2_bytes = 0;
  std::mt19937_64 rng{12345};
  std::vector<std::shared_ptr<void>> keep_alive;  ///< buffers the launcher uses

  /// Copies of an input of `bytes` needed so that rotating over them exceeds L2 three times (1..64).
  [[nodiscard]] int rotating_copies(int64_t bytes) const;
  /// A device allocation owned by the context (freed after the case).
  void* device_alloc(size_t bytes);
  /// Device memory filled with random bytes (valid ggml blocks for quantized `type_id`s: sane
  /// scales, no NaN/Inf); type_id < 0 means random normal fp32 values.
  void* random_device(size_t bytes, int type_id = -1);
};

/// Launches the kernel once on `stream`; `rep` picks the rotating input copy.
using BenchLauncher = std::function<void(cudaStream_t stream, int rep)>;

struct KernelBenchCase {
  std::string kernel;  ///< e.g. "gemv q4_K"
  std::string shape;   ///< e.g. "3072x2048 t=1"
  double bytes = 0;    ///< minimal bytes moved per launch
  double flops = 0;    ///< floating-point operations per launch
  std::function<BenchLauncher(BenchContext&)> prepare;
};

/// All registered cases, in registration order.
std::vector<KernelBenchCase>& kernel_bench_cases();

/// Registers cases at static-initialisation time.
struct KernelBenchRegistration {
  explicit KernelBenchRegistration(std::vector<KernelBenchCase> cases);
};

}  // namespace latte::cli

#endif  // LATTE_WITH_CUDA
