// `latte kernel-bench`: measures the device's copy bandwidth and bf16 matrix rate once, then times
// every registered kernel case (kernel_bench.hpp) with CUDA events: warm-up, then the median of
// batches of launches over rotating inputs larger than L2. Prints kernel, shape, time, GB/s,
// TFLOP/s and the fraction of the measured ceiling (max of bytes / bandwidth, flops / rate).
// run_kernel_bench_cases is also what `latte bench --kernels` runs, at the loaded model's shapes.
#ifdef LATTE_WITH_CUDA

#include <latte/device.hpp>
#include <latte/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "command.hpp"
#include "cuda/copy_bandwidth.hpp"
#include "cuda/device_buffer.hpp"
#include "cuda/device_caps.hpp"
#include "cuda/gemm_bf16.hpp"
#include "kernel_bench.hpp"
#include "token_list.hpp"

namespace latte::cli {

namespace {
std::vector<KernelBenchFactory>& factories() {
  static std::vector<KernelBenchFactory> all;
  return all;
}
}  // namespace

std::vector<KernelBenchCase> kernel_bench_cases(const KernelBenchShapes& shapes) {
  std::vector<KernelBenchCase> cases;
  for (const auto& make : factories()) {
    for (auto& c : make(shapes)) cases.push_back(std::move(c));
  }
  return cases;
}

KernelBenchRegistration::KernelBenchRegistration(KernelBenchFactory factory) {
  factories().push_back(std::move(factory));
}

KernelBenchShapes kernel_bench_shapes(const ModelConfig& c) {
  const int n_head = c.n_head;
  return {.label = c.name.empty() ? std::string(architecture_name(c.arch)) : c.name,
          .reference = false,
          .hidden = c.n_embd,
          .q_rows = n_head * c.qk_head_dim(),
          .q_k = c.q_lora_rank > 0 ? c.q_lora_rank : c.n_embd,
          .kv_a_rows = c.kv_lora_rank + c.qk_rope_head_dim,
          .o_k = n_head * c.v_head_dim,
          .dense_ffn = c.n_dense_lead > 0 ? c.n_ff : 0,
          .vocab = c.n_vocab,
          .n_expert = c.n_expert,
          .n_expert_used = c.n_expert_used,
          .expert_ffn = c.n_ff_expert,
          .n_head = n_head,
          .qk_nope = c.qk_nope_head_dim,
          .qk_rope = c.qk_rope_head_dim,
          .v_head = c.v_head_dim,
          .kv_lora = c.kv_lora_rank,
          .indexer_heads = c.indexer.n_head,
          .indexer_top_k = c.indexer.top_k};
}

namespace {

struct Timing {
  double median_us = 0;
  double spread = 0;  ///< (max - min) / median over the batches
};

/// Median over `batches` of the mean time of `per_batch` launches, after one warm-up batch.
Timing time_launches(const BenchLauncher& launch, int batches, int per_batch, cudaStream_t stream) {
  cuda::Event start, stop;
  int rep = 0;
  for (int i = 0; i < per_batch; ++i) launch(stream, rep++);
  LATTE_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> us;
  for (int b = 0; b < batches; ++b) {
    start.record(stream);
    for (int i = 0; i < per_batch; ++i) launch(stream, rep++);
    stop.record(stream);
    LATTE_CUDA_CHECK(cudaEventSynchronize(stop.get()));
    us.push_back(1000.0 * stop.elapsed_ms_since(start) / per_batch);
  }
  std::sort(us.begin(), us.end());
  const double median = us[us.size() / 2];
  return {median, (us.back() - us.front()) / median};
}

int run_kernel_bench(std::span<const std::string> args) {
  Args a(args);
  if (a.flag({"--help", "-h"})) {
    std::printf(
        "usage: latte kernel-bench [--filter TEXT] [--batches N] [--per-batch N] [--device cuda:N | N]\n"
        "Times the CUDA kernels at DeepSeek-V2-Lite shapes against the measured copy bandwidth and\n"
        "bf16 matrix rate of the device.\n");
    return 0;
  }
  const std::string filter = a.take({"--filter"}).value_or("");
  const int batches = parse_int_option("--batches", a.take({"--batches"}).value_or("11"));
  const int per_batch = parse_int_option("--per-batch", a.take({"--per-batch"}).value_or("20"));
  const std::string device_text = a.take({"--device"}).value_or("cuda:0");
  // "cuda:N" as every other command takes it, or the bare ordinal
  const bool ordinal = !device_text.empty() &&
                       std::all_of(device_text.begin(), device_text.end(), [](char c) { return c >= '0' && c <= '9'; });
  const Device parsed = ordinal ? Device::cuda(parse_int_option("--device", device_text)) : Device::parse(device_text);
  if (!parsed.is_cuda()) {
    throw Error(ErrorCode::invalid_argument, "kernel-bench: --device " + device_text + " is not a CUDA device");
  }
  const int device = parsed.index;
  a.positionals();
  if (batches < 1 || per_batch < 1) throw Error(ErrorCode::invalid_argument, "--batches and --per-batch must be >= 1");
  return run_kernel_bench_cases(KernelBenchShapes{},
                                {.filter = filter, .batches = batches, .per_batch = per_batch, .device = device});
}

}  // namespace

int run_kernel_bench_cases(const KernelBenchShapes& shapes, const KernelBenchRun& run) {
  const std::string& filter = run.filter;
  const int batches = run.batches, per_batch = run.per_batch, device = run.device;
  if (batches < 1 || per_batch < 1) throw Error(ErrorCode::invalid_argument, "batches and per-batch must be >= 1");
  const int n_devices = Device::cuda_device_count();
  if (device < 0 || device >= n_devices) {
    throw Error(ErrorCode::device, "kernel-bench: no CUDA device cuda:" + std::to_string(device) + " (" +
                                       std::to_string(n_devices) + " visible)");
  }
  LATTE_CUDA_CHECK(cudaSetDevice(device));
  const auto& caps = cuda::device_caps(device);
  std::printf("device %d: %s, sm_%d%d, %d SMs, L2 %.0f MiB, kernel path %s\n", device, caps.name.c_str(), caps.cc_major,
              caps.cc_minor, caps.sm_count, static_cast<double>(caps.l2_bytes) / (1 << 20),
              cuda::kernel_path_name(cuda::select_kernel_path(device)));
  cuda::Stream stream;

  // ---- ceilings ----
  double copy_gbs = 0, mma_tflops = 0;
  copy_gbs = cuda::measure_copy_bandwidth(device) / 1e9;  // read + write
  {
    const int n = 8192;
    BenchContext ctx;
    ctx.l2_bytes = caps.l2_bytes;
    auto* a16 = static_cast<__nv_bfloat16*>(ctx.random_device(size_t{2} * n * n, 30));
    auto* b16 = static_cast<__nv_bfloat16*>(ctx.random_device(size_t{2} * n * n, 30));
    auto* c = static_cast<float*>(ctx.device_alloc(size_t{4} * n * n));
    cuda::BlasHandle blas;
    const BenchLauncher gemm = [&](cudaStream_t s, int) {
      cuda::gemm_bf16(blas, {.a = a16, .lda = n, .w = b16, .ldw = n, .c = c, .ldc = n, .m = n, .n = n, .k = n}, s);
    };
    const Timing t = time_launches(gemm, 5, 3, stream.get());
    mma_tflops = 2.0 * n * static_cast<double>(n) * n / (t.median_us * 1e6);
  }
  std::printf("ceilings: device-to-device copy %.0f GB/s (read + write), cuBLAS bf16 8192^3 %.0f TFLOP/s\n\n", copy_gbs,
              mma_tflops);

  std::printf("%-34s %-28s %10s %9s %9s %8s %7s\n", "kernel", "shape", "time us", "GB/s", "TFLOP/s", "ceiling",
              "spread");
  int failures = 0;
  std::printf("shapes: %s\n", shapes.label.c_str());
  for (const auto& c : kernel_bench_cases(shapes)) {
    if (!filter.empty() && (c.kernel + " " + c.shape).find(filter) == std::string::npos) continue;
    try {
      BenchContext ctx;
      ctx.l2_bytes = caps.l2_bytes;
      const BenchLauncher launch = c.prepare(ctx);
      if (!launch) {  // a case this device or build has no such launch for
        std::printf("%-34s %-28s skipped: not taken here\n", c.kernel.c_str(), c.shape.c_str());
        continue;
      }
      const Timing t = time_launches(launch, batches, per_batch, stream.get());
      const double gbs = c.bytes / (t.median_us * 1e3);
      const double tflops = c.flops / (t.median_us * 1e6);
      const double floor_us = std::max(c.bytes / (copy_gbs * 1e3), c.flops / (mma_tflops * 1e6));
      std::printf("%-34s %-28s %10.2f %9.0f %9.1f %7.0f%% %6.0f%%\n", c.kernel.c_str(), c.shape.c_str(), t.median_us,
                  gbs, tflops, 100.0 * floor_us / t.median_us, 100.0 * t.spread);
    } catch (const Error& e) {
      ++failures;
      std::printf("%-34s %-28s FAILED: %s\n", c.kernel.c_str(), c.shape.c_str(), e.what());
    }
    std::fflush(stdout);
  }
  return failures ? 1 : 0;
}

namespace {

const Registration reg{
    {"kernel-bench", "time the CUDA kernels against the device's measured ceilings", run_kernel_bench}};

}  // namespace
}  // namespace latte::cli

#endif  // LATTE_WITH_CUDA
