// Progress of a long conversion on stderr: a redrawn bar with rate and ETA when stderr is a terminal,
// plain lines every few seconds otherwise (logs, CI). Thread-safe: workers call add() concurrently.
//
//   latte::convert::ProgressMeter meter("converting", total_bytes);
//   meter.add(block_bytes);   // from any thread;  meter.finish() prints the summary line
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

namespace latte::convert {

class ProgressMeter {
 public:
  /// How the meter reports.
  enum class Mode {
    automatic,  ///< a bar on a terminal, periodic lines otherwise
    bar,        ///< always the redrawn bar
    lines,      ///< always periodic lines
    silent,     ///< nothing at all
  };
  /// Starts reporting `total` units (bytes) under `label`.
  ProgressMeter(std::string label, uint64_t total, Mode mode = Mode::automatic, std::FILE* out = stderr);
  ProgressMeter(const ProgressMeter&) = delete;
  ProgressMeter& operator=(const ProgressMeter&) = delete;
  /// Stops the reporter (without the summary line unless finish() was called).
  ~ProgressMeter();

  /// Adds finished work. Thread-safe.
  void add(uint64_t units) noexcept { done_.fetch_add(units, std::memory_order_relaxed); }
  /// Stops reporting and prints one summary line (total, time, rate).
  void finish();
  /// Seconds since the meter started.
  [[nodiscard]] double elapsed_seconds() const;

  /// "1.23 GB", "512 MB", ... (decimal units).
  static std::string format_bytes(double bytes);
  /// "1:05:07", "4:31", "0:09".
  static std::string format_duration(double seconds);

 private:
  void report_loop();
  void print(bool final_line);

  std::string label_;
  uint64_t total_;
  bool bar_ = false;
  bool silent_ = false;
  std::FILE* out_;
  std::chrono::steady_clock::time_point start_;
  std::atomic<uint64_t> done_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  bool finished_ = false;
  std::thread reporter_;
};

}  // namespace latte::convert
