// A small fixed-size thread pool for the CPU forward pass: parallel_for over independent tasks, the
// calling thread taking part. Threads sleep between calls (the machine may be shared).
//
//   latte::cpu::ThreadPool pool(4);
//   pool.parallel_for(n_blocks, [&](int block, int worker) { /* scratch[worker] */ });
#pragma once

#include <latte/attention.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace latte::cpu {

/// Runs batches of tasks on `size()` threads (the caller plus size() - 1 workers).
class ThreadPool {
 public:
  /// `n_threads` >= 1 threads in total (0 = std::thread::hardware_concurrency()).
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  /// Threads in the pool, the caller included.
  [[nodiscard]] int size() const noexcept { return static_cast<int>(workers_.size()) + 1; }

  /// Calls body(task, worker) for every task in [0, n_tasks), worker in [0, size()). Returns when
  /// all are done; rethrows the first exception a task threw. Called from inside a task, it runs the
  /// inner tasks serially on the calling thread (no nesting deadlock).
  void parallel_for(int n_tasks, const std::function<void(int task, int worker)>& body);

  /// A TaskRunner bound to this pool (valid while the pool lives).
  [[nodiscard]] TaskRunner runner();

 private:
  void worker_loop(int worker);
  void run_tasks(int worker);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  uint64_t generation_ = 0;
  bool stopping_ = false;
  const std::function<void(int, int)>* body_ = nullptr;
  int n_tasks_ = 0;
  std::atomic<int> next_task_{0};
  int busy_workers_ = 0;
  std::exception_ptr error_;
};

}  // namespace latte::cpu
