// A fixed set of worker threads that run batches of independent tasks (row blocks of a tensor).
// Several threads may submit batches at once (the GGUF writer fills two tensors concurrently); each
// submitter also works on its own batch, so a pool of N threads never runs more than N + submitters.
//
//   latte::TaskPool pool(16);
//   pool.run(n_blocks, [&](size_t block) { convert_rows(block); });
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include <latte/error.hpp>

namespace latte {

/// Throws Error(invalid_argument) "`what` must be in 0..max_threads (got n)" unless 0 <= n <= latte::max_threads:
/// the one bound of every thread count latte takes (sessions, thread pools), checked before a thread starts.
void require_thread_count(long long n, std::string_view what);

/// The Error(out_of_memory) for a thread the system refused to start, after `started` of `n` threads; the pool
/// stops and joins those before it throws this.
Error thread_start_error(size_t started, long long n, const std::system_error& refusal);

class TaskPool {
 public:
  /// Starts `n_threads - 1` workers (the submitting thread is the n-th; 0 is 1). Throws above max_threads.
  explicit TaskPool(unsigned n_threads);
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;
  ~TaskPool();

  /// Runs task(0) ... task(n_tasks - 1), in any order and on any threads, and returns when all have
  /// finished. The first exception a task throws is rethrown here (the other tasks still finish or
  /// are skipped).
  void run(size_t n_tasks, const std::function<void(size_t)>& task);

  [[nodiscard]] unsigned n_threads() const noexcept { return static_cast<unsigned>(workers_.size()) + 1; }

 private:
  struct Batch {
    const std::function<void(size_t)>* task = nullptr;
    size_t n_tasks = 0;
    size_t next = 0;      // next task index to hand out (guarded by mutex_)
    size_t finished = 0;  // tasks done (guarded by mutex_)
    bool failed = false;
    std::exception_ptr error;
  };
  // Claims and runs one task of `batch`; returns false when none was left to claim. Lock held on entry.
  bool run_one(std::unique_lock<std::mutex>& lock, Batch& batch);
  void worker_loop();

  std::mutex mutex_;
  std::condition_variable work_available_;
  std::condition_variable batch_done_;
  std::deque<std::shared_ptr<Batch>> batches_;  // batches with unclaimed tasks
  bool stopping_ = false;
  std::vector<std::jthread> workers_;
};

}  // namespace latte
