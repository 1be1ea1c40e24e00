// Warp-level tensor-core and async-copy primitives shared by the attention kernels (device code only).
// All of them exist on sm_80 and later, so every architecture latte builds for runs them.
//
//   uint32_t a[4]; ldmatrix_x4(a, &q_smem[row][col]);  // A fragment of a 16x16 bf16 tile
//   mma_bf16_16816(acc, a, b0, b1);                      // acc(16x8 fp32) += A(16x16) * B(16x8)
//
// Fragment layouts of mma.m16n8k16 (g = lane / 4, t = lane % 4):
//   A (16x16, row-major): a[0] = (g, 2t..2t+1)  a[1] = (g+8, 2t..2t+1)  a[2] = (g, 2t+8..2t+9)  a[3] = (g+8, 2t+8..)
//   B (16x8, "col"):      b0 = (k 2t..2t+1, n g)  b1 = (k 2t+8..2t+9, n g)
//   C (16x8 fp32):        c[0..1] = (g, 2t..2t+1)  c[2..3] = (g+8, 2t..2t+1)
// ldmatrix: lanes 8j..8j+7 give the row addresses of 8x8 matrix j; register j of lane l receives
// row l/4, columns 2(l%4)..+1 of matrix j (with .trans: column l/4, rows 2(l%4)..+1).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace latte::cuda::mma {

__device__ __forceinline__ uint32_t smem_address(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

/// Four 8x8 bf16 matrices from shared memory (rows of 16 bytes, addresses from lanes 0..31).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(row_address)));
}

/// Same, transposed: for B operands stored k-major (rows = k) in shared memory.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(row_address)));
}

/// c(16x8, fp32) += a(16x16, bf16) * b(16x8, bf16).
__device__ __forceinline__ void mma_bf16_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// c(16x8, int32) = a(16x32, unsigned bytes) * b(32x8, signed bytes): exact integer sums. Not volatile: the
/// compiler may schedule it like arithmetic.
__device__ __forceinline__ void mma_u8s8_16832(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0));
}

/// c(16x8, fp32) += a(16x16, fp16) * b(16x8, fp16), the m16n8k16 layouts above. Not volatile.
__device__ __forceinline__ void mma_f16_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// c(16x8, fp32) += a(16x8, fp16) * b(8x8, fp16): A a[0] = (g, 2t..2t+1), a[1] = (g+8, 2t..2t+1); B b0 = (k 2t..2t+1,
/// n g); C as m16n8k16's. Not volatile.
__device__ __forceinline__ void mma_f16_1688(float (&c)[4], const uint32_t (&a)[2], uint32_t b0) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(b0));
}

/// Two fp16 lanes: a * b + c, a * b and a - b, each rounded once to nearest even.
__device__ __forceinline__ uint32_t fma_f16x2(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
__device__ __forceinline__ uint32_t mul_f16x2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ uint32_t sub_f16x2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("sub.rn.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

/// Two floats rounded to fp16 (round to nearest even) in one register: `lo` in the low half.
__device__ __forceinline__ uint32_t pack_f16x2(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

/// The float value of the fp16 in the low (hi = 0) or high half of `word`.
__device__ __forceinline__ float f16_half(uint32_t word, int hi) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(hi ? word >> 16 : word & 0xFFFFu)));
}

/// Two floats rounded to bf16 (round to nearest even) in one register: `lo` in the low half.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

/// The float value of `x` after rounding to bf16 (what the tensor cores will see).
__device__ __forceinline__ float round_to_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

/// 16-byte asynchronous copy global -> shared that bypasses L1. When `valid` is false nothing is
/// read and the 16 destination bytes are zero-filled (so masked rows hold finite values).
__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* gmem_src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(smem_address(smem_dst)), "l"(gmem_src),
               "r"(src_bytes));
}

/// 16-byte asynchronous copy global -> shared that caches in L1 too (data several blocks of an SM read).
__device__ __forceinline__ void cp_async_16_l1(void* smem_dst, const void* gmem_src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16;\n" ::"r"(smem_address(smem_dst)), "l"(gmem_src));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

/// Waits until at most `kPending` of this thread's committed copy groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

/// Max / sum over the 4 lanes that share a fragment row (lanes 4g..4g+3).
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

/// exp2(x - m) that is 0 for x = -inf, also when m = -inf (a row that has seen no valid key).
__device__ __forceinline__ float exp2_shifted(float x, float m) { return x == -INFINITY ? 0.0f : exp2f(x - m); }

/// The online-softmax rescale factor exp2(m_old - m_new); 0 while nothing was accumulated.
__device__ __forceinline__ float exp2_rescale(float m_old, float m_new) {
  return m_old == -INFINITY ? 0.0f : exp2f(m_old - m_new);
}

}  // namespace latte::cuda::mma
