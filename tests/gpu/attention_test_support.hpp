// Shared pieces of the GPU attention tests: bf16 rounding written independently of CUDA's, random
// inputs, device upload/download, NaN poisoning, paged cache pools and comparisons that report
// where and by how much a kernel is off.
//
//   Rng rng;  Bf16Values q = random_bf16(n, rng);          // q.values are exactly representable in bf16
//   Comparison c = compare(got, ref);  CHECK_MESSAGE(c.rel_l2 < 1e-2, c.describe("out"));
#pragma once

#include "cuda/check.hpp"
#include "cuda/device_buffer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

namespace latte::test::attention {

/// bf16 bits of `x`, rounded to nearest even (NaN stays NaN).
inline uint16_t bf16_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_value(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
inline float round_bf16(float x) { return bf16_value(bf16_bits(x)); }

/// A random generator whose seed is printed with every failure.
struct Rng {
  uint64_t seed = std::random_device{}() * 0x9e3779b97f4a7c15ull + std::random_device{}();
  std::mt19937_64 engine{seed};
  float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(engine); }
  int uniform_int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(engine); }
};

/// Values that are exact in bf16 (`values`) and their bits (`bits`, what goes to the device).
struct Bf16Values {
  std::vector<float> values;
  std::vector<uint16_t> bits;
};
inline Bf16Values random_bf16(size_t n, Rng& rng, float lo = -1.0f, float hi = 1.0f) {
  Bf16Values out;
  out.values.resize(n);
  out.bits.resize(n);
  for (size_t i = 0; i < n; ++i) {
    out.bits[i] = bf16_bits(rng.uniform(lo, hi));
    out.values[i] = bf16_value(out.bits[i]);
  }
  return out;
}

template <class T>
cuda::DeviceBuffer<T> upload(const std::vector<T>& host) {
  cuda::DeviceBuffer<T> device(std::max<size_t>(host.size(), 1), "test input");
  if (!host.empty())
    LATTE_CUDA_CHECK(cudaMemcpy(device.data(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return device;
}
template <class T>
std::vector<T> download(const T* device, size_t count) {
  std::vector<T> host(count);
  LATTE_CUDA_CHECK(cudaDeviceSynchronize());
  if (count) LATTE_CUDA_CHECK(cudaMemcpy(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}
/// Fills `bytes` device bytes with `byte` (0xff: NaN in fp32 and bf16, -1 in int32).
inline void poison(void* device, size_t bytes, int byte = 0xff) {
  if (bytes) LATTE_CUDA_CHECK(cudaMemset(device, byte, bytes));
}
/// Output read back as float, from fp32 or bf16 storage.
inline std::vector<float> download_as_float(const void* device, size_t count, bool is_bf16) {
  if (!is_bf16) return download(static_cast<const float*>(device), count);
  const std::vector<uint16_t> bits = download(static_cast<const uint16_t*>(device), count);
  std::vector<float> out(count);
  for (size_t i = 0; i < count; ++i) out[i] = bf16_value(bits[i]);
  return out;
}

/// Per-sequence rows (row_elems bf16 each) scattered over a pool of pages in random order; the pool
/// slots no sequence owns hold NaN, so a kernel reading outside the valid rows produces NaN.
struct PagedPool {
  std::vector<uint16_t> pool;       // [n_pages, page_size, row_elems]
  std::vector<int32_t> page_table;  // [batch, pages_per_seq]
  int page_size = 0;
  int pages_per_seq = 0;
  int64_t page_stride = 0;  // elements
};
inline PagedPool make_paged_pool(const std::vector<std::vector<uint16_t>>& rows, int row_elems, int page_size,
                                 Rng& rng) {
  PagedPool out;
  out.page_size = page_size;
  size_t max_rows = 1;
  for (const auto& r : rows) max_rows = std::max(max_rows, r.size() / row_elems);
  out.pages_per_seq = static_cast<int>((max_rows + page_size - 1) / page_size);
  const int n_pages = out.pages_per_seq * static_cast<int>(rows.size()) + 1;  // one spare page never used
  out.page_stride = static_cast<int64_t>(page_size) * row_elems;
  out.pool.assign(static_cast<size_t>(n_pages) * out.page_stride, 0xffffu);
  std::vector<int32_t> order(n_pages);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng.engine);
  out.page_table.assign(rows.size() * out.pages_per_seq, n_pages);  // out of range unless assigned
  int next = 0;
  for (size_t b = 0; b < rows.size(); ++b) {
    const size_t n_rows = rows[b].size() / row_elems;
    for (int pg = 0; pg < out.pages_per_seq; ++pg) {
      const int page = order[next++];
      out.page_table[b * out.pages_per_seq + pg] = page;
      for (int slot = 0; slot < page_size; ++slot) {
        const size_t pos = static_cast<size_t>(pg) * page_size + slot;
        if (pos >= n_rows) break;
        std::copy_n(rows[b].begin() + pos * row_elems, row_elems,
                    out.pool.begin() + page * out.page_stride + static_cast<int64_t>(slot) * row_elems);
      }
    }
  }
  return out;
}

/// How far `got` is from `ref`; `first_bad` is the first index with |got - ref| > elem_tol (or NaN).
struct Comparison {
  double rel_l2 = 0;   // ||got - ref|| / ||ref||
  double max_abs = 0;  // max |got - ref|
  size_t worst = 0;    // where max_abs is
  size_t first_bad = std::numeric_limits<size_t>::max();
  size_t nan_count = 0;
  double worst_ref = 0, worst_got = 0;
  double first_bad_ref = 0, first_bad_got = 0;
  [[nodiscard]] bool has_bad() const { return first_bad != std::numeric_limits<size_t>::max(); }
  /// One line: "<what>: rel-L2 .., max|err| .. at [i] (ref .., got ..), NaN n, first bad [j] ..".
  [[nodiscard]] std::string describe(const std::string& what) const {
    std::ostringstream s;
    s.precision(4);
    s << what << ": rel-L2 " << rel_l2 << ", max|err| " << max_abs << " at [" << worst << "] (ref " << worst_ref
      << ", got " << worst_got << "), NaN/inf-mismatch " << nan_count;
    if (has_bad()) s << ", first bad [" << first_bad << "] (ref " << first_bad_ref << ", got " << first_bad_got << ")";
    return s.str();
  }
};
/// Compares element-wise; equal infinities (e.g. an LSE of -inf for an empty row) count as exact.
inline Comparison compare(std::span<const float> got, std::span<const double> ref, double elem_tol) {
  Comparison c;
  double err2 = 0, ref2 = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i];
    const double r = ref[i];
    double err;
    if (std::isinf(r) || std::isinf(g) || std::isnan(g)) {
      err = (g == r) ? 0.0 : std::numeric_limits<double>::infinity();
      if (err != 0) ++c.nan_count;
    } else {
      err = std::abs(g - r);
      err2 += err * err;
      ref2 += r * r;
    }
    if (!(err <= elem_tol) && !c.has_bad()) {
      c.first_bad = i;
      c.first_bad_ref = r;
      c.first_bad_got = g;
    }
    if (err > c.max_abs || (std::isinf(err) && !std::isinf(c.max_abs))) {
      c.max_abs = err;
      c.worst = i;
      c.worst_ref = r;
      c.worst_got = g;
    }
  }
  c.rel_l2 = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  if (c.nan_count) c.rel_l2 = std::numeric_limits<double>::infinity();
  return c;
}

/// Root mean square of the finite entries of `ref` (sets element tolerances relative to the data).
inline double rms(std::span<const double> ref) {
  double s = 0;
  size_t n = 0;
  for (double r : ref) {
    if (std::isfinite(r)) {
      s += r * r;
      ++n;
    }
  }
  return n ? std::sqrt(s / n) : 0.0;
}

/// "[a, b, c]" for labels.
template <class T>
std::string list(const std::vector<T>& v) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < v.size(); ++i) s << (i ? ", " : "") << v[i];
  s << "]";
  return s.str();
}

}  // namespace latte::test::attention
