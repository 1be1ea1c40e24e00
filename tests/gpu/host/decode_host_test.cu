// The GPU block decoders (quant_decode.cuh) and the staging realignment (row_staging.cuh) run here as
// host code against dequantize_row, on fresh random rows of every GPU type at the two alignments the
// kernels use (16-byte staged rows, 2-byte aligned GGUF rows).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>

#include "cuda/quant_decode.cuh"
#include "cuda/row_staging.cuh"
#include "gpu/gpu_test_support.hpp"

using namespace latte;
using namespace latte::cuda::quant;
using namespace latte::test::gpu;

namespace {

template <GgmlType T, int MaxAlign>
void check_decoder(Rng& rng, size_t misalign) {
  const int64_t k = 2048;
  const auto row = random_rows(T, 1, k, rng);
  const auto ref = dequantize_reference(T, row, 1, k);
  std::vector<uint8_t> buffer(row.size() + 32);
  uint8_t* aligned = buffer.data() + (16 - reinterpret_cast<uintptr_t>(buffer.data()) % 16) % 16;
  uint8_t* start = aligned + misalign;
  std::memcpy(start, row.data(), row.size());
  int bad = 0;
  for (int u = 0; u < k / 32; ++u) {
    float v[32];
    decode_values<T, MaxAlign>(start, u, v);
    for (int i = 0; i < 32; ++i) {
      const float want = ref[32 * u + i];
      if (std::fabs(v[i] - want) > 1e-6f * (std::fabs(want) + 1e-3f) && bad++ < 3) {
        FAIL_CHECK(type_label(T) << " (alignment " << MaxAlign << ", offset " << misalign << "): unit " << u
                                 << " value " << i << " = " << v[i] << ", dequantize_row gives " << want);
      }
    }
  }
  CHECK_MESSAGE(bad == 0, type_label(T) << ": " << bad << " values differ");
}

template <GgmlType T>
void check_type(Rng& rng) {
  check_decoder<T, 16>(rng, 0);
  if constexpr (!BlockTraits<T>::is_float) check_decoder<T, 2>(rng, 2);
}

}  // namespace

TEST_CASE("GPU block decoders reproduce dequantize_row for every GPU type (host build of the device code)") {
  auto rng = make_rng("decoders");
  check_type<GgmlType::f32>(rng);
  check_type<GgmlType::f16>(rng);
  check_type<GgmlType::bf16>(rng);
  check_type<GgmlType::q4_0>(rng);
  check_type<GgmlType::q4_1>(rng);
  check_type<GgmlType::q5_0>(rng);
  check_type<GgmlType::q5_1>(rng);
  check_type<GgmlType::q8_0>(rng);
  check_type<GgmlType::mxfp4>(rng);
  check_type<GgmlType::q2_k>(rng);
  check_type<GgmlType::q3_k>(rng);
  check_type<GgmlType::q4_k>(rng);
  check_type<GgmlType::q5_k>(rng);
  check_type<GgmlType::q6_k>(rng);
  check_type<GgmlType::iq4_nl>(rng);
  check_type<GgmlType::iq4_xs>(rng);
}

TEST_CASE("iq4_word_codes maps every 4-bit code in every nibble of a word to its level + 128") {
  auto check_word = [](uint32_t qs) {
    uint32_t low = 0, high = 0;
    iq4_word_codes(qs, low, high);
    for (int j = 0; j < 4; ++j) {
      const uint32_t lo = (qs >> (8 * j)) & 0xFu, hi = (qs >> (8 * j + 4)) & 0xFu;
      CHECK(static_cast<int>((low >> (8 * j)) & 0xFFu) == k_iq4_levels[lo] + 128);
      CHECK(static_cast<int>((high >> (8 * j)) & 0xFFu) == k_iq4_levels[hi] + 128);
    }
  };
  // every code in every nibble, beside different codes in the others
  for (uint32_t n = 0; n < 16; ++n) {
    for (int at = 0; at < 8; ++at) {
      uint32_t qs = 0;
      for (int k = 0; k < 8; ++k) qs |= ((k == at ? n : (n + 3 * k + 5) % 16) << (4 * k));
      check_word(qs);
    }
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) check_word(static_cast<uint32_t>(rng()));
}

TEST_CASE("code_value turns every byte into its exact float") {
  for (uint32_t b = 0; b < 256; ++b) {
    const uint32_t word = (b << 16) | 0xA5u;
    CHECK(code_value(word, 2) == static_cast<float>(b));
    CHECK(code_value(word, 0) == 165.0f);
  }
}

TEST_CASE("shift_chunk_pair realigns 32 bytes by every misalignment") {
  uint8_t bytes[32];
  for (int i = 0; i < 32; ++i) bytes[i] = static_cast<uint8_t>(7 * i + 3);
  uint4 a, b;
  std::memcpy(&a, bytes, 16);
  std::memcpy(&b, bytes + 16, 16);
  for (int m = 0; m < 16; ++m) {
    const uint4 out = latte::cuda::shift_chunk_pair(a, b, m);
    uint8_t got[16];
    std::memcpy(got, &out, 16);
    for (int i = 0; i < 16; ++i) CHECK_MESSAGE(got[i] == bytes[m + i], "misalign " << m << " byte " << i);
  }
}

namespace {

/// Runs the warp staging for 32 emulated lanes: stage_begin per lane, the neighbour exchange, then
/// stage_write per lane; returns the staged bytes.
template <int CPL>
std::vector<uint8_t> emulate_staging(const uint8_t* src, int n_bytes, const uint8_t* lo, const uint8_t* hi) {
  uint4 regs[32][CPL];
  latte::cuda::StagedRange range[32];
  for (int lane = 0; lane < 32; ++lane)
    range[lane] = latte::cuda::stage_begin<CPL>(src, n_bytes, lo, hi, lane, regs[lane]);
  alignas(16) static uint8_t dst[16 * 32 * CPL];
  std::memset(dst, 0xEE, sizeof(dst));
  for (int lane = 0; lane < 32; ++lane) {
    const uint4 next = lane < 31 ? regs[lane + 1][0] : regs[lane][0];  // __shfl_down keeps lane 31's own value
    latte::cuda::stage_write<CPL>(range[lane], regs[lane], next, dst, lane);
  }
  return {dst, dst + n_bytes};
}

template <int CPL>
void check_staging(Rng& rng) {
  std::vector<uint8_t> memory(16 * 32 * CPL + 64);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : memory) b = static_cast<uint8_t>(byte(rng));
  uint8_t* base = memory.data() + (16 - reinterpret_cast<uintptr_t>(memory.data()) % 16) % 16;
  for (int misalign = 0; misalign < 16; ++misalign) {
    for (int n_bytes : {1, 17, 16 * 32 * CPL - 16 - misalign, 16 * 32 * CPL - misalign}) {
      if (n_bytes <= 0) continue;
      const uint8_t* src = base + misalign;
      // the allocation ends right after the range (the last chunk sticks out) and starts at src
      const auto got = emulate_staging<CPL>(src, n_bytes, src, src + n_bytes);
      int bad = 0;
      for (int i = 0; i < n_bytes; ++i) bad += got[i] != src[i];
      CHECK_MESSAGE(bad == 0, "staging CPL " << CPL << " misalign " << misalign << " bytes " << n_bytes << ": " << bad
                                             << " bytes differ");
    }
  }
}

}  // namespace

TEST_CASE("warp staging copies any byte range realigned to 16 bytes, for every misalignment") {
  auto rng = make_rng("staging");
  check_staging<1>(rng);
  check_staging<2>(rng);
  check_staging<3>(rng);
}
