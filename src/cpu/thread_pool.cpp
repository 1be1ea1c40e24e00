#include "cpu/thread_pool.hpp"

#include "core/task_pool.hpp"

#include <latte/error.hpp>
#include <latte/session.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <system_error>

namespace latte::cpu {

namespace {

// Set on the pool's worker threads and while the caller runs tasks: nested calls run serially.
thread_local bool t_inside_task = false;

/// How long a thread spins for the next call or for the workers to finish before it blocks on a
/// condition variable. Short: on an oversubscribed machine a spinning thread takes the core from
/// the thread it waits for.
constexpr auto kSpinTime = std::chrono::microseconds(50);

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

/// Spins until `done()` or kSpinTime passes (busy-waiting first, then yielding); returns done().
template <class Done>
bool spin_until(Done done) {
  const auto deadline = std::chrono::steady_clock::now() + kSpinTime;
  for (int i = 0;; ++i) {
    if (done()) return true;
    if (i < 512) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > deadline) return done();
  }
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  require_thread_count(n_threads, "thread count");
  if (n_threads == 0) {
    n_threads =
        static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, static_cast<unsigned>(max_threads)));
  }
  workers_.reserve(static_cast<size_t>(n_threads - 1));
  try {
    for (int w = 1; w < n_threads; ++w) workers_.emplace_back([this, w] { worker_loop(w); });
  } catch (const std::system_error& e) {  // the system refused a thread: stop the ones started
    const size_t started = workers_.size();
    {
      std::lock_guard lock(mutex_);
      stopping_.store(true);
    }
    start_cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
    throw thread_start_error(started, n_threads, e);
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_.store(true);
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_tasks(int worker) {
  const bool was_inside = t_inside_task;
  t_inside_task = true;
  for (int task = next_task_.fetch_add(1); task < n_tasks_; task = next_task_.fetch_add(1)) {
    try {
      (*body_)(task, worker);
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
  }
  t_inside_task = was_inside;
}

void ThreadPool::worker_loop(int worker) {
  t_inside_task = true;
  uint64_t seen = 0;
  for (;;) {
    auto published = [&] { return stopping_.load() || generation_.load(std::memory_order_acquire) != seen; };
    if (!spin_until(published)) {
      std::unique_lock lock(mutex_);
      start_cv_.wait(lock, published);
    }
    if (stopping_.load()) return;
    seen = generation_.load(std::memory_order_acquire);
    run_tasks(worker);
    if (busy_workers_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard lock(mutex_);  // pairs with the caller's predicate check: no lost wake-up
      done_cv_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int n_tasks, const std::function<void(int, int)>& body) {
  if (n_tasks <= 0) return;
  if (workers_.empty() || n_tasks == 1 || t_inside_task) {
    for (int t = 0; t < n_tasks; ++t) body(t, 0);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    body_ = &body;
    n_tasks_ = n_tasks;
    next_task_.store(0);
    busy_workers_.store(static_cast<int>(workers_.size()));
    error_ = nullptr;
    generation_.fetch_add(1, std::memory_order_release);
  }
  start_cv_.notify_all();
  run_tasks(0);
  auto finished = [&] { return busy_workers_.load(std::memory_order_acquire) == 0; };
  if (!spin_until(finished)) {
    std::unique_lock lock(mutex_);
    done_cv_.wait(lock, finished);
  }
  std::exception_ptr error;
  {
    std::lock_guard lock(mutex_);
    body_ = nullptr;
    error = error_;
    error_ = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

TaskRunner ThreadPool::runner() {
  return TaskRunner{.n_workers = size(),
                    .run = [this](int n, const std::function<void(int, int)>& body) { parallel_for(n, body); }};
}

}  // namespace latte::cpu
