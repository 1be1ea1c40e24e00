// A tensor-parallel group whose ranks are threads of one process: buffers are exchanged through
// shared memory between barriers. Deterministic: a sum is always taken in rank order, so every rank
// gets the same bits, whatever the thread timing.
//
//   latte::detail::InProcessGroup group(2);
//   std::thread t([&] { group.rank(1).all_reduce_sum(std::span<float>(b)); });
//   group.rank(0).all_reduce_sum(std::span<float>(a)); t.join();   // a == b == a + b
#pragma once

#include "parallel/communicator.hpp"

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace latte::detail {

/// `world_size` in-process ranks. rank(r) is used by exactly one thread at a time.
class InProcessGroup {
 public:
  /// Throws Error(invalid_argument) for world_size < 1.
  explicit InProcessGroup(int world_size);
  ~InProcessGroup();
  InProcessGroup(const InProcessGroup&) = delete;
  InProcessGroup& operator=(const InProcessGroup&) = delete;

  [[nodiscard]] int world_size() const noexcept { return world_size_; }
  /// Rank r's communicator (0 <= r < world_size). Throws Error(invalid_argument) otherwise.
  [[nodiscard]] Communicator& rank(int r);

  /// Marks the group failed (a rank threw): waiting and later collectives throw Error(device)
  /// naming `reason`, so no rank waits forever for one that is gone.
  void abort(const std::string& reason);
  /// Makes an aborted group usable again (all ranks must be outside collectives).
  void reset();

 private:
  class Rank;
  friend class Rank;

  /// Blocks until every rank has arrived; throws Error(device) when the group is aborted.
  void arrive_and_wait();

  int world_size_;
  std::mutex mutex_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
  std::string abort_reason_;
  std::vector<const void*> posted_;  // [world] each rank's buffer for the current collective
  std::vector<std::unique_ptr<Rank>> ranks_;
};

}  // namespace latte::detail
