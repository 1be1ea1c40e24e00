// Shared pieces of the GPU attention tests: bf16 rounding written independently of CUDA's, random
// inputs, device upload/download, NaN poisoning, paged and contiguous caches, random sparse index
// rows, a float64 softmax-attention reference and comparisons that report where and by how much a
// kernel is off.
//
//   Rng rng;  Bf16Values q = random_bf16(n, rng);          // q.values are exactly representable in bf16
//   Comparison c = compare(got, ref);  CHECK_MESSAGE(c.rel_l2 < 1e-2, c.describe("out"));
#pragma once

#include "cuda/check.hpp"
#include "cuda/device_buffer.hpp"
#include "cuda/kv_cache_layout.hpp"

#include <cuda_bf16.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
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
  std::vector<int64_t> page_table;  // [batch, pages_per_seq]
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

/// One cache tensor for every sequence of a batch: values[b] holds sequence b's rows (bf16-exact),
/// bits[b] the same rows as bf16 bits.
struct CacheRows {
  std::vector<std::vector<float>> values;
  std::vector<std::vector<uint16_t>> bits;
};
/// lens[b] random rows of `row_elems` values per sequence.
inline CacheRows random_cache_rows(const std::vector<int>& lens, size_t row_elems, Rng& rng) {
  CacheRows out;
  for (int len : lens) {
    Bf16Values v = random_bf16(static_cast<size_t>(len) * row_elems, rng);
    out.values.push_back(std::move(v.values));
    out.bits.push_back(std::move(v.bits));
  }
  return out;
}

/// How a cache tensor of per-position rows [n_heads, dim] is laid out on the device.
struct CacheLayout {
  int n_heads = 1;
  int dim = 0;
  int page_size = 0;        // > 0: a paged pool in random page order (make_paged_pool)
  bool head_major = false;  // contiguous only: [B, n_heads, capacity, dim] instead of [B, capacity, n_heads, dim]
  int spare_rows = 2;       // contiguous only: NaN rows past the longest sequence
};
/// A cache tensor on the device and the view a kernel reads it through.
struct DeviceCache {
  cuda::DeviceBuffer<uint16_t> data;
  cuda::DeviceBuffer<int64_t> page_table;  // paged layouts only
  cuda::PagedRows<const __nv_bfloat16> view;
};
/// Uploads `rows` (rows[b]: sequence b's positions, n_heads * dim bf16 bits each) in `layout`. Every
/// element no sequence owns holds NaN, so a kernel reading outside the valid rows produces NaN. The
/// head stride is 0 for one head.
inline DeviceCache upload_cache(const std::vector<std::vector<uint16_t>>& rows, const CacheLayout& layout, Rng& rng) {
  const int64_t row_elems = static_cast<int64_t>(layout.n_heads) * layout.dim;
  const int64_t head_stride_in_row = layout.n_heads > 1 ? layout.dim : 0;
  DeviceCache out;
  if (layout.page_size > 0) {
    const PagedPool pool = make_paged_pool(rows, static_cast<int>(row_elems), layout.page_size, rng);
    out.data = upload(pool.pool);
    out.page_table = upload(pool.page_table);
    out.view = {.data = reinterpret_cast<const __nv_bfloat16*>(out.data.data()),
                .page_table = out.page_table.data(),
                .page_stride = pool.page_stride,
                .token_stride = row_elems,
                .head_stride = head_stride_in_row,
                .page_size = layout.page_size,
                .page_table_stride = pool.pages_per_seq};
    return out;
  }
  size_t max_rows = 1;
  for (const auto& r : rows) max_rows = std::max(max_rows, r.size() / static_cast<size_t>(row_elems));
  const int64_t capacity = static_cast<int64_t>(max_rows) + layout.spare_rows;
  const int64_t token_stride = layout.head_major ? layout.dim : row_elems;
  const int64_t head_stride = layout.n_heads == 1 ? 0 : layout.head_major ? capacity * layout.dim : layout.dim;
  const auto page_stride = capacity * row_elems;
  std::vector<uint16_t> flat(rows.size() * static_cast<size_t>(page_stride), 0xffffu);
  for (size_t b = 0; b < rows.size(); ++b) {
    const int64_t n = static_cast<int64_t>(rows[b].size()) / row_elems;
    for (int64_t s = 0; s < n; ++s) {
      for (int h = 0; h < layout.n_heads; ++h) {
        std::copy_n(rows[b].begin() + s * row_elems + static_cast<int64_t>(h) * layout.dim, layout.dim,
                    flat.begin() + static_cast<int64_t>(b) * page_stride + s * token_stride + h * head_stride);
      }
    }
  }
  out.data = upload(flat);
  out.view = {.data = reinterpret_cast<const __nv_bfloat16*>(out.data.data()),
              .page_stride = page_stride,
              .token_stride = token_stride,
              .head_stride = head_stride};
  return out;
}

/// The positions query token t (of q_len) attends causally in a sequence of kv_len: 0 .. kv_len - q_len + t.
inline std::vector<int> causal_positions(int kv_len, int q_len, int t) {
  std::vector<int> out(static_cast<size_t>(std::max(0, kv_len - q_len + t + 1)));
  std::iota(out.begin(), out.end(), 0);
  return out;
}

/// Sparse index rows for a batch: row b (index_stride entries) lists `selected[b]`, up to
/// top_k - top_k / 8 distinct random positions below kv_lens[b], shuffled among invalid entries
/// (-1 and positions past the sequence) that fill it to top_k. Entries past top_k are valid positions
/// that were not selected: a kernel must ignore them.
struct SparseSelection {
  std::vector<int32_t> indices;            // [B, index_stride]
  std::vector<std::vector<int>> selected;  // [B][*]
};
inline SparseSelection random_sparse_selection(const std::vector<int>& kv_lens, int top_k, int index_stride, Rng& rng) {
  SparseSelection out;
  out.indices.assign(kv_lens.size() * static_cast<size_t>(index_stride), 0);
  out.selected.resize(kv_lens.size());
  for (size_t b = 0; b < kv_lens.size(); ++b) {
    const int len = kv_lens[b];
    std::vector<int> all(static_cast<size_t>(len));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng.engine);
    const int chosen = std::min(len, top_k - top_k / 8);  // leave room for invalid entries
    std::vector<int32_t> row(all.begin(), all.begin() + chosen);
    out.selected[b].assign(row.begin(), row.end());
    while (static_cast<int>(row.size()) < top_k) row.push_back(row.size() % 2 ? -1 : len + rng.uniform_int(0, 100));
    std::shuffle(row.begin(), row.end(), rng.engine);
    int32_t* dst = out.indices.data() + b * static_cast<size_t>(index_stride);
    std::copy(row.begin(), row.end(), dst);
    std::fill(dst + top_k, dst + index_stride, len - 1);
  }
  return out;
}

/// Float64 softmax attention of one query over `positions`: score_i = scale * dot(positions[i]),
/// out = sum_i softmax(score)_i * value(positions[i]) (out.size() values, added to `out`, which starts
/// at zero); returns the log-sum-exp of the scores, -inf (out untouched) when positions is empty.
/// `dot(s)` is the unscaled q . k_s as double, `value(s)` a pointer to v_s.
template <class Dot, class Value>
double reference_attention_row(std::span<const int> positions, double scale, Dot dot, Value value,
                               std::span<double> out) {
  if (positions.empty()) return -std::numeric_limits<double>::infinity();
  std::vector<double> score(positions.size());
  double max_score = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < positions.size(); ++i) {
    score[i] = scale * dot(positions[i]);
    max_score = std::max(max_score, score[i]);
  }
  double sum = 0;
  for (size_t i = 0; i < positions.size(); ++i) {
    const double p = std::exp(score[i] - max_score);
    sum += p;
    const float* v = value(positions[i]);
    for (size_t d = 0; d < out.size(); ++d) out[d] += p * v[d];
  }
  for (double& o : out) o /= sum;
  return max_score + std::log(sum);
}

/// A decode kernel's outputs on the device, poisoned with NaN: out [rows, dim] (fp32 or bf16) and
/// lse [rows].
struct DecodeOutputs {
  DecodeOutputs(size_t rows_, size_t dim_, bool bf16_)
      : out(rows_ * dim_ * (bf16_ ? 2 : 4)), lse(rows_), rows(rows_), dim(dim_), bf16(bf16_) {
    poison(out.data(), out.size());
    poison(lse.data(), lse.bytes());
  }
  cuda::DeviceBuffer<char> out;
  cuda::DeviceBuffer<float> lse;
  size_t rows, dim;
  bool bf16;
  [[nodiscard]] std::vector<float> out_values() const { return download_as_float(out.data(), rows * dim, bf16); }
  [[nodiscard]] std::vector<float> lse_values() const { return download(lse.data(), rows); }
};

/// Tolerances of one case: out passes when its rel-L2 error is below out_rel_l2 and no element is off
/// by more than out_elem; lse when no element is off by more than lse_elem.
struct Tolerances {
  double out_rel_l2 = 0;
  double out_elem = 0;
  double lse_elem = 0;
};
/// Compares a kernel's out / lse with the reference and reports `label` with both comparisons: a
/// MESSAGE when the case passes, a failed check otherwise.
inline void check_outputs(const std::string& label, std::span<const float> out, std::span<const double> ref_out,
                          std::span<const float> lse, std::span<const double> ref_lse, const Tolerances& tol) {
  const Comparison out_cmp = compare(out, ref_out, tol.out_elem);
  const Comparison lse_cmp = compare(lse, ref_lse, tol.lse_elem);
  const std::string summary = label + "\n  " + out_cmp.describe("out") + "\n  " + lse_cmp.describe("lse");
  if (out_cmp.rel_l2 < tol.out_rel_l2 && !out_cmp.has_bad() && !lse_cmp.has_bad()) {
    MESSAGE(summary);
  } else {
    FAIL_CHECK(summary);
  }
}

/// Runs `check` on every case; a case that throws fails as "<kernel> <name> threw: ..." and the
/// others still run.
template <class Case, class Check>
void check_each_case(const std::vector<Case>& cases, const std::string& kernel, Check check) {
  for (const Case& c : cases) {
    try {
      check(c);
    } catch (const std::exception& e) {
      FAIL_CHECK(kernel << " " << c.name << " threw: " << e.what());
    }
  }
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
