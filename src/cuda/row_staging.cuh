// Warp-cooperative copy of a byte range of a quantized row from global into shared memory, realigned
// so that the first byte lands at a 16-byte aligned shared address. GGUF rows are not 16-byte aligned
// in general (a Q6_K block is 210 bytes, a Q8_0 block 34), so the warp reads whole aligned 16-byte
// chunks (the widest coalesced load), then funnel-shifts them into place through register shuffles.
//
//   StagedRange r = stage_begin<kChunksPerLane>(src, n_bytes, lo, hi, lane, regs);   // issue loads
//   stage_finish<kChunksPerLane>(r, regs, smem_dst, lane); __syncwarp();               // realign + store
#pragma once

#include <cstdint>

namespace latte::cuda {

/// Where the staged bytes come from: `misalign` = src % 16, `chunks` = aligned chunks covering it,
/// `out_chunks` = 16-byte chunks written to shared memory.
struct StagedRange {
  int misalign;
  int chunks;
  int out_chunks;
};

/// Loads the aligned 16-byte chunk at `p`; when the chunk sticks out of [lo, hi) only the bytes
/// inside are read (the others are zero). [lo, hi) is the whole allocation the row lives in.
__host__ __device__ __forceinline__ uint4 load_chunk_guarded(const uint8_t* p, const uint8_t* lo, const uint8_t* hi) {
#if defined(__CUDA_ARCH__)
  if (p >= lo && p + 16 <= hi) return __ldg(reinterpret_cast<const uint4*>(p));
#else
  if (p >= lo && p + 16 <= hi) return *reinterpret_cast<const uint4*>(p);
#endif
  uint32_t w[4] = {0, 0, 0, 0};
  for (int i = 0; i < 16; ++i) {
    if (p + i >= lo && p + i < hi) w[i / 4] |= uint32_t{p[i]} << (8 * (i % 4));
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

/// Issues the global loads for bytes [src, src + n_bytes): lane l loads chunks l*CPL .. l*CPL+CPL-1
/// of the aligned chunk sequence. Requires (src % 16 + n_bytes + 15) / 16 <= 32 * CPL.
template <int CPL>
__host__ __device__ __forceinline__ StagedRange stage_begin(const uint8_t* src, int n_bytes, const uint8_t* lo,
                                                            const uint8_t* hi, int lane, uint4 (&regs)[CPL]) {
  const int misalign = static_cast<int>(reinterpret_cast<uintptr_t>(src) & 15);
  const uint8_t* base = src - misalign;
  const int chunks = (misalign + n_bytes + 15) / 16;
#pragma unroll
  for (int j = 0; j < CPL; ++j) {
    const int c = lane * CPL + j;
    regs[j] = c < chunks ? load_chunk_guarded(base + 16 * c, lo, hi) : make_uint4(0, 0, 0, 0);
  }
  return {misalign, chunks, (n_bytes + 15) / 16};
}

/// (hi:lo) >> shift, low 32 bits (shift < 32); a host twin for the tests.
__host__ __device__ __forceinline__ uint32_t funnel_shift_right(uint32_t lo, uint32_t hi, int shift) {
#if defined(__CUDA_ARCH__)
  return __funnelshift_r(lo, hi, static_cast<unsigned>(shift));
#else
  return static_cast<uint32_t>(((uint64_t{hi} << 32) | lo) >> shift);
#endif
}

/// Shifts the 32 bytes (a, b) down by `misalign` bytes and returns the first 16.
__host__ __device__ __forceinline__ uint4 shift_chunk_pair(uint4 a, uint4 b, int misalign) {
  const int r = 8 * (misalign & 3);
  uint32_t s[5];
  switch (misalign >> 2) {
    case 0:
      s[0] = a.x, s[1] = a.y, s[2] = a.z, s[3] = a.w, s[4] = b.x;
      break;
    case 1:
      s[0] = a.y, s[1] = a.z, s[2] = a.w, s[3] = b.x, s[4] = b.y;
      break;
    case 2:
      s[0] = a.z, s[1] = a.w, s[2] = b.x, s[3] = b.y, s[4] = b.z;
      break;
    default:
      s[0] = a.w, s[1] = b.x, s[2] = b.y, s[3] = b.z, s[4] = b.w;
      break;
  }
  return make_uint4(funnel_shift_right(s[0], s[1], r), funnel_shift_right(s[1], s[2], r),
                    funnel_shift_right(s[2], s[3], r), funnel_shift_right(s[3], s[4], r));
}

/// Writes lane `lane`'s share of the staged bytes to `dst` (16-byte aligned shared memory, at least
/// 16 * 32 * CPL bytes) so that dst[i] = src[i]. `next` is lane + 1's regs[0] (stage_neighbor).
template <int CPL>
__host__ __device__ __forceinline__ void stage_write(const StagedRange& range, const uint4 (&regs)[CPL], uint4 next,
                                                     uint8_t* dst, int lane) {
  uint4* out = reinterpret_cast<uint4*>(dst);
  if (range.misalign == 0) {
#pragma unroll
    for (int j = 0; j < CPL; ++j) {
      if (lane * CPL + j < range.chunks) out[lane * CPL + j] = regs[j];
    }
    return;
  }
  // Output chunk o needs raw chunks o and o + 1 (zero past the last; lane 31's neighbour is never
  // needed because misalign + n_bytes <= 16 * 32 * CPL).
#pragma unroll
  for (int j = 0; j < CPL; ++j) {
    const int o = lane * CPL + j;
    const uint4 following = j + 1 < CPL ? regs[j + 1 < CPL ? j + 1 : 0] : next;
    if (o < range.out_chunks) out[o] = shift_chunk_pair(regs[j], following, range.misalign);
  }
}

/// The first chunk of the next lane (the chunk after this lane's last one). All lanes must call it.
template <int CPL>
__device__ __forceinline__ uint4 stage_neighbor(const uint4 (&regs)[CPL]) {
  uint4 next;
  next.x = __shfl_down_sync(0xffffffffu, regs[0].x, 1);
  next.y = __shfl_down_sync(0xffffffffu, regs[0].y, 1);
  next.z = __shfl_down_sync(0xffffffffu, regs[0].z, 1);
  next.w = __shfl_down_sync(0xffffffffu, regs[0].w, 1);
  return next;
}

/// stage_neighbor + stage_write. All 32 lanes must call it (it shuffles).
template <int CPL>
__device__ __forceinline__ void stage_finish(const StagedRange& range, const uint4 (&regs)[CPL], uint8_t* dst,
                                             int lane) {
  const uint4 next = stage_neighbor<CPL>(regs);
  stage_write<CPL>(range, regs, next, dst, lane);
}

}  // namespace latte::cuda
