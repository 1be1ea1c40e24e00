// Counts the heap allocations (operator new) made by the current thread while a counter is active,
// to check that parsing a file allocates in proportion to its real size, not to the sizes it declares.
// Linking this file replaces the global operator new/delete of the test binary with malloc/free
// wrappers (AddressSanitizer still sees every block).
//
//   latte::test::AllocationCounter count;  parse(bytes);  CHECK(count.largest() < 64 * bytes.size());
#pragma once

#include <cstddef>

namespace latte::test {

class AllocationCounter {
 public:
  /// Starts counting this thread's allocations (counters nest: the innermost one counts).
  AllocationCounter() noexcept;
  /// Stops counting.
  ~AllocationCounter();
  AllocationCounter(const AllocationCounter&) = delete;
  AllocationCounter& operator=(const AllocationCounter&) = delete;

  /// Bytes requested in total (freed blocks included).
  [[nodiscard]] size_t total() const noexcept { return total_; }
  /// The largest single request, in bytes.
  [[nodiscard]] size_t largest() const noexcept { return largest_; }
  /// Number of requests.
  [[nodiscard]] size_t count() const noexcept { return count_; }

  /// Called by operator new.
  void note(size_t bytes) noexcept {
    total_ += bytes;
    largest_ = bytes > largest_ ? bytes : largest_;
    ++count_;
  }

 private:
  AllocationCounter* outer_;
  size_t total_ = 0;
  size_t largest_ = 0;
  size_t count_ = 0;
};

}  // namespace latte::test
