// Decoders of the plain element types: f32, f16, bf16, f64 and the integer types. One value per
// "block"; every loop is a straight element-wise map that the compiler vectorizes.
#include "quant/half_float.hpp"
#include "quant/row_codecs.hpp"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace latte::quant {

void decode_f32(const uint8_t* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

namespace {

void decode_f16_portable(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = half_to_float(load_u16(src + 2 * i));
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(LATTE_NO_TARGET_CLONES)
// The F16C instruction converts 8 halves at once, exactly, and quiets NaNs keeping their payload:
// the same bits as half_to_float (checked against ggml by the golden tests).
[[gnu::target("avx,f16c")]] void decode_f16_f16c(const uint8_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i halves = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(halves));
  }
  for (; i < n; ++i) dst[i] = half_to_float(load_u16(src + 2 * i));
}
#endif

}  // namespace

void decode_f16(const uint8_t* src, float* dst, int64_t n) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(LATTE_NO_TARGET_CLONES)
  static const bool has_f16c = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  if (has_f16c) return decode_f16_f16c(src, dst, n);
#endif
  decode_f16_portable(src, dst, n);
}

LATTE_DECODER_CLONES void decode_bf16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(load_u16(src + 2 * i));
}

void decode_f64(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    double v;
    std::memcpy(&v, src + 8 * i, sizeof v);
    dst[i] = static_cast<float>(v);  // nearest float; overflow gives infinity
  }
}

void decode_i8(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(static_cast<int8_t>(src[i]));
}

void decode_i16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(static_cast<int16_t>(load_u16(src + 2 * i)));
}

void decode_i32(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(static_cast<int32_t>(load_u32(src + 4 * i)));
}

void decode_i64(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    int64_t v;
    std::memcpy(&v, src + 8 * i, sizeof v);
    dst[i] = static_cast<float>(v);
  }
}

}  // namespace latte::quant
