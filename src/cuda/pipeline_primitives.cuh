// Device primitives of the persistent decode-step kernel (decode_step_kernel.cu): shared-memory
// mbarriers, bulk copies global -> shared that complete on them (the copy engine, sm_90+), named
// barriers for a subset of a block's warps, grid-wide release/acquire counters, L2-only loads of
// values other blocks wrote earlier in the same launch, and the mixed-sign 4-way byte dot product.
// tests/emulation/include/cuda/pipeline_primitives.cuh is the CPU emulation's twin of this file.
//
//   mbarrier_init(&full, 1);  mbarrier_expect_tx(&full, bytes);  bulk_copy(dst, src, bytes, &full);
//   mbarrier_wait(&full, parity);                  // consumers: the bytes have landed
#pragma once

#include <cstdint>

namespace latte::cuda::pipeline {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- mbarriers (64-bit objects in shared memory) -------------------------------------------------

/// Initialises the barrier for `count` arrivals per phase (one thread, before any use; then a block barrier).
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}

/// Makes the initialised barriers visible to the copy engine (after the inits, before the block barrier).
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

/// One arrival that also announces `bytes` more bytes of transfer for the current phase.
__device__ __forceinline__ void mbarrier_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}

/// One plain arrival.
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}

/// Waits until the phase of parity `parity` has completed (0 for the first phase, then 1, 0, ...).
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "wait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n"
      "}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
}

// ---- bulk copies ---------------------------------------------------------------------------------

/// Copies `bytes` (a multiple of 16) from global `src` to shared `dst` (both 16-byte aligned) with the
/// copy engine; the transfer completes on `bar` (which must expect the bytes). Reads through L2.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(bar))
      : "memory");
}

/// Orders this thread's earlier ordinary global accesses with later copy-engine accesses (and the
/// reverse): a writer calls it before publishing data that bulk copies will read.
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;" ::: "memory"); }

// ---- barriers ----------------------------------------------------------------------------------

/// Barrier `id` (1..15) over `threads` threads (a multiple of 32) of the block.
__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

/// counter += 1 with release semantics at GPU scope (one thread).
__device__ __forceinline__ void grid_arrive(unsigned* counter) {
  asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
}

/// Spins until *counter >= target (one thread; the caller publishes the result to its block). The spin
/// reads are relaxed (an acquire load also invalidates the L1 on every iteration); one acquire fence
/// after the last orders what follows.
__device__ __forceinline__ void grid_wait(const unsigned* counter, unsigned target) {
  for (;;) {
    unsigned v;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(counter) : "memory");
    if (v >= target) break;
  }
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
}

// ---- loads of values written by other blocks of the same launch (bypass the incoherent L1) -----

__device__ __forceinline__ float load_l2(const float* p) { return __ldcg(p); }
__device__ __forceinline__ float2 load_l2(const float2* p) { return __ldcg(p); }
__device__ __forceinline__ float4 load_l2(const float4* p) { return __ldcg(p); }
__device__ __forceinline__ int load_l2(const int* p) { return __ldcg(p); }

/// Starts moving the line holding `p` into L1 (a later ordinary load of it then hits there).
__device__ __forceinline__ void prefetch_l1(const void* p) { asm volatile("prefetch.global.L1 [%0];" ::"l"(p)); }

// ---- integer dot products ------------------------------------------------------------------------

/// c + sum of the 4 products of unsigned bytes of `a` and signed bytes of `b`.
__device__ __forceinline__ int dot4_us(uint32_t a, uint32_t b, int c) {
  int d;
  asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

}  // namespace latte::cuda::pipeline
