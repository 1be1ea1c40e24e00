// Emulated twin of src/cuda/bf16_mma.cuh: the same functions, implemented from the PTX ISA's
// description of ldmatrix, mma.m16n8k16 (bf16, fp32 accumulate) and cp.async, as warp rendezvous.
#pragma once

#include <cuda_fp16.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace latte::cuda::mma {

namespace detail {
inline float bf16_bits_to_float(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
inline uint16_t half_of(uint32_t word, int hi) { return static_cast<uint16_t>(hi ? word >> 16 : word & 0xffffu); }
}  // namespace detail

/// ldmatrix.x4: lanes 8j..8j+7 address the rows of matrix j; lane l receives row l/4, 32-bit word l%4
/// of each matrix.
inline void ldmatrix_x4(uint32_t (&r)[4], const void* row_address) {
  struct In {
    const void* address;
  };
  const auto out = emu::warp_collective(In{row_address}, [](int lane, auto get) {
    std::array<uint32_t, 4> words;
    for (int j = 0; j < 4; ++j) {
      const uint32_t* row = static_cast<const uint32_t*>(get(8 * j + lane / 4).address);
      words[j] = row[lane % 4];
    }
    return words;
  });
  for (int j = 0; j < 4; ++j) r[j] = out[j];
}

/// ldmatrix.x4.trans: lane l receives column l/4 of rows 2(l%4) (low half) and 2(l%4)+1 (high half).
inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row_address) {
  struct In {
    const void* address;
  };
  const auto out = emu::warp_collective(In{row_address}, [](int lane, auto get) {
    std::array<uint32_t, 4> words;
    for (int j = 0; j < 4; ++j) {
      const uint16_t* row0 = static_cast<const uint16_t*>(get(8 * j + 2 * (lane % 4)).address);
      const uint16_t* row1 = static_cast<const uint16_t*>(get(8 * j + 2 * (lane % 4) + 1).address);
      words[j] = static_cast<uint32_t>(row0[lane / 4]) | (static_cast<uint32_t>(row1[lane / 4]) << 16);
    }
    return words;
  });
  for (int j = 0; j < 4; ++j) r[j] = out[j];
}

namespace detail {
/// D = A B + C with the m16n8k16 fragment layouts (g = lane/4, t = lane%4), the 16-bit elements read by `value`:
/// A: a0 (g, 2t..), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..); B: b0 (k 2t.., n g), b1 (k 2t+8.., n g);
/// C/D: c0,c1 (g, 2t..2t+1), c2,c3 (g+8, 2t..2t+1). Products are exact in fp32; sums in k order.
template <class Value>
void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, Value value) {
  struct In {
    uint32_t a[4];
    uint32_t b[2];
    float c[4];
  };
  In in;
  for (int i = 0; i < 4; ++i) {
    in.a[i] = a[i];
    in.c[i] = c[i];
  }
  in.b[0] = b0;
  in.b[1] = b1;
  const auto out = emu::warp_collective(in, [value](int lane, auto get) {
    float A[16][16], B[16][8], C[16][8];
    for (int l = 0; l < 32; ++l) {
      const In v = get(l);
      const int g = l / 4, t = l % 4;
      for (int hi = 0; hi < 2; ++hi) {
        A[g][2 * t + hi] = value(half_of(v.a[0], hi));
        A[g + 8][2 * t + hi] = value(half_of(v.a[1], hi));
        A[g][2 * t + 8 + hi] = value(half_of(v.a[2], hi));
        A[g + 8][2 * t + 8 + hi] = value(half_of(v.a[3], hi));
        B[2 * t + hi][g] = value(half_of(v.b[0], hi));
        B[2 * t + 8 + hi][g] = value(half_of(v.b[1], hi));
        C[g][2 * t + hi] = v.c[hi];
        C[g + 8][2 * t + hi] = v.c[2 + hi];
      }
    }
    const int g = lane / 4, t = lane % 4;
    std::array<float, 4> d;
    for (int e = 0; e < 4; ++e) {
      const int row = g + 8 * (e / 2);
      const int col = 2 * t + (e % 2);
      float sum = C[row][col];
      for (int k = 0; k < 16; ++k) sum += A[row][k] * B[k][col];
      d[e] = sum;
    }
    return d;
  });
  for (int e = 0; e < 4; ++e) c[e] = out[e];
}
}  // namespace detail

/// mma.m16n8k16, bf16 A and B, fp32 C (detail::mma_16816's layouts).
inline void mma_bf16_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  detail::mma_16816(c, a, b0, b1, detail::bf16_bits_to_float);
}

/// D = A B with the m16n8k32 byte layouts (g = lane/4, t = lane%4; byte j of a register is element j):
/// A (unsigned): a0 (g, 4t..), a1 (g+8, 4t..), a2 (g, 4t+16..), a3 (g+8, 4t+16..); B (signed): b0 (k 4t.., n g),
/// b1 (k 4t+16.., n g); D: d0,d1 (g, 2t..2t+1), d2,d3 (g+8, 2t..2t+1). Exact integer sums.
inline void mma_u8s8_16832(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  struct In {
    uint32_t a[4];
    uint32_t b[2];
  };
  In in;
  for (int i = 0; i < 4; ++i) in.a[i] = a[i];
  in.b[0] = b0;
  in.b[1] = b1;
  const auto out = emu::warp_collective(in, [](int lane, auto get) {
    int A[16][32], B[32][8];
    for (int l = 0; l < 32; ++l) {
      const In v = get(l);
      const int g = l / 4, t = l % 4;
      for (int j = 0; j < 4; ++j) {
        A[g][4 * t + j] = static_cast<int>((v.a[0] >> (8 * j)) & 0xFFu);
        A[g + 8][4 * t + j] = static_cast<int>((v.a[1] >> (8 * j)) & 0xFFu);
        A[g][4 * t + 16 + j] = static_cast<int>((v.a[2] >> (8 * j)) & 0xFFu);
        A[g + 8][4 * t + 16 + j] = static_cast<int>((v.a[3] >> (8 * j)) & 0xFFu);
        B[4 * t + j][g] = static_cast<int8_t>((v.b[0] >> (8 * j)) & 0xFFu);
        B[4 * t + 16 + j][g] = static_cast<int8_t>((v.b[1] >> (8 * j)) & 0xFFu);
      }
    }
    const int g = lane / 4, t = lane % 4;
    std::array<int, 4> d;
    for (int e = 0; e < 4; ++e) {
      const int row = g + 8 * (e / 2);
      const int col = 2 * t + (e % 2);
      int sum = 0;
      for (int k = 0; k < 32; ++k) sum += A[row][k] * B[k][col];
      d[e] = sum;
    }
    return d;
  });
  for (int e = 0; e < 4; ++e) c[e] = out[e];
}

namespace detail {
inline float f16_bits_to_float(uint16_t bits) { return __half2float(__ushort_as_half(bits)); }
inline uint16_t float_to_f16_bits(float x) { return __half_as_ushort(__float2half_rn(x)); }
// one fp16 lane of an x2 operation: op on the two inputs' values in double (exact for the products and sums of
// fp16 values the kernels form), rounded to fp16
template <class Op>
uint32_t f16x2_map(uint32_t a, uint32_t b, uint32_t c, Op op) {
  uint32_t d = 0;
  for (int hi = 0; hi < 2; ++hi) {
    const double r = op(static_cast<double>(f16_bits_to_float(half_of(a, hi))),
                        static_cast<double>(f16_bits_to_float(half_of(b, hi))),
                        static_cast<double>(f16_bits_to_float(half_of(c, hi))));
    d |= static_cast<uint32_t>(float_to_f16_bits(static_cast<float>(r))) << (16 * hi);
  }
  return d;
}
}  // namespace detail

/// mma.m16n8k16, fp16 A and B, fp32 C (the bf16 one's layouts).
inline void mma_f16_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  detail::mma_16816(c, a, b0, b1, detail::f16_bits_to_float);
}

/// mma.m16n8k8 with fp16 A (a0 (g, 2t..), a1 (g+8, 2t..)) and B (b0 (k 2t.., n g)), fp32 C: the m16n8k16 product
/// with k 8..15 zero (their exact zero products leave the k-ordered sums as they are).
inline void mma_f16_1688(float (&c)[4], const uint32_t (&a)[2], uint32_t b0) {
  const uint32_t a16[4] = {a[0], a[1], 0u, 0u};
  detail::mma_16816(c, a16, b0, 0u, detail::f16_bits_to_float);
}

inline uint32_t fma_f16x2(uint32_t a, uint32_t b, uint32_t c) {
  return detail::f16x2_map(a, b, c, [](double x, double y, double z) { return x * y + z; });
}
inline uint32_t mul_f16x2(uint32_t a, uint32_t b) {
  return detail::f16x2_map(a, b, 0, [](double x, double y, double) { return x * y; });
}
inline uint32_t sub_f16x2(uint32_t a, uint32_t b) {
  return detail::f16x2_map(a, b, 0, [](double x, double y, double) { return x - y; });
}
inline uint32_t pack_f16x2(float lo, float hi) {
  return static_cast<uint32_t>(detail::float_to_f16_bits(lo)) |
         (static_cast<uint32_t>(detail::float_to_f16_bits(hi)) << 16);
}
inline float f16_half(uint32_t word, int hi) { return detail::f16_bits_to_float(detail::half_of(word, hi)); }

inline uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

inline float round_to_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

inline void cp_async_16(void* smem_dst, const void* gmem_src, bool valid) {
  emu::cp_async(smem_dst, gmem_src, 16, valid ? 16 : 0);
}
inline void cp_async_16_l1(void* smem_dst, const void* gmem_src) { emu::cp_async(smem_dst, gmem_src, 16, 16); }
inline void cp_async_commit() { emu::cp_async_commit(); }
template <int kPending>
inline void cp_async_wait() {
  emu::cp_async_wait(kPending);
}

inline float quad_max(float x) {
  x = fmaxf(x, emu::shfl_xor(x, 1));
  return fmaxf(x, emu::shfl_xor(x, 2));
}
inline float quad_sum(float x) {
  x += emu::shfl_xor(x, 1);
  return x + emu::shfl_xor(x, 2);
}
inline float exp2_shifted(float x, float m) { return x == -INFINITY ? 0.0f : exp2f(x - m); }
inline float exp2_rescale(float m_old, float m_new) { return m_old == -INFINITY ? 0.0f : exp2f(m_old - m_new); }

}  // namespace latte::cuda::mma
