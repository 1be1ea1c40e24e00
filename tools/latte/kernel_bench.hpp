// Registry of `latte kernel-bench` cases. Each case names a kernel and a shape, states the bytes it
// must move and the FLOPs it must do, and prepares a launcher on freshly allocated random inputs
// (rotated over several copies so that the set is larger than L2). Cases are built for a model's
// shapes (KernelBenchShapes: DeepSeek-V2-Lite by default, or those of a loaded model for
// `latte bench --kernels`). Add case factories from any file:
//
//   static const latte::cli::KernelBenchRegistration reg{[](const latte::cli::KernelBenchShapes& m) {
//     return std::vector<latte::cli::KernelBenchCase>{{.kernel = "mla decode", ...}}; }};
#pragma once

#ifdef LATTE_WITH_CUDA

#include <latte/model.hpp>

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
  /// Allocates the inputs and returns the launcher; an empty one where this device has no such launch (skipped).
  std::function<BenchLauncher(BenchContext&)> prepare;
};

/// The dimensions the cases are built at. The defaults are DeepSeek-V2-Lite's; `reference` marks
/// them (the standalone `latte kernel-bench` then adds the V3 / GLM-5 shapes it always times).
struct KernelBenchShapes {
  std::string label = "DeepSeek-V2-Lite";
  bool reference = true;                          ///< the default shapes, not a loaded model's
  int hidden = 2048;                              ///< H
  int q_rows = 3072;                              ///< N * (P + R): rows of attn_q / attn_q_b
  int q_k = 2048;                                 ///< input width of the query product: H, or Lq with q compression
  int kv_a_rows = 576;                            ///< L + R
  int o_k = 2048;                                 ///< N * V: input width of attn_output
  int dense_ffn = 10944;                          ///< dense FFN width (0: no dense block)
  int vocab = 129280;                             ///< output head rows
  int n_expert = 64;                              ///< routed experts (0: dense model)
  int n_expert_used = 6;                          ///< experts per token
  int expert_ffn = 1408;                          ///< routed expert width
  int n_head = 16;                                ///< N
  int qk_nope = 128, qk_rope = 64, v_head = 128;  ///< P, R, V
  int kv_lora = 512;                              ///< L
  int indexer_heads = 0;                          ///< DSA indexer heads (0: none)
  int indexer_top_k = 0;                          ///< DSA top_k
};

/// The shapes of a model's config.
KernelBenchShapes kernel_bench_shapes(const ModelConfig& config);

/// A factory of cases for some shapes.
using KernelBenchFactory = std::function<std::vector<KernelBenchCase>(const KernelBenchShapes& shapes)>;

/// Every registered factory's cases at `shapes`, in registration order.
std::vector<KernelBenchCase> kernel_bench_cases(const KernelBenchShapes& shapes);

/// Registers a factory at static-initialisation time.
struct KernelBenchRegistration {
  explicit KernelBenchRegistration(KernelBenchFactory factory);
};

/// How to run the cases.
struct KernelBenchRun {
  std::string filter{};  ///< only cases whose "kernel shape" contains this text
  int batches = 11;      ///< timed batches (the median is reported)
  int per_batch = 20;    ///< launches per batch
  int device = 0;        ///< CUDA ordinal
};

/// Measures the device's copy bandwidth and bf16 matrix rate, then times every case at `shapes`
/// and prints one line per case (time, GB/s, TFLOP/s, fraction of the ceiling). Returns 0, or 1
/// when a case failed (its line says why).
int run_kernel_bench_cases(const KernelBenchShapes& shapes, const KernelBenchRun& run);

}  // namespace latte::cli

#endif  // LATTE_WITH_CUDA
