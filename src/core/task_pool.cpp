#include "core/task_pool.hpp"

#include <latte/error.hpp>
#include <latte/session.hpp>

#include <algorithm>
#include <string>
#include <system_error>

namespace latte {

void require_thread_count(long long n, std::string_view what) {
  if (n < 0 || n > max_threads) {
    throw Error(ErrorCode::invalid_argument, std::string(what) + " must be in 0.." + std::to_string(max_threads) +
                                                 " (got " + std::to_string(n) + ")");
  }
}

Error thread_start_error(size_t started, long long n, const std::system_error& refusal) {
  return Error(ErrorCode::out_of_memory, "could not start CPU thread " + std::to_string(started + 1) + " of " +
                                             std::to_string(n) + ": " + refusal.what());
}

TaskPool::TaskPool(unsigned n_threads) {
  require_thread_count(n_threads, "thread count");
  const unsigned n_workers = std::max(1u, n_threads) - 1;
  workers_.reserve(n_workers);
  try {
    for (unsigned i = 0; i < n_workers; ++i) workers_.emplace_back([this] { worker_loop(); });
  } catch (const std::system_error& e) {  // the system refused a thread: stop the ones started
    const size_t started = workers_.size();
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    work_available_.notify_all();
    workers_.clear();  // joins
    throw thread_start_error(started, n_threads, e);
  }
}

TaskPool::~TaskPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_available_.notify_all();
  workers_.clear();  // joins
}

bool TaskPool::run_one(std::unique_lock<std::mutex>& lock, Batch& batch) {
  if (batch.next >= batch.n_tasks) return false;
  const size_t index = batch.next++;
  if (batch.next >= batch.n_tasks) {
    // Fully handed out: no other thread needs to find it in the queue any more.
    const auto it = std::find_if(batches_.begin(), batches_.end(), [&](const auto& b) { return b.get() == &batch; });
    if (it != batches_.end()) batches_.erase(it);
  }
  const bool skip = batch.failed;
  lock.unlock();
  std::exception_ptr error;
  if (!skip) {
    try {
      (*batch.task)(index);
    } catch (...) {
      error = std::current_exception();
    }
  }
  lock.lock();
  if (error && !batch.failed) {
    batch.failed = true;
    batch.error = error;
  }
  if (++batch.finished == batch.n_tasks) batch_done_.notify_all();
  return true;
}

void TaskPool::worker_loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    work_available_.wait(lock, [&] { return stopping_ || !batches_.empty(); });
    if (stopping_) return;
    const std::shared_ptr<Batch> batch = batches_.front();  // keeps it alive while we run its task
    run_one(lock, *batch);
  }
}

void TaskPool::run(size_t n_tasks, const std::function<void(size_t)>& task) {
  if (n_tasks == 0) return;
  auto batch = std::make_shared<Batch>();
  batch->task = &task;
  batch->n_tasks = n_tasks;
  std::unique_lock lock(mutex_);
  if (n_tasks > 1 && !workers_.empty()) {
    batches_.push_back(batch);
    work_available_.notify_all();
  }
  while (run_one(lock, *batch)) {
  }
  batch_done_.wait(lock, [&] { return batch->finished == batch->n_tasks; });
  if (batch->error) std::rethrow_exception(batch->error);
}

}  // namespace latte
