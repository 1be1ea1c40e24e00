// Dot products of quantized weight rows with x held as two int8 planes ("split int8"), the inner loop of
// the persistent decode step (decode_step_kernel.cu).
//
// x is cut into units of 32 values. Per unit, dx = max|x| / 127 and
//     hi_i = round(x_i / dx),  lo_i = round(254 (x_i / dx - hi_i)),  x_i ~= dx (hi_i + lo_i / 254)
// so |x_i - dx (hi_i + lo_i/254)| <= dx / 508: 1.6e-5 of the unit's largest value, near fp32's own
// rounding over a 2048-long sum (bf16 rounding is 2e-3). A weight unit decodes to byte codes c_i with
// value_i = scale_h c_i - offset_h per half h of 16 values (quant_decode.cuh), and
//     sum_i value_i x_i = dx/254 sum_h [ scale_h (254 A_h + B_h) - offset_h S_h ]
// with A_h = sum c_i hi_i, B_h = sum c_i lo_i (four dp4a each per half: exact integers) and
// S_h = sum (254 hi_i + lo_i) (stored with the unit). Types whose offset is a whole number o of scales
// (Q8_0, Q4_0, Q5_0, Q6_K, Q3_K, MXFP4) subtract o S_h in the integer domain: no cancellation at all.
//
// Cost per weight unit and token: 16 dp4a + ~10 integer/float ops + 4 16-byte shared loads of x, plus
// the decode (~8-25 ops): about 1.5-2 instructions per weight value against ~3 for an fp32 FMA dot.
//
// Shared-memory layout of n units (capacity `cap` units, 80 bytes each): four planes of 16 bytes per
// unit (hi values 0-15, hi 16-31, lo 0-15, lo 16-31; plane p of unit u at 16 (p cap + u)), then the
// meta records {dx / 254, S_0, S_1, 0} at 64 cap + 16 u. Lanes reading consecutive units read
// consecutive 16-byte words: no bank conflicts.
#pragma once

#include <cstdint>

#include "cuda/pipeline_primitives.cuh"
#include "cuda/quant_decode.cuh"

namespace latte::cuda::split_int8 {

inline constexpr int kUnitBytes = 80;  ///< shared bytes per unit of 32 values

/// Whole-number offset (in units of the scale) of a type's codes, or 0 when the offset is a free float
/// (Q4_K, Q5_K, Q4_1, Q5_1, Q2_K).
template <GgmlType T>
inline constexpr int kIntegerOffset = T == GgmlType::q8_0     ? 128
                                      : T == GgmlType::iq4_nl ? 128  // codes: level + 128
                                      : T == GgmlType::iq4_xs ? 128
                                      : T == GgmlType::q4_0   ? 8
                                      : T == GgmlType::q5_0   ? 16
                                      : T == GgmlType::q6_k   ? 32
                                      : T == GgmlType::q3_k   ? 4
                                      : T == GgmlType::mxfp4  ? 12
                                                              : 0;

struct Meta {
  float dx;  ///< unit scale / 254
  int s0;    ///< sum over values 0..15 of 254 hi + lo
  int s1;    ///< same over 16..31
  int unused;
};

/// Quantizes one unit: lane i of the warp holds value i (`v`). Writes the unit's planes and meta.
/// A non-finite value makes dx NaN, so that every dot with the unit is NaN (as an fp32 dot would be).
__device__ __forceinline__ void quantize_unit(uint8_t* area, int cap, int unit, float v, int lane) {
  float amax = fabsf(v);
#pragma unroll
  for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  // fmaxf drops NaN operands, so the vote: false when any value of the unit is inf or NaN
  const bool finite = !__any_sync(0xffffffffu, !(fabsf(v) <= 3.4e38f));
  const float dx = finite ? amax / 127.0f : __int_as_float(0x7fc00000);
  const float inv = finite && amax > 0.0f ? 127.0f / amax : 0.0f;
  const float t = finite ? v * inv : 0.0f;
  const float hi = rintf(t);
  const float lo = rintf(254.0f * (t - hi));
  const int h = static_cast<int>(hi), l = static_cast<int>(lo);
  int s = 254 * h + l;
#pragma unroll
  for (int o = 8; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);  // sums over lanes 0-15, 16-31
  const int half = lane / 16, j = lane % 16;
  reinterpret_cast<int8_t*>(area)[16 * (half * cap + unit) + j] = static_cast<int8_t>(h);
  reinterpret_cast<int8_t*>(area)[16 * ((2 + half) * cap + unit) + j] = static_cast<int8_t>(l);
  const int s_other = __shfl_xor_sync(0xffffffffu, s, 16);
  if (lane == 0) {
    Meta m{dx / 254.0f, s, s_other, 0};
    *reinterpret_cast<Meta*>(area + 64 * cap + 16 * unit) = m;
  }
}

/// Quantizes one unit held by a quad of lanes: lane q (= lane % 4, the quad's lanes consecutive) holds
/// values 8q .. 8q + 7 (`v`). Same result as quantize_unit, in one pass of 2-3 shuffles. Every lane of the
/// warp must call it (dummy units: pass `store` false).
__device__ __forceinline__ void quantize_unit_quad(uint8_t* area, int cap, int unit, const float (&v)[8], int q,
                                                   bool store) {
  float amax = 0.0f;
  bool bad = false;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    amax = fmaxf(amax, fabsf(v[i]));
    bad = bad || !(fabsf(v[i]) <= 3.4e38f);  // inf or NaN (fmaxf drops NaN operands)
  }
  int flag = bad ? 1 : 0;
#pragma unroll
  for (int o = 1; o < 4; o *= 2) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    flag |= __shfl_xor_sync(0xffffffffu, flag, o);
  }
  const bool finite = flag == 0;
  const float dx = finite ? amax / 127.0f : __int_as_float(0x7fc00000);
  const float inv = finite && amax > 0.0f ? 127.0f / amax : 0.0f;
  uint32_t hw[2] = {0, 0}, lw[2] = {0, 0};
  int s = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float t = finite ? v[i] * inv : 0.0f;
    const float hi = rintf(t);
    const float lo = rintf(254.0f * (t - hi));
    const int h = static_cast<int>(hi), l = static_cast<int>(lo);
    s += 254 * h + l;
    hw[i / 4] |= (static_cast<uint32_t>(h) & 0xFFu) << (8 * (i % 4));
    lw[i / 4] |= (static_cast<uint32_t>(l) & 0xFFu) << (8 * (i % 4));
  }
  s += __shfl_xor_sync(0xffffffffu, s, 1);  // the half's sum (lanes 0-1: values 0-15, lanes 2-3: 16-31)
  const int s_other = __shfl_xor_sync(0xffffffffu, s, 2);
  if (!store) return;
  const int half = q / 2, part = q % 2;
  *reinterpret_cast<uint2*>(area + 16 * (half * cap + unit) + 8 * part) = make_uint2(hw[0], hw[1]);
  *reinterpret_cast<uint2*>(area + 16 * ((2 + half) * cap + unit) + 8 * part) = make_uint2(lw[0], lw[1]);
  if (q == 0) {
    Meta m{dx / 254.0f, s, s_other, 0};
    *reinterpret_cast<Meta*>(area + 64 * cap + 16 * unit) = m;
  }
}

/// This lane's part of row . x for quantized type T: units first, first + step, ... of the row's
/// n_units (x unit u at x_unit0 + u of the area).
template <GgmlType T>
__device__ __forceinline__ float row_partial(const uint8_t* row, int n_units, const uint8_t* area, int cap, int x_unit0,
                                             int first, int step) {
  constexpr int kOff = kIntegerOffset<T>;
  float acc = 0.0f;
#pragma unroll 2
  for (int u = first; u < n_units; u += step) {
    const quant::Unit32 c = quant::decode_codes<T>(row, u);
    const int xu = x_unit0 + u;
    const uint4 h0 = *reinterpret_cast<const uint4*>(area + 16 * xu);
    const uint4 h1 = *reinterpret_cast<const uint4*>(area + 16 * (cap + xu));
    const uint4 l0 = *reinterpret_cast<const uint4*>(area + 16 * (2 * cap + xu));
    const uint4 l1 = *reinterpret_cast<const uint4*>(area + 16 * (3 * cap + xu));
    const Meta m = *reinterpret_cast<const Meta*>(area + 64 * cap + 16 * xu);
    int a0 = pipeline::dot4_us(c.codes[0], h0.x, 0);
    a0 = pipeline::dot4_us(c.codes[1], h0.y, a0);
    a0 = pipeline::dot4_us(c.codes[2], h0.z, a0);
    a0 = pipeline::dot4_us(c.codes[3], h0.w, a0);
    int a1 = pipeline::dot4_us(c.codes[4], h1.x, 0);
    a1 = pipeline::dot4_us(c.codes[5], h1.y, a1);
    a1 = pipeline::dot4_us(c.codes[6], h1.z, a1);
    a1 = pipeline::dot4_us(c.codes[7], h1.w, a1);
    int b0 = pipeline::dot4_us(c.codes[0], l0.x, 0);
    b0 = pipeline::dot4_us(c.codes[1], l0.y, b0);
    b0 = pipeline::dot4_us(c.codes[2], l0.z, b0);
    b0 = pipeline::dot4_us(c.codes[3], l0.w, b0);
    int b1 = pipeline::dot4_us(c.codes[4], l1.x, 0);
    b1 = pipeline::dot4_us(c.codes[5], l1.y, b1);
    b1 = pipeline::dot4_us(c.codes[6], l1.z, b1);
    b1 = pipeline::dot4_us(c.codes[7], l1.w, b1);
    int c0 = 254 * a0 + b0, c1 = 254 * a1 + b1;
    float unit;
    if constexpr (kOff != 0) {
      c0 -= kOff * m.s0;
      c1 -= kOff * m.s1;
      unit = c.scale[0] * static_cast<float>(c0) + c.scale[1] * static_cast<float>(c1);
    } else {
      unit = c.scale[0] * static_cast<float>(c0) - c.offset[0] * static_cast<float>(m.s0) +
             (c.scale[1] * static_cast<float>(c1) - c.offset[1] * static_cast<float>(m.s1));
    }
    acc = fmaf(m.dx, unit, acc);
  }
  return acc;
}

/// This lane's part of row . x for a float type (F32, F16, BF16) against fp32 x in shared memory.
template <GgmlType T>
__device__ __forceinline__ float row_partial_float(const uint8_t* row, int n_units, const float* x, int first,
                                                   int step) {
  float acc = 0.0f;
  for (int u = first; u < n_units; u += step) {
    float w[32];
    quant::decode_floats<T>(row, u, w);
    const float4* xv = reinterpret_cast<const float4*>(x + 32 * u);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float4 q = xv[i];
      acc = fmaf(w[4 * i], q.x, acc);
      acc = fmaf(w[4 * i + 1], q.y, acc);
      acc = fmaf(w[4 * i + 2], q.z, acc);
      acc = fmaf(w[4 * i + 3], q.w, acc);
    }
  }
  return acc;
}

/// Sum over the `group` lanes (a power of two, <= 32) that share a row: lanes l with equal l / group.
/// Every lane of the warp calls it with the same `group`.
__device__ __forceinline__ float group_sum(float v, int group) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    if (o < group) v += __shfl_xor_sync(0xffffffffu, v, o);
  }
  return v;
}

}  // namespace latte::cuda::split_int8
