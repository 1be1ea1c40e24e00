// Decoders of the plain element types: f32, f16, bf16, f64 and the integer types. One value per
// "block"; every loop is a straight element-wise map that the compiler vectorizes.
#include "quant/half_float.hpp"
#include "quant/row_codecs.hpp"

#include <cstring>

namespace latte::quant {

void decode_f32(const uint8_t* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

LATTE_DECODER_CLONES void decode_f16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = half_to_float(load_u16(src + 2 * i));
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
