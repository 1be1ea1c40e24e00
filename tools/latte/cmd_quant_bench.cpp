// `latte quant-bench`: single-thread throughput of the row decoders, against this machine's memory
// bandwidth. For each type it times
//   hot     decoding 16 KiB of floats again and again (input and output in L1: compute-bound),
//   stream  decoding a large tensor row by row into one small reused buffer, as a matrix-vector
//           product does (input streamed from DRAM: the figure that bounds loading a model),
//   dot     dot_row over the same large tensor (decode + multiply-add, nothing written back),
// and the floors: memcpy of a large buffer and a plain read (sum) of one. Rates use the thread's CPU
// time, so other load on the machine slows the memory, not the clock.
#include "command.hpp"
#include "token_list.hpp"

#include <latte/error.hpp>
#include <latte/quant.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

namespace {

// CPU time of this thread in seconds: on a shared machine, time spent descheduled does not count.
double thread_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Runs `body` (which processes `bytes_per_call` bytes) until `min_seconds` of thread CPU time pass,
// three times; returns the best rate in GB/s (1e9 bytes per second).
template <class F>
double best_rate(double bytes_per_call, double min_seconds, F&& body) {
  // Calls are timed in batches of at least ~1 ms: reading the thread clock costs about a microsecond.
  int64_t batch = 1;
  for (;;) {
    const double start = thread_seconds();
    for (int64_t i = 0; i < batch; ++i) body();
    if (thread_seconds() - start >= 1e-3) break;
    batch *= 2;
  }
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    int64_t calls = 0;
    const double start = thread_seconds();
    double elapsed = 0;
    do {
      for (int64_t i = 0; i < batch; ++i) body();
      calls += batch;
      elapsed = thread_seconds() - start;
    } while (elapsed < min_seconds);
    best = std::max(best, bytes_per_call * static_cast<double>(calls) / elapsed / 1e9);
  }
  return best;
}

volatile float g_sink;  // keeps results alive

int run_quant_bench(std::span<const std::string> args) {
  latte::cli::Args a(args);
  if (a.flag({"--help", "-h"})) {
    std::printf(
        "usage: latte quant-bench [--type NAME] [--stream-mb MB] [--seconds S]\n"
        "  --type NAME      one type (q4_K, q8_0, ...); default: every decodable type\n"
        "  --stream-mb MB   size of the streamed encoded tensor in MiB (default 512)\n"
        "  --seconds S      minimum time per measurement (default 0.3)\n");
    return 0;
  }
  const auto type_arg = a.take({"--type"});
  const double stream_mb = latte::cli::parse_double_option("--stream-mb", a.take({"--stream-mb"}).value_or("512"));
  const double seconds = latte::cli::parse_double_option("--seconds", a.take({"--seconds"}).value_or("0.3"));
  if (!a.positionals().empty())
    throw latte::Error(latte::ErrorCode::invalid_argument, "quant-bench takes no positional arguments");
  if (!(stream_mb >= 1 && stream_mb <= 65536) || !(seconds > 0 && seconds <= 60)) {
    throw latte::Error(latte::ErrorCode::invalid_argument,
                       "quant-bench: --stream-mb must be in [1, 65536], --seconds in (0, 60]");
  }

  std::vector<latte::GgmlType> types;
  if (type_arg) {
    types.push_back(latte::parse_type_name(*type_arg));
  } else {
    for (uint32_t id = 0; id < 64; ++id) {
      const auto t = latte::find_type_traits(id);
      if (t && t->dequantizable && id != static_cast<uint32_t>(latte::GgmlType::f64) &&
          (id < 24 || id > 27)) {  // skip the integer and f64 types
        types.push_back(static_cast<latte::GgmlType>(id));
      }
    }
  }

  // Floors: memcpy (read + write) and a plain read of a large buffer.
  const size_t big = static_cast<size_t>(stream_mb * 1024 * 1024);
  std::vector<uint8_t> src(big, 1), dst(big);
  const double memcpy_rate =
      best_rate(static_cast<double>(big), seconds, [&] { std::memcpy(dst.data(), src.data(), big); });
  const auto* words = reinterpret_cast<const uint64_t*>(src.data());
  const double read_rate = best_rate(static_cast<double>(big), seconds, [&] {
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= big / 8; i += 4) {
      s0 += words[i];
      s1 += words[i + 1];
      s2 += words[i + 2];
      s3 += words[i + 3];
    }
    g_sink = static_cast<float>(s0 + s1 + s2 + s3);
  });
  dst.clear();
  dst.shrink_to_fit();
  std::printf("floors (one thread, %.0f MiB buffers): memcpy %.2f GB/s copied, read %.2f GB/s\n\n", stream_mb,
              memcpy_rate, read_rate);
  std::printf("%-7s %6s | %-22s | %-32s | %-18s\n", "type", "B/val", "hot: Gval/s  in GB/s",
              "stream: in GB/s  %read  out GB/s", "dot: in GB/s  %read");

  std::mt19937 rng(1);
  for (latte::GgmlType type : types) {
    const latte::TypeTraits& t = latte::type_traits(type);
    const double bytes_per_value = static_cast<double>(t.block_bytes) / t.block_values;
    // Random bytes with every half-precision field made finite: realistic decode work, no NaN paths.
    std::fill(src.begin(), src.end(), 0);
    for (size_t i = 0; i < big; i += 4) {
      const uint32_t r = static_cast<uint32_t>(rng());
      std::memcpy(src.data() + i, &r, std::min<size_t>(4, big - i));
    }
    for (size_t i = 1; i < big; i += 2) src[i] &= 0xbf;

    // Hot: 4096 values (16 KiB of floats, L1-resident) decoded repeatedly.
    const int64_t hot_values = 4096;
    std::vector<float> out(static_cast<size_t>(hot_values));
    const double hot_in_bytes = static_cast<double>(latte::row_bytes(type, hot_values));
    const double hot_rate = best_rate(hot_in_bytes, seconds, [&] {
      latte::dequantize_row(type, src.data(), out.data(), hot_values);
      g_sink = out[0];
    });

    // Stream: rows of 7168 values (DeepSeek-V3's hidden size), each call taking the next ~50 ms of
    // rows and wrapping around the whole buffer, so the input keeps coming from DRAM.
    const int64_t row_values = 7168;
    const uint64_t row_size = latte::row_bytes(type, row_values);
    const int64_t total_rows = static_cast<int64_t>(big / row_size);
    const int64_t rows_per_call =
        std::clamp<int64_t>(static_cast<int64_t>(hot_rate * 1e9 * 0.05 / static_cast<double>(row_size)), 1, total_rows);
    std::vector<float> row(static_cast<size_t>(row_values)), x(static_cast<size_t>(row_values), 0.5f);
    const double call_bytes = static_cast<double>(rows_per_call) * static_cast<double>(row_size);
    int64_t next_row = 0;
    const double stream_rate = best_rate(call_bytes, seconds, [&] {
      for (int64_t i = 0; i < rows_per_call; ++i, ++next_row) {
        if (next_row == total_rows) next_row = 0;
        latte::dequantize_row(type, src.data() + next_row * row_size, row.data(), row_values);
      }
      g_sink = row[0];
    });
    const double dot_rate = best_rate(call_bytes, seconds, [&] {
      float s = 0;
      for (int64_t i = 0; i < rows_per_call; ++i, ++next_row) {
        if (next_row == total_rows) next_row = 0;
        s += latte::dot_row(type, src.data() + next_row * row_size, x.data(), row_values);
      }
      g_sink = s;
    });
    std::printf("%-7s %6.3f | %9.2f  %9.2f  | %13.2f  %5.0f%%  %9.2f | %10.2f  %5.0f%%\n", std::string(t.name).c_str(),
                bytes_per_value, hot_rate / bytes_per_value, hot_rate, stream_rate, 100 * stream_rate / read_rate,
                stream_rate / bytes_per_value * 4, dot_rate, 100 * dot_rate / read_rate);
    std::fflush(stdout);
  }
  return 0;
}

const latte::cli::Registration k_registration{
    {"quant-bench", "measure single-thread dequantization throughput per type", run_quant_bench}};

}  // namespace
