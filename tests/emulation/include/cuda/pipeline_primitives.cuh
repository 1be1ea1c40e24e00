// Emulated twin of src/cuda/pipeline_primitives.cuh: mbarriers with their phase, arrival and
// transaction counts kept beside the shared-memory object, bulk copies that land at issue and complete
// their bytes on the barrier, named barriers and grid counters as rendezvous of the emulated threads.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

namespace latte::cuda::pipeline {

namespace detail {
struct Mbarrier {
  uint32_t expected = 0;  // arrivals per phase
  uint32_t pending = 0;   // arrivals still missing in the current phase
  int64_t tx = 0;         // bytes announced and not yet landed
  uint32_t phase = 0;     // parity of the current (incomplete) phase
};
inline std::map<const void*, Mbarrier>& mbarriers() {
  static std::map<const void*, Mbarrier> m;
  return m;
}
inline Mbarrier& state(const uint64_t* bar) {
  auto it = mbarriers().find(bar);
  if (it == mbarriers().end()) {
    std::fprintf(stderr, "emulation: mbarrier %p used before mbarrier_init\n", static_cast<const void*>(bar));
    std::abort();
  }
  return it->second;
}
inline void maybe_complete(Mbarrier& b) {
  if (b.pending == 0 && b.tx == 0) {
    b.phase ^= 1u;
    b.pending = b.expected;
    ::emu::progress();
  }
}
inline void arrive(Mbarrier& b) {
  if (b.pending == 0) {
    std::fprintf(stderr, "emulation: more arrivals on an mbarrier than it expects\n");
    std::abort();
  }
  --b.pending;
  ::emu::progress();
  maybe_complete(b);
}
}  // namespace detail

inline void mbarrier_init(uint64_t* bar, uint32_t count) {
  *bar = 0;
  detail::mbarriers()[bar] = {count, count, 0, 0};
}
inline void fence_barrier_init() {}
inline void mbarrier_expect_tx(uint64_t* bar, uint32_t bytes) {
  detail::Mbarrier& b = detail::state(bar);
  b.tx += bytes;
  detail::arrive(b);
}
inline void mbarrier_arrive(uint64_t* bar) { detail::arrive(detail::state(bar)); }
inline void mbarrier_wait(uint64_t* bar, uint32_t parity) {
  while (detail::state(bar).phase == (parity & 1u)) ::emu::yield_now();
}

inline void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  if (reinterpret_cast<uintptr_t>(dst) % 16 != 0 || reinterpret_cast<uintptr_t>(src) % 16 != 0 || bytes % 16 != 0) {
    std::fprintf(stderr, "emulation: bulk copy of %u bytes from %p to %p is not 16-byte aligned\n", bytes, src, dst);
    std::abort();
  }
  std::memcpy(dst, src, bytes);
  detail::Mbarrier& b = detail::state(bar);
  b.tx -= bytes;
  if (b.tx < 0) {
    std::fprintf(stderr, "emulation: a bulk copy completed more bytes than its mbarrier expects\n");
    std::abort();
  }
  detail::maybe_complete(b);
}
inline void fence_proxy_async_global() {}

inline void named_barrier(int id, int threads) { ::emu::named_barrier(id, threads); }
inline void grid_arrive(unsigned* counter) {
  ++*counter;
  ::emu::progress();
}
inline void grid_wait(const unsigned* counter, unsigned target) {
  while (*counter < target) ::emu::yield_now();
}

inline float load_l2(const float* p) { return *p; }
inline float2 load_l2(const float2* p) { return *p; }
inline float4 load_l2(const float4* p) { return *p; }
inline int load_l2(const int* p) { return *p; }

inline void prefetch_l1(const void*) {}

inline int dot4_us(uint32_t a, uint32_t b, int c) {
  for (int i = 0; i < 4; ++i) {
    c += static_cast<int>((a >> (8 * i)) & 0xFFu) * static_cast<int>(static_cast<int8_t>((b >> (8 * i)) & 0xFFu));
  }
  return c;
}

}  // namespace latte::cuda::pipeline
