// Encoders of the plain float types (f32 copy, f16 and bf16 with ggml's rounding).
#include "quant/half_float.hpp"
#include "quant/row_codecs.hpp"

#include <cstdint>
#include <cstring>

namespace latte::quant {

void encode_f32(const float* src, uint8_t* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void encode_f16(const float* src, uint8_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = float_to_half(src[i]);
    std::memcpy(dst + 2 * i, &h, sizeof h);
  }
}

void encode_bf16(const float* src, uint8_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = float_to_bf16(src[i]);
    std::memcpy(dst + 2 * i, &h, sizeof h);
  }
}

}  // namespace latte::quant
