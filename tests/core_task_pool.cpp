// TaskPool: every task of a batch runs exactly once, batches from several threads at once finish
// independently, and a task's exception reaches the submitter.
#include "core/task_pool.hpp"
#include "cpu/thread_pool.hpp"

#include <latte/error.hpp>
#include <latte/session.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

TEST_CASE("task pool runs every task exactly once, also for concurrent submitters") {
  std::mt19937 rng(std::random_device{}());
  latte::TaskPool pool(1 + rng() % 4);
  std::vector<std::jthread> submitters;
  std::vector<std::vector<std::atomic<int>>> counts(3);
  for (auto& c : counts) c = std::vector<std::atomic<int>>(1 + rng() % 500);
  for (size_t s = 0; s < counts.size(); ++s) {
    submitters.emplace_back([&, s] {
      for (int round = 0; round < 5; ++round) pool.run(counts[s].size(), [&](size_t i) { ++counts[s][i]; });
    });
  }
  submitters.clear();  // joins
  for (const auto& c : counts) {
    for (const auto& n : c) CHECK(n.load() == 5);
  }
  pool.run(0, [](size_t) { FAIL("no task expected"); });
}

TEST_CASE("task pool rethrows a task's exception to the submitter") {
  latte::TaskPool pool(3);
  std::atomic<int> ran{0};
  CHECK_THROWS_WITH_AS(pool.run(100,
                                [&](size_t i) {
                                  ++ran;
                                  if (i == 37) throw std::runtime_error("task 37 failed");
                                }),
                       "task 37 failed", std::runtime_error);
  CHECK(ran.load() >= 1);
  // The pool is still usable afterwards.
  std::atomic<int> after{0};
  pool.run(10, [&](size_t) { ++after; });
  CHECK(after.load() == 10);
}

TEST_CASE("task pool and thread pool refuse more threads than latte::max_threads, before starting any") {
  CHECK_THROWS_AS(latte::TaskPool(static_cast<unsigned>(latte::max_threads) + 1), latte::Error);
  CHECK_THROWS_AS(latte::TaskPool(4000000000u), latte::Error);
  CHECK_THROWS_AS(latte::cpu::ThreadPool(latte::max_threads + 1), latte::Error);
  CHECK_THROWS_AS(latte::cpu::ThreadPool(-1), latte::Error);
  const latte::TaskPool small(2);
  CHECK(small.n_threads() == 2);
}
