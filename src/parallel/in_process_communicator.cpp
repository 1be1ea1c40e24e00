// In-process collectives: post a pointer, barrier, read the other ranks' buffers, barrier, write.
// The second barrier guarantees no rank overwrites its buffer while another still reads it.
#include "parallel/in_process_communicator.hpp"

#include <latte/error.hpp>
#include <latte/quant.hpp>

#include <cstring>

namespace latte::detail {

class InProcessGroup::Rank final : public Communicator {
 public:
  Rank(InProcessGroup& group, int rank) : group_(group), rank_(rank) {}

  [[nodiscard]] int rank() const noexcept override { return rank_; }
  [[nodiscard]] int world_size() const noexcept override { return group_.world_size_; }

  void all_reduce_sum(void* data, size_t count, CollectiveType type) override {
    post(data);
    // Every rank sums all buffers in rank order into its scratch: identical bits everywhere.
    sum_.assign(count, 0.0f);
    for (int r = 0; r < group_.world_size_; ++r) {
      const void* src = group_.posted_[static_cast<size_t>(r)];
      if (type == CollectiveType::f32) {
        const auto* v = static_cast<const float*>(src);
        for (size_t i = 0; i < count; ++i) sum_[i] += v[i];
      } else {
        const auto* v = static_cast<const uint16_t*>(src);
        for (size_t i = 0; i < count; ++i) sum_[i] += bf16_to_fp32(v[i]);
      }
    }
    group_.arrive_and_wait();  // everyone has read every buffer
    if (type == CollectiveType::f32) {
      std::memcpy(data, sum_.data(), count * sizeof(float));
    } else {
      auto* out = static_cast<uint16_t*>(data);
      for (size_t i = 0; i < count; ++i) out[i] = fp32_to_bf16(sum_[i]);
    }
  }

  void all_gather(const void* send, void* recv, size_t count, CollectiveType type) override {
    post(send);
    const size_t bytes = count * collective_type_size(type);
    for (int r = 0; r < group_.world_size_; ++r) {
      std::memcpy(static_cast<std::byte*>(recv) + static_cast<size_t>(r) * bytes,
                  group_.posted_[static_cast<size_t>(r)], bytes);
    }
    group_.arrive_and_wait();
  }

  void broadcast(void* data, size_t count, CollectiveType type, int root) override {
    if (root < 0 || root >= group_.world_size_) {
      throw Error(ErrorCode::invalid_argument, "broadcast: root " + std::to_string(root) + " outside the group of " +
                                                   std::to_string(group_.world_size_) + " ranks");
    }
    post(data);
    if (rank_ != root) {
      std::memcpy(data, group_.posted_[static_cast<size_t>(root)], count * collective_type_size(type));
    }
    group_.arrive_and_wait();
  }

 private:
  void post(const void* buffer) {
    group_.posted_[static_cast<size_t>(rank_)] = buffer;
    group_.arrive_and_wait();  // every rank's pointer is visible
  }

  InProcessGroup& group_;
  int rank_;
  std::vector<float> sum_;  // fp32 accumulator of all_reduce_sum
};

InProcessGroup::InProcessGroup(int world_size) : world_size_(world_size) {
  if (world_size < 1) {
    throw Error(ErrorCode::invalid_argument,
                "an in-process group needs at least one rank (got " + std::to_string(world_size) + ")");
  }
  posted_.assign(static_cast<size_t>(world_size), nullptr);
  for (int r = 0; r < world_size; ++r) ranks_.push_back(std::make_unique<Rank>(*this, r));
}

InProcessGroup::~InProcessGroup() = default;

Communicator& InProcessGroup::rank(int r) {
  if (r < 0 || r >= world_size_) {
    throw Error(ErrorCode::invalid_argument,
                "rank " + std::to_string(r) + " outside the group of " + std::to_string(world_size_) + " ranks");
  }
  return *ranks_[static_cast<size_t>(r)];
}

void InProcessGroup::abort(const std::string& reason) {
  const std::lock_guard lock(mutex_);
  if (!aborted_) abort_reason_ = reason;
  aborted_ = true;
  cv_.notify_all();
}

void InProcessGroup::reset() {
  const std::lock_guard lock(mutex_);
  aborted_ = false;
  abort_reason_.clear();
  arrived_ = 0;
  ++generation_;
}

void InProcessGroup::arrive_and_wait() {
  std::unique_lock lock(mutex_);
  auto fail = [&] {
    return Error(ErrorCode::device,
                 "tensor-parallel group of " + std::to_string(world_size_) + " ranks aborted: " + abort_reason_);
  };
  if (aborted_) throw fail();
  const uint64_t generation = generation_;
  if (++arrived_ == world_size_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  cv_.wait(lock, [&] { return generation_ != generation || aborted_; });
  if (generation_ == generation) throw fail();  // woken by abort() before the barrier completed
}

}  // namespace latte::detail
