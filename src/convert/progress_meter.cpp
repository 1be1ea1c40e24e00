#include "convert/progress_meter.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace latte::convert {
namespace {

constexpr auto bar_interval = std::chrono::milliseconds(250);
constexpr auto line_interval = std::chrono::seconds(10);
constexpr int bar_width = 30;  // characters

}  // namespace

ProgressMeter::ProgressMeter(std::string label, uint64_t total, Mode mode, std::FILE* out)
    : label_(std::move(label)), total_(total), out_(out), start_(std::chrono::steady_clock::now()) {
  silent_ = mode == Mode::silent;
  bar_ = mode == Mode::bar || (mode == Mode::automatic && ::isatty(::fileno(out_)) == 1);
  if (!silent_) reporter_ = std::thread([this] { report_loop(); });
}

ProgressMeter::~ProgressMeter() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (reporter_.joinable()) reporter_.join();
}

double ProgressMeter::elapsed_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::string ProgressMeter::format_bytes(double bytes) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  int u = 0;
  while (bytes >= 1000.0 && u < 4) {
    bytes /= 1000.0;
    ++u;
  }
  char text[32];
  std::snprintf(text, sizeof text, u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
  return text;
}

std::string ProgressMeter::format_duration(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  char text[32];
  if (s >= 3600) {
    std::snprintf(text, sizeof text, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  } else {
    std::snprintf(text, sizeof text, "%ld:%02ld", s / 60, s % 60);
  }
  return text;
}

void ProgressMeter::print(bool final_line) {
  const double elapsed = elapsed_seconds();
  const double done = static_cast<double>(std::min(done_.load(std::memory_order_relaxed), total_));
  const double total = static_cast<double>(total_);
  const double fraction = total > 0 ? done / total : 1.0;
  const double rate = elapsed > 0 ? done / elapsed : 0.0;  // units per second
  if (final_line) {
    std::fprintf(out_, "%s%s: %s in %s (%s/s)\n", bar_ ? "\r\033[K" : "", label_.c_str(), format_bytes(total).c_str(),
                 format_duration(elapsed).c_str(), format_bytes(rate).c_str());
  } else {
    const std::string eta = rate > 0 && done < total ? format_duration((total - done) / rate) : "?";
    if (bar_) {
      const int filled = static_cast<int>(fraction * bar_width);
      std::string bar(static_cast<size_t>(filled), '#');
      bar.resize(bar_width, '.');
      std::fprintf(out_, "\r\033[K%s [%s] %5.1f%% %s/%s %s/s ETA %s", label_.c_str(), bar.c_str(), 100.0 * fraction,
                   format_bytes(done).c_str(), format_bytes(total).c_str(), format_bytes(rate).c_str(), eta.c_str());
    } else {
      std::fprintf(out_, "%s: %5.1f%% %s/%s %s/s ETA %s\n", label_.c_str(), 100.0 * fraction,
                   format_bytes(done).c_str(), format_bytes(total).c_str(), format_bytes(rate).c_str(), eta.c_str());
    }
  }
  std::fflush(out_);
}

void ProgressMeter::report_loop() {
  std::unique_lock lock(mutex_);
  const auto interval = bar_ ? std::chrono::duration_cast<std::chrono::milliseconds>(bar_interval)
                             : std::chrono::duration_cast<std::chrono::milliseconds>(line_interval);
  while (!wake_.wait_for(lock, interval, [&] { return stop_; })) print(false);
}

void ProgressMeter::finish() {
  {
    std::lock_guard lock(mutex_);
    if (finished_) return;
    finished_ = true;
    stop_ = true;
  }
  wake_.notify_all();
  if (reporter_.joinable()) reporter_.join();
  if (!silent_) print(true);
}

}  // namespace latte::convert
