// BenchContext: random device inputs for `latte kernel-bench` cases (never zeros: they hide unwritten
// outputs and can run faster than real data).
#ifdef LATTE_WITH_CUDA

#include <latte/quant.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "cuda/device_buffer.hpp"
#include "kernel_bench.hpp"

namespace latte::cli {
namespace {

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// Offsets of the fp16 scale fields of a block (d, then dmin/m or -1), by type.
void scale_fields(GgmlType t, int& d, int& m) {
  d = -1, m = -1;
  switch (t) {
    case GgmlType::q4_0:
    case GgmlType::q5_0:
    case GgmlType::q8_0:
    case GgmlType::iq4_nl:
    case GgmlType::iq4_xs:
      d = 0;
      break;
    case GgmlType::q4_1:
    case GgmlType::q5_1:
    case GgmlType::q4_k:
    case GgmlType::q5_k:
      d = 0, m = 2;
      break;
    case GgmlType::q2_k:
      d = 80, m = 82;
      break;
    case GgmlType::q3_k:
      d = 108;
      break;
    case GgmlType::q6_k:
      d = 208;
      break;
    default:
      break;
  }
}

}  // namespace

int BenchContext::rotating_copies(int64_t bytes) const {
  if (bytes <= 0) return 1;
  const int64_t want = (3 * l2_bytes + bytes - 1) / bytes;
  return static_cast<int>(std::clamp<int64_t>(want, 1, 64));
}

void* BenchContext::device_alloc(size_t bytes) {
  void* p = cuda::device_alloc(bytes, "kernel-bench buffer");
  keep_alive.emplace_back(p, [](void* q) { cuda::device_free(q); });
  return p;
}

void* BenchContext::random_device(size_t bytes, int type_id) {
  std::vector<uint8_t> host(bytes);
  uint64_t state = rng();
  if (type_id == static_cast<int>(GgmlType::f32) || type_id == static_cast<int>(GgmlType::bf16) ||
      type_id == static_cast<int>(GgmlType::f16)) {
    const size_t elem = type_id == 0 ? 4 : 2;
    for (size_t i = 0; i + elem <= bytes; i += elem) {
      // sum of uniforms: roughly normal, cheap
      double v = 0;
      for (int k = 0; k < 4; ++k) v += static_cast<double>(splitmix(state) >> 11) * 0x1.0p-53 - 0.5;
      const float f = static_cast<float>(v);
      if (elem == 4) {
        std::memcpy(host.data() + i, &f, 4);
      } else {
        const uint16_t h = type_id == static_cast<int>(GgmlType::bf16) ? fp32_to_bf16(f) : fp32_to_fp16(f);
        std::memcpy(host.data() + i, &h, 2);
      }
    }
  } else {
    for (size_t i = 0; i < bytes; i += 8) {
      const uint64_t r = splitmix(state);
      std::memcpy(host.data() + i, &r, std::min<size_t>(8, bytes - i));
    }
    if (type_id >= 0) {
      const auto type = static_cast<GgmlType>(type_id);
      const auto& tr = type_traits(type);
      int d = -1, m = -1;
      scale_fields(type, d, m);
      for (size_t o = 0; o + tr.block_bytes <= bytes; o += tr.block_bytes) {
        const uint16_t dv = fp32_to_fp16(0.01f), mv = fp32_to_fp16(0.005f);
        if (d >= 0) std::memcpy(host.data() + o + d, &dv, 2);
        if (m >= 0) std::memcpy(host.data() + o + m, &mv, 2);
        if (type == GgmlType::mxfp4) host[o] = 125;
      }
    }
  }
  void* p = device_alloc(bytes);
  LATTE_CUDA_CHECK(cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice));
  return p;
}

}  // namespace latte::cli

#endif  // LATTE_WITH_CUDA
