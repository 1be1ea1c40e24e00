#include "cpu/thread_pool.hpp"

#include <latte/error.hpp>

namespace latte::cpu {

namespace {
// Set on the pool's worker threads and while the caller runs tasks: nested calls run serially.
thread_local bool t_inside_task = false;
}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads < 0) throw Error(ErrorCode::invalid_argument, "thread count must not be negative");
  if (n_threads == 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  workers_.reserve(static_cast<size_t>(n_threads - 1));
  for (int w = 1; w < n_threads; ++w) workers_.emplace_back([this, w] { worker_loop(w); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
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
    {
      std::unique_lock lock(mutex_);
      start_cv_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
    }
    run_tasks(worker);
    {
      std::lock_guard lock(mutex_);
      if (--busy_workers_ == 0) done_cv_.notify_one();
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
    busy_workers_ = static_cast<int>(workers_.size());
    error_ = nullptr;
    ++generation_;
  }
  start_cv_.notify_all();
  run_tasks(0);
  std::exception_ptr error;
  {
    std::unique_lock lock(mutex_);
    done_cv_.wait(lock, [&] { return busy_workers_ == 0; });
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
