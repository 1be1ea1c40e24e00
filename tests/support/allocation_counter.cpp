#include "support/allocation_counter.hpp"

#include <cstdlib>
#include <new>

namespace latte::test {
namespace {
thread_local AllocationCounter* t_active = nullptr;

void* counted_malloc(std::size_t bytes) {
  if (t_active != nullptr) t_active->note(bytes);
  return std::malloc(bytes == 0 ? 1 : bytes);
}
}  // namespace

AllocationCounter::AllocationCounter() noexcept : outer_(t_active) { t_active = this; }
AllocationCounter::~AllocationCounter() { t_active = outer_; }

}  // namespace latte::test

// The replacements (all plain and array forms; the aligned forms keep the library's defaults, which
// allocate and free with the C allocator as well).
void* operator new(std::size_t bytes) {
  if (void* p = latte::test::counted_malloc(bytes)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t bytes) {
  if (void* p = latte::test::counted_malloc(bytes)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t bytes, const std::nothrow_t&) noexcept { return latte::test::counted_malloc(bytes); }
void* operator new[](std::size_t bytes, const std::nothrow_t&) noexcept { return latte::test::counted_malloc(bytes); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
