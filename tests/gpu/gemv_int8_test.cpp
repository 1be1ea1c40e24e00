// The split-int8 records of x (x_int8.hpp: quantize_x_int8, rms_norm's out_q) and the single-token GEMV
// that reads them (gemv_x8_kernel.cuh), against products of weights that latte's CPU quantizer encoded
// and its CPU decoder decoded back, summed in double, within the bound the record's rounding allows
// (sum |w_i| dx_i / 508). Also built into the CPU emulation (tests/emulation).
#include <doctest/doctest.h>
#include <latte/error.hpp>
#include <latte/quant.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <utility>
#include <vector>

#include "cuda/device_caps.hpp"
#include "cuda/gemv_quant.hpp"
#include "cuda/moe_router.hpp"
#include "cuda/norms.hpp"
#include "cuda/x_int8.hpp"
#include "gpu/attention_test_support.hpp"
#include "gpu/gemv_test_support.hpp"

namespace {

using latte::GgmlType;
using namespace latte::test::attention;
using namespace latte::test::gemv;

/// Host decoding of a split-int8 record (x_int8.hpp): value i of a row of n units, and its unit's dx.
struct DecodedRecord {
  std::vector<double> values, dx;  // dx per value: the unit's max |x| / 127
};

DecodedRecord decode_record(const std::vector<uint8_t>& rec, int k) {
  const int n = k / 32;
  DecodedRecord d;
  d.values.resize(static_cast<size_t>(k));
  d.dx.resize(static_cast<size_t>(k));
  for (int u = 0; u < n; ++u) {
    float dx254 = 0.0f;
    std::memcpy(&dx254, &rec[static_cast<size_t>(64 * n + 16 * u)], 4);
    for (int i = 0; i < 32; ++i) {
      const int part = i / 16, j = i % 16;
      const auto hi = static_cast<int8_t>(rec[static_cast<size_t>(16 * (part * n + u) + j)]);
      const auto lo = static_cast<int8_t>(rec[static_cast<size_t>(16 * ((2 + part) * n + u) + j)]);
      d.values[static_cast<size_t>(32 * u + i)] = static_cast<double>(dx254) * (254.0 * hi + lo);
      d.dx[static_cast<size_t>(32 * u + i)] = 254.0 * dx254;
    }
  }
  return d;
}

/// The split-int8 records of rows of x, made on the device.
latte::cuda::DeviceBuffer<uint8_t> records_of(const latte::cuda::DeviceBuffer<float>& x, int rows, int k) {
  const int64_t stride = latte::cuda::x_int8_record_bytes(k);
  latte::cuda::DeviceBuffer<uint8_t> rec(static_cast<size_t>(rows * stride));
  poison(rec.data(), rec.bytes());
  latte::cuda::quantize_x_int8(
      {.x = x.data(), .x_stride = k, .rows = rows, .k = k, .out = rec.data(), .out_stride = stride}, nullptr);
  return rec;
}

/// decode_record of each of the `rows` device records in `rec` (rows of x_int8_record_bytes(k) bytes).
std::vector<DecodedRecord> decode_records(const latte::cuda::DeviceBuffer<uint8_t>& rec, int rows, int64_t k) {
  const auto host = download(rec.data(), rec.size());
  const int64_t stride = latte::cuda::x_int8_record_bytes(k);
  std::vector<DecodedRecord> decoded;
  for (int r = 0; r < rows; ++r) {
    decoded.push_back(decode_record(std::vector<uint8_t>(host.begin() + r * stride, host.begin() + (r + 1) * stride),
                                    static_cast<int>(k)));
  }
  return decoded;
}

/// A dense launch of n rows of x (records) against rows x k of `type`, as a probe of what the GEMV takes: the
/// addresses are only checked for alignment.
latte::cuda::GemvParams dense_probe(GgmlType type, int64_t rows, int64_t k, int n) {
  return {.type = type,
          .weight = reinterpret_cast<const void*>(uintptr_t{256}),
          .weight_bytes = static_cast<int64_t>(latte::row_bytes(type, k)) * rows,
          .n_rows = static_cast<int>(rows),
          .k = static_cast<int>(k),
          .n_tokens = n,
          .x_q = reinterpret_cast<const uint8_t*>(uintptr_t{256}),
          .x_q_stride = latte::cuda::x_int8_record_bytes(k)};
}

/// Whether the tensor-core GEMV takes a dense launch of 9 or more rows (dense_probe) here.
bool takes_dense_rows(GgmlType type, int64_t rows, int64_t k, int n) {
  return latte::cuda::gemv_takes_dense_rows(dense_probe(type, rows, k, n));
}

/// Whether the tensor-core GEMV takes gathered groups of 9-16 tokens (its 16-token build) for rows x k of `type` here.
bool takes_wide_groups(GgmlType type, int64_t rows, int64_t k) {
  const int32_t fake = 0;
  latte::cuda::GemvParams p = dense_probe(type, rows, k, 1);
  p.matrix_stride_bytes = p.weight_bytes;
  p.groups = reinterpret_cast<const latte::cuda::GemvGroup*>(uintptr_t{256});
  p.n_groups = &fake;
  p.max_groups = 1;
  p.max_tokens_per_group = latte::cuda::gemv_group_max_tokens;
  return latte::cuda::gemv_takes_wide_groups(p);
}

/// The error bound of a split-int8 dot: sum_i |w_i| dx_i / 508 (the record's rounding), plus fp32 sums.
double x8_bound(const float* w, const float* x, const std::vector<double>& dx, int64_t k) {
  double b = 0.0, mag = 0.0;
  for (int64_t i = 0; i < k; ++i) {
    b += std::abs(static_cast<double>(w[i])) * dx[static_cast<size_t>(i)] / 508.0;
    mag += std::abs(static_cast<double>(w[i]) * x[i]);
  }
  return 1.01 * b + 4e-6 * mag;
}

/// The bound of silu(g) u from those of g (eg) and u (eu): |silu'| <= 1.1.
double gated_bound(double gv, double uv, double eg, double eu) {
  return 1.1 * eg * (std::abs(uv) + eu) + std::abs(silu(gv)) * eu + 1e-6;
}

/// A dense launch of n tokens (rows x k of `type`, optionally + a residual) on their split-int8 records,
/// x itself NaN (a launch that read it instead of the records would fail): how many outputs miss the
/// float64 product by more than the records' bound.
int dense_x8_misses(GgmlType type, int64_t rows, int64_t k, int n, bool with_residual, Rng& rng) {
  const Matrix w = random_matrix(type, rows, k, rng);
  const auto dw = upload(w.bytes);
  auto x = random_vector(static_cast<size_t>(n * k), rng);
  x[static_cast<size_t>((n - 1) * k + 3)] *= 50.0f;  // the last token has a unit with a wide range
  const auto dx = upload(x);
  const auto rec = records_of(dx, n, static_cast<int>(k));
  const std::vector<DecodedRecord> decoded = decode_records(rec, n, k);
  const int64_t stride = latte::cuda::x_int8_record_bytes(k);
  latte::cuda::DeviceBuffer<float> x_nan(static_cast<size_t>(n * k));
  poison(x_nan.data(), x_nan.bytes());
  const auto residual = with_residual ? random_vector(static_cast<size_t>(n * rows), rng) : std::vector<float>{};
  const auto dres = upload(with_residual ? residual : std::vector<float>(1));
  latte::cuda::DeviceBuffer<float> y(static_cast<size_t>(n * rows));
  poison(y.data(), y.bytes());
  latte::cuda::gemv_quant({.type = type,
                           .weight = dw.data(),
                           .weight_bytes = static_cast<int64_t>(w.bytes.size()),
                           .n_rows = static_cast<int>(rows),
                           .k = static_cast<int>(k),
                           .x = x_nan.data(),
                           .x_stride = k,
                           .y = y.data(),
                           .y_stride = rows,
                           .residual = with_residual ? dres.data() : nullptr,
                           .n_tokens = n,
                           .x_q = rec.data(),
                           .x_q_stride = stride},
                          nullptr);
  const auto got = download(y.data(), y.size());
  int bad = 0;
  for (int t = 0; t < n; ++t) {
    const DecodedRecord& d = decoded[static_cast<size_t>(t)];
    const float* xt = &x[static_cast<size_t>(t * k)];
    for (int64_t r = 0; r < rows; ++r) {
      const float* wr = &w.values[static_cast<size_t>(r * k)];
      const size_t out = static_cast<size_t>(t * rows + r);
      const double want = dot(wr, xt, k) + (with_residual ? residual[out] : 0.0);
      bad += !(std::abs(got[out] - want) <= x8_bound(wr, xt, d.dx, k) + 1e-6 * std::abs(want));
    }
  }
  return bad;
}

}  // namespace

TEST_CASE("split-int8 records: every value within dx / 508 of x, NaN spreads to the unit") {
  Rng rng;
  const int k = 320;
  auto x = random_vector(static_cast<size_t>(2 * k), rng);
  for (int i = 0; i < 32; ++i) x[static_cast<size_t>(k + 64 + i)] = 0.0f;  // an all-zero unit
  x[7] *= 1000.0f;                                                         // a unit with one large value
  x[static_cast<size_t>(k + 200)] = NAN;
  const auto dx = upload(x);
  const auto rec = records_of(dx, 2, k);
  const auto host = download(rec.data(), rec.size());
  const int64_t stride = latte::cuda::x_int8_record_bytes(k);
  for (int r = 0; r < 2; ++r) {
    const std::vector<uint8_t> row(host.begin() + r * stride, host.begin() + (r + 1) * stride);
    const DecodedRecord d = decode_record(row, k);
    int bad = 0, nan = 0;
    for (int i = 0; i < k; ++i) {
      const double want = x[static_cast<size_t>(r * k + i)];
      if (r == 1 && i / 32 == 200 / 32) {
        nan += std::isnan(d.dx[static_cast<size_t>(i)]);
        continue;
      }
      // dx / 508 from the two roundings to integers, + 1% for fp32's rounding of x / dx (t <= 127)
      bad += !(std::abs(d.values[static_cast<size_t>(i)] - want) <= d.dx[static_cast<size_t>(i)] / 508.0 * 1.01);
    }
    CHECK(bad == 0);
    if (r == 1) CHECK(nan == 32);
    // the sums S_h of each unit match its planes
    const int n = k / 32;
    for (int u = 0; u < n; ++u) {
      if (r == 1 && u == 200 / 32) continue;
      int32_t s[2] = {0, 0}, stored[2];
      std::memcpy(stored, &row[static_cast<size_t>(64 * n + 16 * u + 4)], 8);
      for (int i = 0; i < 32; ++i) {
        const int part = i / 16, j = i % 16;
        s[part] += 254 * static_cast<int8_t>(row[static_cast<size_t>(16 * (part * n + u) + j)]) +
                   static_cast<int8_t>(row[static_cast<size_t>(16 * ((2 + part) * n + u) + j)]);
      }
      CHECK(s[0] == stored[0]);
      CHECK(s[1] == stored[1]);
    }
  }
}

TEST_CASE("gemv on split-int8 x: K-quant and legacy types, dense rows and tiles walked, within the record's bound") {
  Rng rng;
  struct Shape {
    int64_t rows, k;
  };
  // 4400 x 2048: more tiles than one wave of blocks (blocks walk tiles); 37 x 2816: two items per lane,
  // the second partial, an odd row count; 5 x 256: 4 of 32 lanes busy. Legacy types: 37 x 1408 (rows of
  // 44 blocks, 8-byte aligned for Q8_0: two steps, the second partial), 3 x 96.
  const std::vector<Shape> kquant = {{4400, 2048}, {37, 2816}, {5, 256}};
  // 300 x 128 and 70 x 32: short rows (4 blocks, 1 block), several rows per staged step. Last steps of
  // 16, 17 and 1 blocks (k = 1536, 1568, 1056): up to 16, a warp's two rows share the step's lanes
  const std::vector<Shape> legacy = {{37, 1408}, {3, 96}, {300, 128}, {70, 32}, {6, 1536}, {5, 1568}, {7, 1056}};
  // IQ4_NL as a legacy block, IQ4_XS as a staged super-block type (as Q6_K)
  for (GgmlType type : {GgmlType::q4_k, GgmlType::q5_k, GgmlType::q6_k, GgmlType::q8_0, GgmlType::q5_0, GgmlType::q4_0,
                        GgmlType::q4_1, GgmlType::q5_1, GgmlType::iq4_nl, GgmlType::iq4_xs}) {
    const bool is_k = latte::type_traits(type).block_values == 256;
    std::vector<Shape> shapes = is_k ? kquant : legacy;
    if (type == GgmlType::q8_0) shapes.push_back({4400, 2048});
    for (const Shape s : shapes) {
      CAPTURE(latte::type_name(type));
      CAPTURE(s.rows);
      CAPTURE(s.k);
      CHECK(dense_x8_misses(type, s.rows, s.k, 1, false, rng) == 0);
    }
  }
}

TEST_CASE("gemv on split-int8 x: gated + residual over gathered single-token groups, bf16 output") {
  Rng rng;
  const int64_t rows = 300, k = 2048, experts = 3;
  for (GgmlType type : {GgmlType::q4_k, GgmlType::q5_k}) {
    CAPTURE(latte::type_name(type));
    const Matrix gate = random_matrix(type, rows * experts, k, rng);
    const Matrix up = random_matrix(type, rows * experts, k, rng);
    const auto dgate = upload(gate.bytes), dup = upload(up.bytes);
    const int64_t matrix_bytes = static_cast<int64_t>(latte::row_bytes(type, k)) * rows;
    // expert 2 takes x row 1 into y row 0, expert 0 x row 0 into y row 2; the third group is empty
    const std::vector<latte::cuda::GemvGroup> groups = {{.matrix = 2, .count = 1, .x_row = {1}, .y_row = {0}},
                                                        {.matrix = 0, .count = 1, .x_row = {0}, .y_row = {2}},
                                                        {.matrix = 1, .count = 0, .x_row = {}, .y_row = {}}};
    const std::vector<int32_t> n_groups = {3};
    const auto dgroups = upload(groups);
    const auto dn = upload(n_groups);
    const auto x = random_vector(static_cast<size_t>(2 * k), rng);
    const auto residual = random_vector(static_cast<size_t>(3 * rows), rng);
    const auto dx = upload(x), dres = upload(residual);
    const auto rec = records_of(dx, 2, static_cast<int>(k));
    const std::vector<DecodedRecord> decoded = decode_records(rec, 2, k);
    const int64_t stride = latte::cuda::x_int8_record_bytes(k);
    latte::cuda::DeviceBuffer<float> x_nan(static_cast<size_t>(2 * k));
    poison(x_nan.data(), x_nan.bytes());
    latte::cuda::DeviceBuffer<float> y(static_cast<size_t>(3 * rows));
    poison(y.data(), y.bytes());
    latte::cuda::GemvParams p{.type = type,
                              .weight = dgate.data(),
                              .weight_up = dup.data(),
                              .weight_bytes = static_cast<int64_t>(gate.bytes.size()),
                              .matrix_stride_bytes = matrix_bytes,
                              .n_rows = static_cast<int>(rows),
                              .k = static_cast<int>(k),
                              .x = x_nan.data(),
                              .x_stride = k,
                              .y = y.data(),
                              .y_stride = rows,
                              .residual = dres.data(),
                              .groups = dgroups.data(),
                              .n_groups = dn.data(),
                              .max_groups = 4,  // one more than listed: its blocks leave at once
                              .max_tokens_per_group = 1,
                              .x_q = rec.data(),
                              .x_q_stride = stride};
    latte::cuda::gemv_quant(p, nullptr);
    const auto got = download(y.data(), y.size());
    int bad = 0, untouched = 0;
    for (const auto& g : groups) {
      if (g.count == 0) continue;
      const DecodedRecord& d = decoded[static_cast<size_t>(g.x_row[0])];
      const float* xt = &x[static_cast<size_t>(g.x_row[0] * k)];
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t m = g.matrix * rows + r;
        const float* gw = &gate.values[static_cast<size_t>(m * k)];
        const float* uw = &up.values[static_cast<size_t>(m * k)];
        const double gv = dot(gw, xt, k), uv = dot(uw, xt, k);
        const double eg = x8_bound(gw, xt, d.dx, k), eu = x8_bound(uw, xt, d.dx, k);
        const double bound = gated_bound(gv, uv, eg, eu);
        const size_t out = static_cast<size_t>(g.y_row[0] * rows + r);
        bad += !(std::abs(got[out] - (silu(gv) * uv + residual[out])) <= bound);
      }
    }
    for (int64_t r = 0; r < rows; ++r) untouched += std::isnan(got[static_cast<size_t>(rows + r)]);
    CHECK(bad == 0);
    CHECK(untouched == rows);  // y row 1 belongs to no group

    // without the residual, as bf16: the nearest bf16 of the fp32 result of the same launch
    latte::cuda::DeviceBuffer<float> y32(static_cast<size_t>(3 * rows));
    latte::cuda::DeviceBuffer<uint16_t> y16(static_cast<size_t>(3 * rows));
    poison(y32.data(), y32.bytes());
    poison(y16.data(), y16.bytes());
    p.residual = nullptr;
    p.y = y32.data();
    latte::cuda::gemv_quant(p, nullptr);
    p.y = nullptr;
    p.y_bf16 = reinterpret_cast<__nv_bfloat16*>(y16.data());
    latte::cuda::gemv_quant(p, nullptr);
    const auto f32 = download(y32.data(), y32.size());
    const auto b16 = download(y16.data(), y16.size());
    int differ = 0;
    for (size_t i = 0; i < f32.size(); ++i) {
      if (i / rows == 1) continue;
      differ += b16[i] != bf16_bits(f32[i]);
    }
    CHECK(differ == 0);
  }
}

TEST_CASE("gemv quantizing fp32 x in its blocks (x_quantize) equals the launch on quantize_x_int8's records") {
  // the records are the same bytes, so the sums are the same floats: bit-equal outputs, for each kernel
  // (K-quant, legacy / Q6_K, short rows), dense 1 and 3 tokens, and expert choices with x per slot
  Rng rng;
  struct Shape {
    GgmlType type;
    int64_t rows, k;
  };
  for (const Shape s :
       {Shape{GgmlType::q4_k, 2048, 2048}, Shape{GgmlType::q5_k, 37, 2816}, Shape{GgmlType::q6_k, 300, 2816},
        Shape{GgmlType::q8_0, 2048, 1408}, Shape{GgmlType::q5_0, 512, 128}, Shape{GgmlType::q4_0, 70, 32},
        Shape{GgmlType::q4_k, 5, 256}}) {
    CAPTURE(latte::type_name(s.type));
    CAPTURE(s.rows);
    CAPTURE(s.k);
    const int experts = 3, slots = 4;
    const Matrix w = random_matrix(s.type, s.rows * experts, s.k, rng);
    const auto dw = upload(w.bytes);
    auto x = random_vector(static_cast<size_t>(slots * s.k), rng);
    x[5] *= 300.0f;
    const auto dx = upload(x);
    const auto rec = records_of(dx, slots, static_cast<int>(s.k));
    const int64_t matrix_bytes = static_cast<int64_t>(latte::row_bytes(s.type, static_cast<uint64_t>(s.k))) * s.rows;
    const std::vector<int32_t> ids = {2, 0, 2, 1};
    const auto dids = upload(ids);
    // gathered groups of 3 and 1 tokens (the per-head W_UV: the tensor cores, Q6_K included)
    const std::vector<latte::cuda::GemvGroup> groups = {{.matrix = 2, .count = 3, .x_row = {0, 1, 3}, .y_row = {1, 2, 0}},
                                                        {.matrix = 0, .count = 1, .x_row = {2}, .y_row = {3}}};
    // groups of 2 tokens reading x at their y rows (the MoE down's groups of slots: LATTE_MOE_DOWN_QUANTIZE)
    const std::vector<latte::cuda::GemvGroup> pairs = {{.matrix = 1, .count = 2, .x_row = {}, .y_row = {2, 0}},
                                                       {.matrix = 2, .count = 2, .x_row = {}, .y_row = {3, 1}}};
    const std::vector<int32_t> n_groups = {2};
    const auto dgroups = upload(groups);
    const auto dpairs = upload(pairs);
    const auto dn = upload(n_groups);
    for (int mode = 0; mode < 5; ++mode) {
      CAPTURE(mode);  // 0: one token, 1: three tokens, 2: four choices, x row = y row, 3: groups, 4: groups of slots
      latte::cuda::GemvParams p{.type = s.type,
                                .weight = dw.data(),
                                .weight_bytes = static_cast<int64_t>(w.bytes.size()),
                                .matrix_stride_bytes = matrix_bytes,
                                .n_rows = static_cast<int>(s.rows),
                                .k = static_cast<int>(s.k),
                                .x = dx.data(),
                                .x_stride = s.k,
                                .y_stride = s.rows,
                                .n_tokens = mode == 1 ? 3 : 1};
      if (mode == 2) {
        p.max_groups = slots;
        p.x_row_is_y_row = true;
        p.choice_ids = dids.data();
      } else if (mode == 3) {
        p.groups = dgroups.data();
        p.n_groups = dn.data();
        p.max_groups = 2;
        p.max_tokens_per_group = 3;
      } else if (mode == 4) {
        p.groups = dpairs.data();
        p.n_groups = dn.data();
        p.max_groups = 2;
        p.max_tokens_per_group = 2;
        p.x_row_is_y_row = true;
      }
      const size_t outs = static_cast<size_t>(slots * s.rows);
      latte::cuda::DeviceBuffer<float> from_records(outs), self(outs);
      poison(from_records.data(), from_records.bytes());
      poison(self.data(), self.bytes());
      latte::cuda::GemvParams a = p;
      a.y = from_records.data();
      a.x_q = rec.data();
      a.x_q_stride = latte::cuda::x_int8_record_bytes(s.k);
      latte::cuda::gemv_quant(a, nullptr);
      latte::cuda::GemvParams b = p;
      b.y = self.data();
      b.x_quantize = true;
      latte::cuda::gemv_quant(b, nullptr);
      const auto ga = download(from_records.data(), outs), gb = download(self.data(), outs);
      const size_t written = static_cast<size_t>(mode == 0 ? 1 : mode == 1 ? 3 : slots) * s.rows;  // groups: 4 rows
      int differ = 0, nan = 0;
      for (size_t i = 0; i < written; ++i) {
        differ += std::memcmp(&ga[i], &gb[i], sizeof(float)) != 0;
        nan += std::isnan(ga[i]);
      }
      CHECK(nan == 0);
      CHECK_MESSAGE(differ == 0, differ << " of " << written << " outputs differ");
    }
  }
  // both at once is a contradiction
  latte::cuda::DeviceBuffer<float> x(256), y(256);
  latte::cuda::DeviceBuffer<uint8_t> rec(1024), w(4096);
  CHECK_THROWS_AS(latte::cuda::gemv_quant({.type = GgmlType::q8_0,
                                           .weight = w.data(),
                                           .weight_bytes = 4096,
                                           .n_rows = 4,
                                           .k = 256,
                                           .x = x.data(),
                                           .x_stride = 256,
                                           .y = y.data(),
                                           .y_stride = 4,
                                           .x_q = rec.data(),
                                           .x_q_stride = 640,
                                           .x_quantize = true},
                                          nullptr),
                  latte::Error);
}

TEST_CASE("gemv normalising x in its blocks (x_norm_weight) equals the launch on records of the normalised rows") {
  // the reference normalises on the host in float64; the kernel's fp32 sums may round a value the other
  // way before quantization, one split-int8 step (~1/32000 of the unit's scale) in a few values: the
  // outputs agree to ~1e-6 of their norm, while a missing or misapplied weight or scale is O(1)
  Rng rng;
  struct Shape {
    GgmlType type;
    int64_t rows, k;
  };
  for (const Shape s :
       {Shape{GgmlType::q4_k, 3648, 2048}, Shape{GgmlType::q5_k, 37, 2816}, Shape{GgmlType::q6_k, 300, 2816},
        Shape{GgmlType::q8_0, 2048, 1408}, Shape{GgmlType::q4_0, 70, 32}, Shape{GgmlType::q4_k, 5, 4096}}) {
    CAPTURE(latte::type_name(s.type));
    CAPTURE(s.rows);
    CAPTURE(s.k);
    const int slots = 3;
    const Matrix w = random_matrix(s.type, s.rows, s.k, rng);
    const auto dw = upload(w.bytes);
    auto x = random_vector(static_cast<size_t>(slots * s.k), rng);
    for (size_t i = 0; i < x.size(); ++i) x[i] *= 40.0f;  // a residual stream's magnitude
    const auto gamma = random_vector(static_cast<size_t>(s.k), rng);
    const float eps = 1e-6f;
    std::vector<float> xn(x.size());
    for (int t = 0; t < slots; ++t) {
      double ss = 0.0;
      for (int64_t i = 0; i < s.k; ++i) ss += static_cast<double>(x[t * s.k + i]) * x[t * s.k + i];
      const double inv = 1.0 / std::sqrt(ss / static_cast<double>(s.k) + eps);
      for (int64_t i = 0; i < s.k; ++i) xn[t * s.k + i] = static_cast<float>(x[t * s.k + i] * inv * gamma[i]);
    }
    const auto dx = upload(x), dxn = upload(xn), dgamma = upload(gamma);
    const auto rec = records_of(dxn, slots, static_cast<int>(s.k));
    for (int tokens : {1, 3}) {
      CAPTURE(tokens);
      latte::cuda::GemvParams p{.type = s.type,
                                .weight = dw.data(),
                                .weight_bytes = static_cast<int64_t>(w.bytes.size()),
                                .n_rows = static_cast<int>(s.rows),
                                .k = static_cast<int>(s.k),
                                .x_stride = s.k,
                                .y_stride = s.rows,
                                .n_tokens = tokens};
      const size_t outs = static_cast<size_t>(tokens * s.rows);
      latte::cuda::DeviceBuffer<float> want(outs), got(outs);
      poison(want.data(), want.bytes());
      poison(got.data(), got.bytes());
      latte::cuda::GemvParams a = p;
      a.x = dxn.data();
      a.y = want.data();
      a.x_q = rec.data();
      a.x_q_stride = latte::cuda::x_int8_record_bytes(s.k);
      latte::cuda::gemv_quant(a, nullptr);
      latte::cuda::GemvParams b = p;
      b.x = dx.data();
      b.y = got.data();
      b.x_quantize = true;
      b.x_norm_weight = dgamma.data();
      b.x_norm_eps = eps;
      latte::cuda::gemv_quant(b, nullptr);
      const auto gw = download(want.data(), outs), gg = download(got.data(), outs);
      double diff = 0.0, norm = 0.0;
      int nan = 0;
      for (size_t i = 0; i < outs; ++i) {
        nan += std::isnan(gg[i]);
        diff += (static_cast<double>(gg[i]) - gw[i]) * (static_cast<double>(gg[i]) - gw[i]);
        norm += static_cast<double>(gw[i]) * gw[i];
      }
      CHECK(nan == 0);
      // a value rounded to the other int8 step moves its products by ~max|x_u| / 32258 |w_i|: over 240 runs of
      // each shape the largest errors were 1.6e-5 (k = 32, one unit: one such value is 1/sqrt(32) of the norm),
      // 1.2e-5 (5 rows of 4096) and 3.5e-6 for the others; a wrong weight, scale or norm is 1e-2 or more
      const double error = std::sqrt(diff / norm);
      CHECK_MESSAGE(error <= 5e-5, "relative error " << error);
    }
  }
  // a weight without x_quantize, and a type without the split-int8 GEMV
  latte::cuda::DeviceBuffer<float> x(256), y(256), g(256);
  latte::cuda::DeviceBuffer<uint8_t> w(4096 * 4);
  latte::cuda::GemvParams bad{.type = GgmlType::q8_0,
                              .weight = w.data(),
                              .weight_bytes = 4096,
                              .n_rows = 4,
                              .k = 256,
                              .x = x.data(),
                              .x_stride = 256,
                              .y = y.data(),
                              .y_stride = 4,
                              .x_norm_weight = g.data()};
  CHECK_THROWS_AS(latte::cuda::gemv_quant(bad, nullptr), latte::Error);
  bad.type = GgmlType::f16;
  bad.x_quantize = true;
  CHECK_THROWS_AS(latte::cuda::gemv_quant(bad, nullptr), latte::Error);
}

TEST_CASE("rms_norm's int8 record and bf16 copy equal those made from its output, in place and with a residual") {
  Rng rng;
  const int rows = 3;
  // 2080 values: the second 2048-value pass has one unit and idle threads; without records the values are written
  // by the other loop of row_norm_outputs
  for (const auto& [n, residual, records] : {std::tuple{2048, false, true}, std::tuple{2048, true, true},
                                             std::tuple{2080, true, true}, std::tuple{2080, false, false}}) {
    CAPTURE(n);
    CAPTURE(residual);
    CAPTURE(records);
    const int64_t stride = latte::cuda::x_int8_record_bytes(n);
    const int bf16_stride = n + 8;  // rows apart from the fp32 ones' stride
    const auto x = random_vector(static_cast<size_t>(rows * n), rng);
    const auto h = random_vector(static_cast<size_t>(rows * n), rng);
    const auto w = random_vector(static_cast<size_t>(n), rng);
    const auto dw = upload(w);
    auto dx = upload(x);
    auto dh = upload(h);
    latte::cuda::DeviceBuffer<uint8_t> rec(static_cast<size_t>(rows * stride));
    poison(rec.data(), rec.bytes());
    latte::cuda::DeviceBuffer<uint16_t> b16(static_cast<size_t>(rows * bf16_stride));
    poison(b16.data(), b16.bytes());
    // in place: out = x
    latte::cuda::rms_norm({.x = dx.data(),
                           .x_stride = n,
                           .residual = residual ? dh.data() : nullptr,
                           .residual_stride = n,
                           .weight = dw.data(),
                           .n = n,
                           .rows = rows,
                           .eps = 1e-6f,
                           .out = dx.data(),
                           .out_stride = n,
                           .out_q = records ? rec.data() : nullptr,
                           .out_q_stride = stride,
                           .out_bf16 = b16.data(),
                           .out_bf16_stride = bf16_stride},
                          nullptr);
    const auto y = download(dx.data(), dx.size());
    // the fp32 output against a double reference
    int bad = 0;
    for (int r = 0; r < rows; ++r) {
      double ss = 0.0;
      for (int i = 0; i < n; ++i) {
        const double v = x[static_cast<size_t>(r * n + i)] + (residual ? h[static_cast<size_t>(r * n + i)] : 0.0f);
        ss += v * v;
      }
      const double inv = 1.0 / std::sqrt(ss / n + 1e-6);
      for (int i = 0; i < n; ++i) {
        const double v = x[static_cast<size_t>(r * n + i)] + (residual ? h[static_cast<size_t>(r * n + i)] : 0.0f);
        bad += !(std::abs(y[static_cast<size_t>(r * n + i)] - v * inv * w[static_cast<size_t>(i)]) <= 1e-5);
      }
    }
    CHECK(bad == 0);
    // the bf16 copy: each value the round to nearest even of the fp32 one, bit for bit; the padding untouched
    const auto got16 = download(b16.data(), b16.size());
    int bf16_bad = 0, pad_touched = 0;
    for (int r = 0; r < rows; ++r) {
      for (int i = 0; i < bf16_stride; ++i) {
        const uint16_t g = got16[static_cast<size_t>(r * bf16_stride + i)];
        if (i < n) {
          bf16_bad += g != bf16_bits(y[static_cast<size_t>(r * n + i)]);
        } else {
          pad_touched += g != got16[static_cast<size_t>(n)];  // poison: the first row's padding, as left
        }
      }
    }
    CHECK(bf16_bad == 0);
    CHECK(pad_touched == 0);
    if (records) {
      const auto again = records_of(dx, rows, n);
      CHECK(download(rec.data(), rec.size()) == download(again.data(), again.size()));
    }
  }
  // the bf16 copy needs an fp32 output, rows of n values and its own memory
  latte::cuda::DeviceBuffer<float> x(2048), w(2048), y(2048);
  latte::cuda::DeviceBuffer<uint16_t> b(2048);
  const latte::cuda::RmsNormParams good{.x = x.data(),
                                        .x_stride = 2048,
                                        .weight = w.data(),
                                        .n = 2048,
                                        .rows = 1,
                                        .out = y.data(),
                                        .out_stride = 2048,
                                        .out_bf16 = b.data(),
                                        .out_bf16_stride = 2048};
  CHECK_NOTHROW(latte::cuda::rms_norm(good, nullptr));
  auto bad = good;
  bad.out_bf16 = y.data();  // the fp32 output's memory
  CHECK_THROWS_AS(latte::cuda::rms_norm(bad, nullptr), latte::Error);
  bad = good;
  bad.out_type = latte::cuda::ActOut::bf16;
  CHECK_THROWS_AS(latte::cuda::rms_norm(bad, nullptr), latte::Error);
  bad = good;
  bad.out_bf16_stride = 2047;
  CHECK_THROWS_AS(latte::cuda::rms_norm(bad, nullptr), latte::Error);
}

TEST_CASE("split-int8 records and the int8 GEMV reject violated preconditions with latte::Error") {
  latte::cuda::DeviceBuffer<float> x(64);
  latte::cuda::DeviceBuffer<uint8_t> rec(4096);
  CHECK_THROWS_AS(
      latte::cuda::quantize_x_int8(
          {.x = x.data(), .x_stride = 48, .rows = 1, .k = 48, .out = rec.data(), .out_stride = 160}, nullptr),
      latte::Error);  // k not a multiple of 32
  CHECK_THROWS_AS(
      latte::cuda::quantize_x_int8(
          {.x = x.data(), .x_stride = 64, .rows = 1, .k = 64, .out = rec.data() + 4, .out_stride = 160}, nullptr),
      latte::Error);  // misaligned record
  CHECK_THROWS_AS(
      latte::cuda::quantize_x_int8(
          {.x = x.data(), .x_stride = 64, .rows = 2, .k = 64, .out = rec.data(), .out_stride = 144}, nullptr),
      latte::Error);  // records closer than 160 bytes
  const latte::cuda::DeviceBuffer<uint8_t> w(static_cast<size_t>(latte::row_bytes(GgmlType::q4_k, 256)));
  latte::cuda::DeviceBuffer<float> y(1);
  CHECK_THROWS_AS(latte::cuda::gemv_quant({.type = GgmlType::q4_k,
                                           .weight = w.data(),
                                           .weight_bytes = static_cast<int64_t>(w.bytes()),
                                           .n_rows = 1,
                                           .k = 256,
                                           .x = x.data(),
                                           .x_stride = 256,
                                           .y = y.data(),
                                           .y_stride = 1,
                                           .x_q = rec.data(),
                                           .x_q_stride = 320},
                                          nullptr),
                  latte::Error);  // x_q_stride < 80 * 256 / 32
  CHECK_THROWS_AS(latte::cuda::rms_norm({.x = x.data(),
                                         .x_stride = 48,
                                         .weight = x.data(),
                                         .n = 48,
                                         .rows = 1,
                                         .out = y.data(),
                                         .out_stride = 48,
                                         .out_q = rec.data(),
                                         .out_q_stride = 160},
                                        nullptr),
                  latte::Error);  // n not a multiple of 32
}

TEST_CASE("gemv on split-int8 x: legacy types over gathered groups reading x at y_row (the MoE down)") {
  Rng rng;
  const int64_t rows = 260, k = 1408, experts = 3;
  for (GgmlType type : {GgmlType::q8_0, GgmlType::q5_0, GgmlType::iq4_nl}) {
    CAPTURE(latte::type_name(type));
    const Matrix w = random_matrix(type, rows * experts, k, rng);
    const auto dw = upload(w.bytes);
    const int64_t matrix_bytes = static_cast<int64_t>(latte::row_bytes(type, k)) * rows;
    // slot 2 through expert 1, slot 0 through expert 2 (x rows are the slots: x_row_is_y_row)
    const std::vector<latte::cuda::GemvGroup> groups = {{.matrix = 1, .count = 1, .x_row = {0}, .y_row = {2}},
                                                        {.matrix = 2, .count = 1, .x_row = {1}, .y_row = {0}}};
    const std::vector<int32_t> n_groups = {2};
    const auto dgroups = upload(groups);
    const auto dn = upload(n_groups);
    const auto x = random_vector(static_cast<size_t>(3 * k), rng);
    const auto dx = upload(x);
    const auto rec = records_of(dx, 3, static_cast<int>(k));
    const std::vector<DecodedRecord> decoded = decode_records(rec, 3, k);
    const int64_t stride = latte::cuda::x_int8_record_bytes(k);
    latte::cuda::DeviceBuffer<float> x_nan(static_cast<size_t>(3 * k));
    poison(x_nan.data(), x_nan.bytes());
    latte::cuda::DeviceBuffer<float> y(static_cast<size_t>(3 * rows));
    poison(y.data(), y.bytes());
    latte::cuda::gemv_quant({.type = type,
                             .weight = dw.data(),
                             .weight_bytes = static_cast<int64_t>(w.bytes.size()),
                             .matrix_stride_bytes = matrix_bytes,
                             .n_rows = static_cast<int>(rows),
                             .k = static_cast<int>(k),
                             .x = x_nan.data(),
                             .x_stride = k,
                             .y = y.data(),
                             .y_stride = rows,
                             .groups = dgroups.data(),
                             .n_groups = dn.data(),
                             .max_groups = 2,
                             .max_tokens_per_group = 1,
                             .x_row_is_y_row = true,
                             .x_q = rec.data(),
                             .x_q_stride = stride},
                            nullptr);
    const auto got = download(y.data(), y.size());
    int bad = 0;
    for (const auto& g : groups) {
      const int slot = g.y_row[0];
      const DecodedRecord& d = decoded[static_cast<size_t>(slot)];
      for (int64_t r = 0; r < rows; ++r) {
        const float* wr = &w.values[static_cast<size_t>((g.matrix * rows + r) * k)];
        const float* xs = &x[static_cast<size_t>(slot * k)];
        bad += !(std::abs(got[static_cast<size_t>(slot * rows + r)] - dot(wr, xs, k)) <= x8_bound(wr, xs, d.dx, k));
      }
    }
    CHECK(bad == 0);
    int untouched = 0;
    for (int64_t r = 0; r < rows; ++r) untouched += std::isnan(got[static_cast<size_t>(rows + r)]);
    CHECK(untouched == rows);
  }
}

TEST_CASE("gemv on split-int8 x: a token's expert choices read straight from the ids (gated, and per-slot x)") {
  Rng rng;
  const int64_t rows = 200, k = 512, experts = 3;
  const GgmlType type = GgmlType::q4_k;
  const Matrix gate = random_matrix(type, rows * experts, k, rng);
  const Matrix up = random_matrix(type, rows * experts, k, rng);
  const auto dgate = upload(gate.bytes), dup = upload(up.bytes);
  const int64_t matrix_bytes = static_cast<int64_t>(latte::row_bytes(type, k)) * rows;
  const std::vector<int32_t> ids = {2, 0, 7};  // 7 is past the stack: clamped to expert 2
  const std::vector<int> used = {2, 0, 2};
  const auto dids = upload(ids);
  const auto x = random_vector(static_cast<size_t>(3 * k), rng);
  const auto dx = upload(x);
  const auto rec = records_of(dx, 3, static_cast<int>(k));
  const std::vector<DecodedRecord> decoded = decode_records(rec, 3, k);
  const int64_t stride = latte::cuda::x_int8_record_bytes(k);
  latte::cuda::DeviceBuffer<float> x_nan(static_cast<size_t>(3 * k));
  poison(x_nan.data(), x_nan.bytes());
  for (const bool per_slot : {false, true}) {
    CAPTURE(per_slot);
    latte::cuda::DeviceBuffer<float> y(static_cast<size_t>(3 * rows));
    poison(y.data(), y.bytes());
    latte::cuda::gemv_quant({.type = type,
                             .weight = dgate.data(),
                             .weight_up = per_slot ? nullptr : dup.data(),
                             .weight_bytes = static_cast<int64_t>(gate.bytes.size()),
                             .matrix_stride_bytes = matrix_bytes,
                             .n_rows = static_cast<int>(rows),
                             .k = static_cast<int>(k),
                             .x = x_nan.data(),
                             .x_stride = k,
                             .y = y.data(),
                             .y_stride = rows,
                             .max_groups = 3,
                             .x_row_is_y_row = per_slot,
                             .x_q = rec.data(),
                             .x_q_stride = stride,
                             .choice_ids = dids.data()},
                            nullptr);
    const auto got = download(y.data(), y.size());
    int bad = 0;
    for (int j = 0; j < 3; ++j) {
      const int xr = per_slot ? j : 0;
      const DecodedRecord& d = decoded[static_cast<size_t>(xr)];
      const float* xt = &x[static_cast<size_t>(xr * k)];
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t m = used[static_cast<size_t>(j)] * rows + r;
        const float* gw = &gate.values[static_cast<size_t>(m * k)];
        const float* uw = &up.values[static_cast<size_t>(m * k)];
        const double gv = dot(gw, xt, k), eg = x8_bound(gw, xt, d.dx, k);
        double want = gv, bound = eg;
        if (!per_slot) {
          const double uv = dot(uw, xt, k), eu = x8_bound(uw, xt, d.dx, k);
          want = silu(gv) * uv;
          bound = gated_bound(gv, uv, eg, eu);
        }
        bad += !(std::abs(got[static_cast<size_t>(j * rows + r)] - want) <= bound);
      }
    }
    CHECK(bad == 0);
  }
  // without the int8 records the choices cannot be read
  latte::cuda::DeviceBuffer<float> y(static_cast<size_t>(3 * rows));
  CHECK_THROWS_AS(latte::cuda::gemv_quant({.type = type,
                                           .weight = dgate.data(),
                                           .weight_bytes = static_cast<int64_t>(gate.bytes.size()),
                                           .matrix_stride_bytes = matrix_bytes,
                                           .n_rows = static_cast<int>(rows),
                                           .k = static_cast<int>(k),
                                           .x = x_nan.data(),
                                           .x_stride = k,
                                           .y = y.data(),
                                           .y_stride = rows,
                                           .max_groups = 3,
                                           .choice_ids = dids.data()},
                                          nullptr),
                  latte::Error);
}

TEST_CASE("gemv on split-int8 x: per-head short rows (W_UK-like, k = 128) over gathered heads, bf16 output") {
  Rng rng;
  const int64_t rows = 100, k = 128, heads = 4;
  for (GgmlType type : {GgmlType::q5_0, GgmlType::q8_0}) {
    CAPTURE(latte::type_name(type));
    const Matrix w = random_matrix(type, rows * heads, k, rng);
    const auto dw = upload(w.bytes);
    std::vector<latte::cuda::GemvGroup> groups;
    for (int h = 0; h < heads; ++h) groups.push_back({.matrix = h, .count = 1, .x_row = {h}, .y_row = {h}});
    const std::vector<int32_t> n_groups = {static_cast<int32_t>(heads)};
    const auto dgroups = upload(groups);
    const auto dn = upload(n_groups);
    const auto x = random_vector(static_cast<size_t>(heads * k), rng);
    const auto dx = upload(x);
    const auto rec = records_of(dx, static_cast<int>(heads), static_cast<int>(k));
    const std::vector<DecodedRecord> decoded = decode_records(rec, static_cast<int>(heads), k);
    const int64_t stride = latte::cuda::x_int8_record_bytes(k);
    latte::cuda::DeviceBuffer<float> x_nan(static_cast<size_t>(heads * k));
    poison(x_nan.data(), x_nan.bytes());
    latte::cuda::DeviceBuffer<uint16_t> y(static_cast<size_t>(heads * rows));
    poison(y.data(), y.bytes());
    latte::cuda::gemv_quant({.type = type,
                             .weight = dw.data(),
                             .weight_bytes = static_cast<int64_t>(w.bytes.size()),
                             .matrix_stride_bytes = static_cast<int64_t>(latte::row_bytes(type, k)) * rows,
                             .n_rows = static_cast<int>(rows),
                             .k = static_cast<int>(k),
                             .x = x_nan.data(),
                             .x_stride = k,
                             .y_bf16 = reinterpret_cast<__nv_bfloat16*>(y.data()),
                             .y_stride = rows,
                             .groups = dgroups.data(),
                             .n_groups = dn.data(),
                             .max_groups = static_cast<int>(heads),
                             .max_tokens_per_group = 1,
                             .x_q = rec.data(),
                             .x_q_stride = stride},
                            nullptr);
    const auto got = download(y.data(), y.size());
    int bad = 0;
    for (int h = 0; h < heads; ++h) {
      const DecodedRecord& d = decoded[static_cast<size_t>(h)];
      const float* xh = &x[static_cast<size_t>(h * k)];
      for (int64_t r = 0; r < rows; ++r) {
        const float* wr = &w.values[static_cast<size_t>((h * rows + r) * k)];
        const double want = dot(wr, xh, k);
        // bf16 rounding of the result on top of the record's bound
        const double bound = x8_bound(wr, xh, d.dx, k) + std::abs(want) / 256.0 + 1e-6;
        bad += !(std::abs(static_cast<double>(bf16_value(got[static_cast<size_t>(h * rows + r)])) - want) <= bound);
      }
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("gemv on split-int8 x: 9-128 dense rows in one tensor-core launch, plain and gated, within the bound") {
  Rng rng;
  struct Shape {
    int64_t rows, k;
  };
  // K-quants: 300 x 2048 (tiles walked, a partial last tile), 100 x 2048 (too few tiles: K split over a
  // block's warps, also with 5 SMs), 37 x 256; legacy: 37 x 1408 and 20 x 3200 (past sm_120's shared memory
  // with the copy ring: refused there, and the test says so); Q6_K (staged, a super-block per step): 300 x 1280
  // (rows of 1,050 bytes: every 2-byte misalignment) and 37 x 2048 (past sm_120's shared memory); IQ4_NL as the
  // legacy types, IQ4_XS (staged, a super-block of 8 units per step) as Q6_K
  for (GgmlType type : {GgmlType::q4_k, GgmlType::q5_k, GgmlType::q6_k, GgmlType::q8_0, GgmlType::q5_0, GgmlType::q4_0,
                        GgmlType::q4_1, GgmlType::q5_1, GgmlType::iq4_nl, GgmlType::iq4_xs}) {
    const bool is_k = latte::type_traits(type).block_values == 256;
    const bool staged_k = type == GgmlType::q6_k || type == GgmlType::iq4_xs;
    const std::vector<Shape> shapes = staged_k ? std::vector<Shape>{{300, 1280}, {37, 2048}}
                                      : is_k   ? std::vector<Shape>{{300, 2048}, {100, 2048}, {37, 256}}
                                               : std::vector<Shape>{{37, 1408}, {20, 3200}};
    for (const Shape s : shapes) {
      for (const int n : {9, 17, 30, 64, 100, 128}) {  // beyond 64: LATTE_GEMV_DENSE_ROWS
        CAPTURE(latte::type_name(type));
        CAPTURE(s.rows);
        CAPTURE(s.k);
        CAPTURE(n);
        if (!takes_dense_rows(type, s.rows, s.k, n)) {
          MESSAGE("not taken here (the device's shared memory): " << latte::type_name(type) << " k " << s.k);
          continue;
        }
        CHECK(dense_x8_misses(type, s.rows, s.k, n, n % 2 == 0, rng) == 0);
      }
    }
  }
  // refused: more than 128 rows, no records, a type without the tensor-core kernel
  latte::cuda::GemvParams probe{.type = GgmlType::q4_k,
                                .weight = reinterpret_cast<const void*>(uintptr_t{256}),
                                .weight_bytes = 256 * 144,
                                .n_rows = 256,
                                .k = 256,
                                .n_tokens = latte::cuda::gemv_max_dense_rows + 1,
                                .x_q = reinterpret_cast<const uint8_t*>(uintptr_t{256}),
                                .x_q_stride = latte::cuda::x_int8_record_bytes(256)};
  CHECK_FALSE(latte::cuda::gemv_takes_dense_rows(probe));
  probe.n_tokens = latte::cuda::gemv_max_dense_rows;
  CHECK(latte::cuda::gemv_takes_dense_rows(probe));
  probe.x_q = nullptr;
  CHECK_FALSE(latte::cuda::gemv_takes_dense_rows(probe));
  probe.x_q = reinterpret_cast<const uint8_t*>(uintptr_t{256});
  probe.type = GgmlType::q3_k;
  probe.weight_bytes = 256 * 110;
  CHECK_FALSE(latte::cuda::gemv_takes_dense_rows(probe));

  // gated: silu(gate x) * (up x) for 20 rows of x, Q4_K 48 x 2048 (K split over a block's warps) and Q8_0
  // 37 x 1408
  for (const auto& [type, rows, k] : {std::tuple{GgmlType::q4_k, int64_t{48}, int64_t{2048}},
                                      std::tuple{GgmlType::q8_0, int64_t{37}, int64_t{1408}}}) {
    CAPTURE(latte::type_name(type));
    const int n = 20;
    const Matrix gate = random_matrix(type, rows, k, rng), up = random_matrix(type, rows, k, rng);
    const auto dgate = upload(gate.bytes), dup = upload(up.bytes);
    const auto x = random_vector(static_cast<size_t>(n * k), rng);
    const auto dx = upload(x);
    const auto rec = records_of(dx, n, static_cast<int>(k));
    const std::vector<DecodedRecord> decoded = decode_records(rec, n, k);
    const int64_t stride = latte::cuda::x_int8_record_bytes(k);
    latte::cuda::DeviceBuffer<float> x_nan(static_cast<size_t>(n * k));
    poison(x_nan.data(), x_nan.bytes());
    latte::cuda::DeviceBuffer<float> y(static_cast<size_t>(n * rows));
    poison(y.data(), y.bytes());
    latte::cuda::gemv_quant({.type = type,
                             .weight = dgate.data(),
                             .weight_up = dup.data(),
                             .weight_bytes = static_cast<int64_t>(gate.bytes.size()),
                             .n_rows = static_cast<int>(rows),
                             .k = static_cast<int>(k),
                             .x = x_nan.data(),
                             .x_stride = k,
                             .y = y.data(),
                             .y_stride = rows,
                             .n_tokens = n,
                             .x_q = rec.data(),
                             .x_q_stride = stride},
                            nullptr);
    const auto got = download(y.data(), y.size());
    int bad = 0;
    for (int t = 0; t < n; ++t) {
      const DecodedRecord& d = decoded[static_cast<size_t>(t)];
      const float* xt = &x[static_cast<size_t>(t * k)];
      for (int64_t r = 0; r < rows; ++r) {
        const float* gw = &gate.values[static_cast<size_t>(r * k)];
        const float* uw = &up.values[static_cast<size_t>(r * k)];
        const double gv = dot(gw, xt, k), uv = dot(uw, xt, k);
        const double eg = x8_bound(gw, xt, d.dx, k), eu = x8_bound(uw, xt, d.dx, k);
        const double want = silu(gv) * uv;
        const double bound = gated_bound(gv, uv, eg, eu);
        bad += !(std::abs(got[static_cast<size_t>(t * rows + r)] - want) <= bound);
      }
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("gemv on split-int8 x: k = 7168 (DeepSeek-V3's hidden size) on the tensor cores, records past 64 KB") {
  // 3-64 rows whose records (17.9 KB a token) are past the dp4a kernels' 64 KB: the tensor-core GEMV stages them
  // when the block's shared memory holds them (an H200: 8 tokens in 143 KB, Q6_K with its 60 KB copy ring too).
  // x itself is NaN: a launch that fell back to the fp32 GEMV fails. (Expert groups of such rows: the "groups of
  // several tokens on the tensor cores" test.)
  Rng rng;
  const int64_t k = 7168;
  for (GgmlType type : {GgmlType::q4_k, GgmlType::q6_k, GgmlType::q8_0}) {
    CAPTURE(latte::type_name(type));
    const int64_t rows = 72;                    // too few tiles to fill the GPU: K split over each block's warps
    if (!takes_dense_rows(type, rows, k, 9)) {  // the 8-token blocks the launches below take
      // with 227 KB per block (sm_90, sm_100) every type here fits: 143 KB of records, 4 KB for the split, the
      // copy ring (Q8_0 40 KB, Q6_K 60 KB)
      CHECK(latte::cuda::device_caps(0).smem_per_block_optin < 215 * 1024);
      MESSAGE("not taken here (the device's shared memory): " << latte::type_name(type));
      continue;
    }
    for (const int n : {3, 5, 8, 20}) {  // 3: the 4-token build (the dp4a kernel cannot take 4 such records)
      CAPTURE(n);
      CHECK(dense_x8_misses(type, rows, k, n, n != 8, rng) == 0);
    }
  }
}

TEST_CASE("gemv on split-int8 x: 3-8 tokens of a dense FFN's down (k = 10,944 / 18,432) on the tensor cores") {
  // Records of 27 / 46 KB a token: past the dp4a kernels' 64 KB from 3 tokens (from 2 at 18,432), and 8 of them
  // past what a block stages with a copy ring, so 5-8 tokens run as two 4-token groups. x itself is NaN: a launch
  // that fell back to the fp32 GEMV fails. Q6_K at 18,432 (4 records, its 60 KB ring) does not fit a block.
  Rng rng;
  const bool big_blocks = latte::cuda::device_caps(0).smem_per_block_optin >= 227 * 1024;
  // 10,944 is not a multiple of 256 (DeepSeek-V2-Lite's down is Q5_0 or Q8_0 in its K-quant mixes)
  const std::vector<std::pair<int64_t, std::vector<GgmlType>>> cases = {
      {10944, {GgmlType::q5_0, GgmlType::q8_0, GgmlType::q4_1}},
      {18432, {GgmlType::q4_k, GgmlType::q6_k, GgmlType::q8_0}}};
  for (const auto& [k, types] : cases) {
    for (GgmlType type : types) {
      for (const int n : {3, 5, 8}) {
        CAPTURE(k);
        CAPTURE(latte::type_name(type));
        CAPTURE(n);
        const int64_t rows = 72;  // K split over each block's warps
        const bool taken = latte::cuda::gemv_takes_dense_records(dense_probe(type, rows, k, n));
        CHECK(taken == (big_blocks && !(type == GgmlType::q6_k && k == 18432)));
        CHECK_FALSE(latte::cuda::gemv_reads_x_int8(type, k, n));
        if (taken) CHECK(dense_x8_misses(type, rows, k, n, n != 5, rng) == 0);
      }
    }
  }
}

TEST_CASE("gemv on split-int8 x: 2-8 tokens in one pass, dense rows, within each token's bound") {
  Rng rng;
  struct Shape {
    int64_t rows, k;
  };
  // K-quants: 1000 x 2048 (tiles walked), 100 x 2048, 37 x 2816 (a partial second item per lane; these two on
  // the tensor cores with K split over a block's warps from 3 tokens); legacy: 37 x 1408, 300 x 128 (short rows)
  for (GgmlType type : {GgmlType::q4_k, GgmlType::q5_k, GgmlType::q6_k, GgmlType::q8_0, GgmlType::q5_0, GgmlType::q4_1,
                        GgmlType::iq4_nl, GgmlType::iq4_xs}) {
    const bool is_k = latte::type_traits(type).block_values == 256;
    const std::vector<Shape> shapes = is_k ? std::vector<Shape>{{1000, 2048}, {100, 2048}, {37, 2816}}
                                           : std::vector<Shape>{{37, 1408}, {300, 128}, {9, 1056}};
    for (const Shape s : shapes) {
      for (const int n : {2, 3, 5, 8}) {
        CAPTURE(latte::type_name(type));
        CAPTURE(s.rows);
        CAPTURE(s.k);
        CAPTURE(n);
        REQUIRE(latte::cuda::gemv_reads_x_int8(type, s.k, n));
        CHECK(dense_x8_misses(type, s.rows, s.k, n, true, rng) == 0);
      }
    }
  }
  // 8 tokens of k = 10944 do not fit the records' shared memory: the fp32 GEMV takes them
  CHECK_FALSE(latte::cuda::gemv_reads_x_int8(GgmlType::q8_0, 10944, 8));
  CHECK_FALSE(latte::cuda::gemv_reads_x_int8(GgmlType::q8_0, 10944, 3));  // built for 4 tokens
  CHECK(latte::cuda::gemv_reads_x_int8(GgmlType::q8_0, 10944, 2));
  CHECK(latte::cuda::gemv_reads_x_int8(GgmlType::q8_0, 10944, 1));
}

TEST_CASE("gemv routing the token in its blocks (route) equals moe_route then the launch on its choices") {
  // the same warp function chooses in both, so ids, weights and outputs are bit-equal; ids and weights
  // are written by the launch itself (poisoned before)
  Rng rng;
  struct Rule {
    int experts, k, groups, groups_used;
    latte::cuda::MoeGating gating;
    bool bias, normalize;
  };
  bool first_rule = true;
  for (const Rule rule : {Rule{64, 6, 1, 1, latte::cuda::MoeGating::softmax, false, false},
                          Rule{256, 8, 8, 4, latte::cuda::MoeGating::sigmoid, true, true},
                          Rule{16, 2, 1, 1, latte::cuda::MoeGating::softmax, false, true}}) {
    CAPTURE(rule.experts);
    CAPTURE(rule.k);
    // the legacy types at the MoE down's k = 1408 (the staged kernel) for the first rule
    const std::vector<GgmlType> types = first_rule
                                            ? std::vector<GgmlType>{GgmlType::q4_k, GgmlType::q5_0, GgmlType::q8_0}
                                            : std::vector{GgmlType::q4_k};
    first_rule = false;
    for (const GgmlType type : types) {
      CAPTURE(type);
      const int64_t rows = 96, k = type == GgmlType::q4_k ? 512 : 1408;
      const Matrix gate = random_matrix(type, rows * rule.experts, k, rng);
      const Matrix up = random_matrix(type, rows * rule.experts, k, rng);
      const auto dgate = upload(gate.bytes), dup = upload(up.bytes);
      const int64_t matrix_bytes = static_cast<int64_t>(latte::row_bytes(type, k)) * rows;
      const auto logits = random_vector(static_cast<size_t>(rule.experts), rng);
      const auto bias = random_vector(static_cast<size_t>(rule.experts), rng);
      const auto dlogits = upload(logits), dbias = upload(bias);
      const auto x = random_vector(static_cast<size_t>(k), rng);
      const auto dx = upload(x);
      for (const bool gated : {true, false}) {
        CAPTURE(gated);
        std::vector<float> y_of[2];
        std::vector<int32_t> ids_of[2];
        std::vector<float> weights_of[2];
        for (int mode = 0; mode < 2; ++mode) {  // moe_route, then the launch; route
          latte::cuda::DeviceBuffer<int32_t> ids(static_cast<size_t>(rule.k));
          latte::cuda::DeviceBuffer<float> weights(static_cast<size_t>(rule.k)), y(static_cast<size_t>(rule.k * rows));
          poison(ids.data(), ids.bytes());
          poison(weights.data(), weights.bytes());
          poison(y.data(), y.bytes());
          const latte::cuda::MoeRouterParams route{.logits = dlogits.data(),
                                                   .logits_stride = rule.experts,
                                                   .n_tokens = 1,
                                                   .n_experts = rule.experts,
                                                   .selection_bias = rule.bias ? dbias.data() : nullptr,
                                                   .gating = rule.gating,
                                                   .k = rule.k,
                                                   .n_groups = rule.groups,
                                                   .groups_used = rule.groups_used,
                                                   .normalize = rule.normalize,
                                                   .scale = 1.5f,
                                                   .ids = ids.data(),
                                                   .weights = weights.data()};
          if (mode == 0) latte::cuda::moe_route(route, nullptr);
          latte::cuda::GemvParams p{.type = type,
                                    .weight = dgate.data(),
                                    .weight_up = gated ? dup.data() : nullptr,
                                    .weight_bytes = static_cast<int64_t>(gate.bytes.size()),
                                    .matrix_stride_bytes = matrix_bytes,
                                    .n_rows = static_cast<int>(rows),
                                    .k = static_cast<int>(k),
                                    .x = dx.data(),
                                    .x_stride = k,
                                    .y = y.data(),
                                    .y_stride = rows,
                                    .max_groups = rule.k,
                                    .choice_ids = ids.data(),
                                    .x_quantize = true};
          if (mode == 1) p.route = route;
          latte::cuda::gemv_quant(p, nullptr);
          y_of[mode] = download(y.data(), y.size());
          ids_of[mode] = download(ids.data(), ids.size());
          weights_of[mode] = download(weights.data(), weights.size());
        }
        CHECK(ids_of[0] == ids_of[1]);
        CHECK(std::memcmp(weights_of[0].data(), weights_of[1].data(), weights_of[0].size() * sizeof(float)) == 0);
        int differ = 0, nan = 0;
        for (size_t i = 0; i < y_of[0].size(); ++i) {
          differ += std::memcmp(&y_of[0][i], &y_of[1][i], sizeof(float)) != 0;
          nan += std::isnan(y_of[0][i]);
        }
        CHECK(nan == 0);
        CHECK_MESSAGE(differ == 0, differ << " outputs differ");
        // distinct experts, as the rule picks them
        std::vector<int32_t> sorted = ids_of[1];
        std::sort(sorted.begin(), sorted.end());
        CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());
        CHECK(sorted.front() >= 0);
        CHECK(sorted.back() < rule.experts);
      }
    }
  }
  // the route must produce the launch's choices, for one token
  latte::cuda::DeviceBuffer<float> x(512), y(512), logits(64), weights(8);
  latte::cuda::DeviceBuffer<int32_t> ids(8), other(8);
  latte::cuda::DeviceBuffer<uint8_t> w(1 << 16);
  latte::cuda::GemvParams bad{.type = GgmlType::q4_k,
                              .weight = w.data(),
                              .weight_bytes = 1 << 16,
                              .matrix_stride_bytes = 2304,
                              .n_rows = 8,
                              .k = 512,
                              .x = x.data(),
                              .x_stride = 512,
                              .y = y.data(),
                              .y_stride = 8,
                              .max_groups = 2,
                              .choice_ids = other.data(),
                              .x_quantize = true,
                              .route = {.logits = logits.data(),
                                        .logits_stride = 64,
                                        .n_tokens = 1,
                                        .n_experts = 64,
                                        .k = 2,
                                        .ids = ids.data(),
                                        .weights = weights.data()}};
  CHECK_THROWS_AS(latte::cuda::gemv_quant(bad, nullptr), latte::Error);
  bad.choice_ids = ids.data();
  bad.route.k = 3;
  CHECK_THROWS_AS(latte::cuda::gemv_quant(bad, nullptr), latte::Error);
}

TEST_CASE("gemv on split-int8 x: gated groups of several tokens, and choices of several tokens") {
  Rng rng;
  // k = 1280: a partial item per lane for Q4_K, a last step of 8 blocks (gate and up side by side) for Q8_0
  const int64_t rows = 260, k = 1280, experts = 4;
  for (GgmlType type : {GgmlType::q4_k, GgmlType::q8_0}) {
    CAPTURE(latte::type_name(type));
    const Matrix gate = random_matrix(type, rows * experts, k, rng);
    const Matrix up = random_matrix(type, rows * experts, k, rng);
    const auto dgate = upload(gate.bytes), dup = upload(up.bytes);
    const int64_t matrix_bytes = static_cast<int64_t>(latte::row_bytes(type, k)) * rows;
    const int n_x = 6;
    const auto x = random_vector(static_cast<size_t>(n_x * k), rng);
    const auto dx = upload(x);
    const auto rec = records_of(dx, n_x, static_cast<int>(k));
    const std::vector<DecodedRecord> decoded = decode_records(rec, n_x, k);
    const int64_t stride = latte::cuda::x_int8_record_bytes(k);
    latte::cuda::DeviceBuffer<float> x_nan(static_cast<size_t>(n_x * k));
    poison(x_nan.data(), x_nan.bytes());
    auto want_at = [&](int matrix, int xr, int64_t r, double& bound) {
      const DecodedRecord& d = decoded[static_cast<size_t>(xr)];
      const float* xt = &x[static_cast<size_t>(xr * k)];
      const int64_t m = matrix * rows + r;
      const float* gw = &gate.values[static_cast<size_t>(m * k)];
      const float* uw = &up.values[static_cast<size_t>(m * k)];
      const double gv = dot(gw, xt, k), uv = dot(uw, xt, k);
      const double eg = x8_bound(gw, xt, d.dx, k), eu = x8_bound(uw, xt, d.dx, k);
      bound = gated_bound(gv, uv, eg, eu);
      return silu(gv) * uv;
    };

    // groups of 5, 1 and 3 tokens with scattered x rows (max_tokens_per_group 5: the 8-token build)
    const std::vector<latte::cuda::GemvGroup> groups = {
        {.matrix = 3, .count = 5, .x_row = {4, 0, 5, 2, 1}, .y_row = {0, 1, 2, 3, 4}},
        {.matrix = 0, .count = 1, .x_row = {3}, .y_row = {5}},
        {.matrix = 1, .count = 3, .x_row = {1, 3, 0}, .y_row = {6, 8, 7}}};
    const std::vector<int32_t> n_groups = {3};
    const auto dgroups = upload(groups);
    const auto dn = upload(n_groups);
    latte::cuda::DeviceBuffer<float> y(static_cast<size_t>(10 * rows));
    poison(y.data(), y.bytes());
    latte::cuda::gemv_quant({.type = type,
                             .weight = dgate.data(),
                             .weight_up = dup.data(),
                             .weight_bytes = static_cast<int64_t>(gate.bytes.size()),
                             .matrix_stride_bytes = matrix_bytes,
                             .n_rows = static_cast<int>(rows),
                             .k = static_cast<int>(k),
                             .x = x_nan.data(),
                             .x_stride = k,
                             .y = y.data(),
                             .y_stride = rows,
                             .groups = dgroups.data(),
                             .n_groups = dn.data(),
                             .max_groups = 3,
                             .max_tokens_per_group = 5,
                             .x_q = rec.data(),
                             .x_q_stride = stride},
                            nullptr);
    auto got = download(y.data(), y.size());
    int bad = 0, untouched = 0;
    for (const auto& g : groups) {
      for (int t = 0; t < g.count; ++t) {
        for (int64_t r = 0; r < rows; ++r) {
          double bound = 0.0;
          const double want = want_at(g.matrix, g.x_row[t], r, bound);
          bad += !(std::abs(got[static_cast<size_t>(g.y_row[t] * rows + r)] - want) <= bound);
        }
      }
    }
    for (int64_t r = 0; r < 2 * rows; ++r) untouched += std::isnan(got[static_cast<size_t>(9 * rows + r % rows)]);
    CHECK(bad == 0);
    CHECK(untouched == 2 * rows);  // y row 9 belongs to no group

    // 3 tokens x 2 choices: choice j reads x row j / 2
    const std::vector<int32_t> ids = {1, 3, 0, 3, 2, 1};
    const auto dids = upload(ids);
    poison(y.data(), y.bytes());
    latte::cuda::gemv_quant({.type = type,
                             .weight = dgate.data(),
                             .weight_up = dup.data(),
                             .weight_bytes = static_cast<int64_t>(gate.bytes.size()),
                             .matrix_stride_bytes = matrix_bytes,
                             .n_rows = static_cast<int>(rows),
                             .k = static_cast<int>(k),
                             .x = x_nan.data(),
                             .x_stride = k,
                             .y = y.data(),
                             .y_stride = rows,
                             .max_groups = 6,
                             .x_q = rec.data(),
                             .x_q_stride = stride,
                             .choice_ids = dids.data(),
                             .choices_per_token = 2},
                            nullptr);
    got = download(y.data(), y.size());
    bad = 0;
    for (int j = 0; j < 6; ++j) {
      for (int64_t r = 0; r < rows; ++r) {
        double bound = 0.0;
        const double want = want_at(ids[static_cast<size_t>(j)], j / 2, r, bound);
        bad += !(std::abs(got[static_cast<size_t>(j * rows + r)] - want) <= bound);
      }
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("gemv on split-int8 x: groups of more than 8 tokens only where the tensor cores take them") {
  // Q4_K 64 x 2048 (the MoE gate's k): taken; with more than 16 tokens, without records, as a type with no
  // tensor-core kernel (Q3_K), at k = 7168 (16 records of 18 KB: two blocks do not fit) or switched off, refused
  // by the predicate and by gemv_quant (a dp4a or fp32 kernel would drop the tokens past its 8)
  CHECK(takes_wide_groups(GgmlType::q4_k, 64, 2048));
  CHECK(takes_wide_groups(GgmlType::q8_0, 64, 1408));
  CHECK_FALSE(takes_wide_groups(GgmlType::q3_k, 64, 2048));
  CHECK_FALSE(takes_wide_groups(GgmlType::q4_k, 64, 7168));
  const int32_t fake = 0;
  latte::cuda::GemvParams p = dense_probe(GgmlType::q4_k, 64, 2048, 1);
  p.matrix_stride_bytes = p.weight_bytes;
  p.groups = reinterpret_cast<const latte::cuda::GemvGroup*>(uintptr_t{256});
  p.n_groups = &fake;
  p.max_groups = 1;
  p.max_tokens_per_group = latte::cuda::gemv_group_max_tokens + 1;
  CHECK_FALSE(latte::cuda::gemv_takes_wide_groups(p));
  p.max_tokens_per_group = 9;
  CHECK(latte::cuda::gemv_takes_wide_groups(p));
  p.x_q = nullptr;
  CHECK_FALSE(latte::cuda::gemv_takes_wide_groups(p));
  p.x = reinterpret_cast<const float*>(uintptr_t{256});
  p.x_stride = 2048;
  p.y = reinterpret_cast<float*>(uintptr_t{256});
  p.y_stride = 64;
  CHECK_THROWS_AS(latte::cuda::gemv_quant(p, nullptr), latte::Error);
  p.type = GgmlType::q3_k;
  p.weight_bytes = p.matrix_stride_bytes = static_cast<int64_t>(latte::row_bytes(GgmlType::q3_k, 2048)) * 64;
  p.x_q = reinterpret_cast<const uint8_t*>(uintptr_t{256});
  CHECK_THROWS_AS(latte::cuda::gemv_quant(p, nullptr), latte::Error);
}

TEST_CASE("gemv on split-int8 x: more expert groups than one wave of resident blocks, 8- and 16-token builds") {
  // 3 x 132 + 54 = 450 groups on an H100 (DeepSeek-V3's 256 experts x 8 choices at 128 sequences make up to 384):
  // more than one wave of either build's blocks (2 or 3 per SM: 264 / 396), so the launch cannot deal its groups
  // over one wave and every group still needs its blocks; a few group slots stay empty. The staged types' 16-token
  // build (V2-Lite's MoE down, Q5_0) with 300 rows (3 tiles, the last partial) over 5 / 3 x SMs groups (220 on an
  // H100, 9 on the emulation's 5 SMs; every tenth empty): with deal_pairs (LATTE_GEMV_MMA_PAIRS) their (group, tile)
  // pairs are ~2.5 per block of one wave (2 per SM), so blocks' ranges start and end inside groups and cross into
  // the next ones, restaging x there (the segment walk is the same for every staged type). The counts follow the
  // SMs, so the emulation's few SMs take few groups.
  Rng rng;
  const int sms = latte::cuda::device_caps(0).sm_count;
  struct Shape {
    GgmlType type;
    int64_t rows, k;
    int n_groups;
    int first_bound;  // 8: the 8- and 16-token builds; 16: the 16-token build only
  };
  const Shape shapes[] = {{GgmlType::q4_k, 32, 2048, 3 * sms + 54, 8},
                          {GgmlType::q5_0, 300, 1024, (5 * sms + 2) / 3, 16}};
  for (const Shape& shape : shapes) {
    const GgmlType type = shape.type;
    const int64_t rows = shape.rows, k = shape.k;
    const int experts = 3, n_x = 12, n_groups = shape.n_groups;
    CAPTURE(latte::type_name(type));
    const Matrix w = random_matrix(type, rows * experts, k, rng);
    const auto dw = upload(w.bytes);
    const int64_t matrix_bytes = static_cast<int64_t>(latte::row_bytes(type, k)) * rows;
    const auto x = random_vector(static_cast<size_t>(n_x * k), rng);
    const auto dx = upload(x);
    const auto rec = records_of(dx, n_x, static_cast<int>(k));
    const int64_t stride = latte::cuda::x_int8_record_bytes(k);
    const std::vector<DecodedRecord> decoded = decode_records(rec, n_x, k);
    latte::cuda::DeviceBuffer<float> x_nan(static_cast<size_t>(n_x * k));
    poison(x_nan.data(), x_nan.bytes());
    for (const int bound : {8, 16}) {
      if (bound < shape.first_bound) continue;
      if (bound > 8 && !takes_wide_groups(type, rows, k)) {
        MESSAGE("16-token groups not taken here: " << latte::type_name(type) << " k " << k);
        continue;
      }
      CAPTURE(bound);
      std::vector<latte::cuda::GemvGroup> groups;
      int y_rows = 0;
      for (int i = 0; i < n_groups; ++i) {
        // every tenth group empty (a sort leaves none, but the kernels skip them)
        const int count = rows > 32 && i % 10 == 7 ? 0 : 1 + (7 * i) % bound;
        latte::cuda::GemvGroup g{.matrix = i % experts, .count = count, .x_row = {}, .y_row = {}};
        for (int t = 0; t < g.count; ++t) {
          g.x_row[t] = rng.uniform_int(0, n_x - 1);
          g.y_row[t] = y_rows++;
        }
        groups.push_back(g);
      }
      const std::vector<int32_t> count = {n_groups};
      const auto dgroups = upload(groups);
      const auto dn = upload(count);
      latte::cuda::DeviceBuffer<float> y(static_cast<size_t>(y_rows * rows));
      poison(y.data(), y.bytes());
      latte::cuda::gemv_quant({.type = type,
                               .weight = dw.data(),
                               .weight_bytes = static_cast<int64_t>(w.bytes.size()),
                               .matrix_stride_bytes = matrix_bytes,
                               .n_rows = static_cast<int>(rows),
                               .k = static_cast<int>(k),
                               .x = x_nan.data(),
                               .x_stride = k,
                               .y = y.data(),
                               .y_stride = rows,
                               .groups = dgroups.data(),
                               .n_groups = dn.data(),
                               .max_groups = n_groups + 5,
                               .max_tokens_per_group = bound,
                               .x_q = rec.data(),
                               .x_q_stride = stride},
                              nullptr);
      const auto got = download(y.data(), y.size());
      int bad = 0;
      for (const auto& g : groups) {
        for (int t = 0; t < g.count; ++t) {
          const float* xt = &x[static_cast<size_t>(g.x_row[t] * k)];
          for (int64_t r = 0; r < rows; ++r) {
            const float* wr = &w.values[static_cast<size_t>((g.matrix * rows + r) * k)];
            const double want = dot(wr, xt, k);
            const double bound_r = x8_bound(wr, xt, decoded[static_cast<size_t>(g.x_row[t])].dx, k);
            bad += !(std::abs(got[static_cast<size_t>(g.y_row[t] * rows + r)] - want) <= bound_r);
          }
        }
      }
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("gemv on split-int8 x: groups of several tokens on the tensor cores, gated and plain, every build") {
  Rng rng;
  struct Shape {
    int64_t rows, k;
  };
  // K-quants: 300 x 1280: 19 tile rows of 16 (the last partial), five super-blocks; 37 x 256: one
  // super-block, most of a 32-row plain tile past the end. Legacy types: 300 x 1408 (11 steps of 4 blocks,
  // the MoE down's k), 37 x 1056 (33 blocks: a last step of one), 20 x 3200 (8 tokens' records 64 KB: with
  // the copy ring past sm_120's 99 KB of shared memory, where the dp4a GEMV takes it). Q6_K: 300 x 1280 (rows
  // of 1,050 bytes, 2-byte aligned), 37 x 1024 (four super-blocks, 840-byte rows). Q4_K, Q6_K and Q8_0 also
  // 72 x 7168 (DeepSeek-V3's hidden size: 8 tokens' records are 143 KB, past the dp4a kernels' 64 KB; where the
  // tensor cores cannot hold them either, no int8 GEMV takes them and the case is skipped)
  // IQ4_NL and IQ4_XS as the legacy types and Q6_K
  const int n_x = 12, experts = 3;
  for (GgmlType type : {GgmlType::q4_k, GgmlType::q5_k, GgmlType::q6_k, GgmlType::q8_0, GgmlType::q5_0, GgmlType::q4_0,
                        GgmlType::q4_1, GgmlType::q5_1, GgmlType::iq4_nl, GgmlType::iq4_xs}) {
    const bool is_k = latte::type_traits(type).block_values == 256;
    const bool staged_k = type == GgmlType::q6_k || type == GgmlType::iq4_xs;
    std::vector<Shape> shapes = staged_k ? std::vector<Shape>{{300, 1280}, {37, 1024}}
                                : is_k   ? std::vector<Shape>{{300, 1280}, {37, 256}}
                                         : std::vector<Shape>{{300, 1408}, {37, 1056}, {20, 3200}};
    if (type == GgmlType::q4_k || type == GgmlType::q6_k || type == GgmlType::q8_0) shapes.push_back({72, 7168});
    for (const Shape s : shapes) {
      if (s.k == 7168 && !takes_dense_rows(type, s.rows, s.k, 9)) {  // the same shared memory as a group of 8
        MESSAGE("not taken here (the device's shared memory): " << latte::type_name(type) << " k " << s.k);
        continue;
      }
      const int64_t rows = s.rows, k = s.k;
      const Matrix gate = random_matrix(type, rows * experts, k, rng);
      const Matrix up = random_matrix(type, rows * experts, k, rng);
      const auto dgate = upload(gate.bytes), dup = upload(up.bytes);
      const int64_t matrix_bytes = static_cast<int64_t>(latte::row_bytes(type, k)) * rows;
      auto x = random_vector(static_cast<size_t>(n_x * k), rng);
      x[static_cast<size_t>(5 * k + 40)] *= 60.0f;  // a unit with a wide range
      const auto dx = upload(x);
      const auto rec = records_of(dx, n_x, static_cast<int>(k));
      const int64_t stride = latte::cuda::x_int8_record_bytes(k);
      const std::vector<DecodedRecord> decoded = decode_records(rec, n_x, k);
      latte::cuda::DeviceBuffer<float> x_nan(static_cast<size_t>(n_x * k));
      poison(x_nan.data(), x_nan.bytes());
      const int y_rows = 40;
      const auto residual = random_vector(static_cast<size_t>(y_rows * rows), rng);
      const auto dres = upload(residual);
      // the 4-token build (twice), the 8-token one and the 16-token one (groups of 9-16: two token tiles, or one
      // where a group has at most 8)
      for (const int bound_tokens : {3, 4, 8, 12, 16}) {
        if (bound_tokens > 8 && !takes_wide_groups(type, rows, k)) {
          MESSAGE("16-token groups not taken here: " << latte::type_name(type) << " k " << k);
          continue;
        }
        // groups of bound_tokens, 1 and bound_tokens - 1 tokens over shuffled x rows into shuffled y rows
        // (y has y_rows rows; those of no group stay poisoned)
        std::vector<int> xs(n_x), ys(y_rows);
        for (int i = 0; i < n_x; ++i) xs[static_cast<size_t>(i)] = i;
        for (int i = 0; i < y_rows; ++i) ys[static_cast<size_t>(i)] = i;
        for (size_t i = xs.size(); i > 1; --i)
          std::swap(xs[i - 1], xs[static_cast<size_t>(rng.uniform_int(0, static_cast<int>(i) - 1))]);
        for (size_t i = ys.size(); i > 1; --i)
          std::swap(ys[i - 1], ys[static_cast<size_t>(rng.uniform_int(0, static_cast<int>(i) - 1))]);
        std::vector<latte::cuda::GemvGroup> groups;
        int used = 0;
        const int32_t matrices[3] = {2, 0, 1};
        for (const int count : {bound_tokens, 1, std::max(1, bound_tokens - 1)}) {
          latte::cuda::GemvGroup g{.matrix = matrices[groups.size()], .count = count, .x_row = {}, .y_row = {}};
          for (int t = 0; t < count; ++t, ++used) {
            g.x_row[t] = xs[static_cast<size_t>(used % n_x)];
            g.y_row[t] = ys[static_cast<size_t>(used)];
          }
          groups.push_back(g);
        }
        const std::vector<int32_t> n_groups = {static_cast<int32_t>(groups.size())};
        const auto dgroups = upload(groups);
        const auto dn = upload(n_groups);
        for (const int mode : {0, 1, 2}) {  // gated + residual, plain + residual, plain bf16
          CAPTURE(latte::type_name(type));
          CAPTURE(rows);
          CAPTURE(bound_tokens);
          CAPTURE(mode);
          latte::cuda::DeviceBuffer<float> y(static_cast<size_t>(y_rows * rows));
          latte::cuda::DeviceBuffer<uint16_t> y16(static_cast<size_t>(y_rows * rows));
          poison(y.data(), y.bytes());
          poison(y16.data(), y16.bytes());
          latte::cuda::gemv_quant({.type = type,
                                   .weight = dgate.data(),
                                   .weight_up = mode == 0 ? dup.data() : nullptr,
                                   .weight_bytes = static_cast<int64_t>(gate.bytes.size()),
                                   .matrix_stride_bytes = matrix_bytes,
                                   .n_rows = static_cast<int>(rows),
                                   .k = static_cast<int>(k),
                                   .x = x_nan.data(),
                                   .x_stride = k,
                                   .y = mode == 2 ? nullptr : y.data(),
                                   .y_bf16 = mode == 2 ? reinterpret_cast<__nv_bfloat16*>(y16.data()) : nullptr,
                                   .y_stride = rows,
                                   .residual = mode == 2 ? nullptr : dres.data(),
                                   .groups = dgroups.data(),
                                   .n_groups = dn.data(),
                                   .max_groups = static_cast<int>(groups.size()) + 1,  // a slot with no group
                                   .max_tokens_per_group = bound_tokens,
                                   .x_q = rec.data(),
                                   .x_q_stride = stride},
                                  nullptr);
          const auto got = download(y.data(), y.size());
          const auto got16 = download(y16.data(), y16.size());
          std::vector<char> written(static_cast<size_t>(y_rows), 0);
          int bad = 0, untouched = 0;
          for (const auto& g : groups) {
            for (int t = 0; t < g.count; ++t) {
              const int xr = g.x_row[t], yr = g.y_row[t];
              written[static_cast<size_t>(yr)] = 1;
              const float* xt = &x[static_cast<size_t>(xr * k)];
              for (int64_t r = 0; r < rows; ++r) {
                const int64_t m = g.matrix * rows + r;
                const float* gw = &gate.values[static_cast<size_t>(m * k)];
                const float* uw = &up.values[static_cast<size_t>(m * k)];
                const double gv = dot(gw, xt, k), eg = x8_bound(gw, xt, decoded[static_cast<size_t>(xr)].dx, k);
                double want = gv, bound = eg;
                if (mode == 0) {
                  const double uv = dot(uw, xt, k), eu = x8_bound(uw, xt, decoded[static_cast<size_t>(xr)].dx, k);
                  want = silu(gv) * uv;
                  bound = gated_bound(gv, uv, eg, eu);
                }
                const size_t out = static_cast<size_t>(yr * rows + r);
                if (mode == 2) {
                  const double v = bf16_value(got16[out]);
                  bad += !(std::abs(v - want) <= bound + std::abs(want) / 256.0);
                } else {
                  bad += !(std::abs(got[out] - (want + residual[out])) <= bound + 1e-6 * std::abs(want));
                }
              }
            }
          }
          for (int yr = 0; yr < y_rows; ++yr) {
            if (written[static_cast<size_t>(yr)]) continue;
            for (int64_t r = 0; r < rows; ++r) {
              const size_t out = static_cast<size_t>(yr * rows + r);
              untouched += mode == 2 ? got16[out] == 0xFFFF : std::isnan(got[out]);  // the poison
            }
          }
          CHECK(bad == 0);
          CHECK(untouched == (y_rows - used) * rows);
        }
      }
    }
  }
}

TEST_CASE("gemv on split-int8 x: 16-token Q4_K groups whose tokens span 1e-15 to 1e15, gated and plain") {
  // The fp16 tensor-core build (gemv_f16_kernel.cuh) scales each token by its own power of two before its fp16
  // planes; tokens 30 orders of magnitude apart in one group, one of them all zeros, must each keep the records'
  // bound, relative to its own size. Without the per-token scale the largest overflow fp16 and the smallest
  // flush to zero.
  Rng rng;
  const int64_t rows = 72, k = 1536;  // 5 tiles of 16 rows (the last partial), 6 super-blocks
  if (!takes_wide_groups(GgmlType::q4_k, rows, k)) {
    MESSAGE("16-token groups not taken here");
    return;
  }
  const int n = 16;
  const Matrix gate = random_matrix(GgmlType::q4_k, rows, k, rng);
  const Matrix up = random_matrix(GgmlType::q4_k, rows, k, rng);
  const auto dgate = upload(gate.bytes), dup = upload(up.bytes);
  auto x = random_vector(static_cast<size_t>(n * k), rng);
  for (int t = 0; t < n; ++t) {
    const double scale = t == 7 ? 0.0 : std::pow(10.0, -15.0 + 2.0 * t);  // 1e-15 .. 1e15
    for (int64_t i = 0; i < k; ++i) x[static_cast<size_t>(t * k + i)] *= static_cast<float>(scale);
  }
  const auto dx = upload(x);
  const auto rec = records_of(dx, n, static_cast<int>(k));
  const std::vector<DecodedRecord> decoded = decode_records(rec, n, k);
  latte::cuda::DeviceBuffer<float> x_nan(static_cast<size_t>(n * k));
  poison(x_nan.data(), x_nan.bytes());
  latte::cuda::GemvGroup group{.matrix = 0, .count = n, .x_row = {}, .y_row = {}};
  for (int t = 0; t < n; ++t) {
    group.x_row[t] = (t * 5) % n;  // shuffled
    group.y_row[t] = t;
  }
  const auto dgroups = upload(std::vector<latte::cuda::GemvGroup>{group});
  const auto dn = upload(std::vector<int32_t>{1});
  for (const bool gated : {true, false}) {
    CAPTURE(gated);
    latte::cuda::DeviceBuffer<float> y(static_cast<size_t>(n * rows));
    poison(y.data(), y.bytes());
    latte::cuda::gemv_quant({.type = GgmlType::q4_k,
                             .weight = dgate.data(),
                             .weight_up = gated ? dup.data() : nullptr,
                             .weight_bytes = static_cast<int64_t>(gate.bytes.size()),
                             .matrix_stride_bytes = static_cast<int64_t>(gate.bytes.size()),
                             .n_rows = static_cast<int>(rows),
                             .k = static_cast<int>(k),
                             .x = x_nan.data(),
                             .x_stride = k,
                             .y = y.data(),
                             .y_stride = rows,
                             .groups = dgroups.data(),
                             .n_groups = dn.data(),
                             .max_groups = 1,
                             .max_tokens_per_group = n,
                             .x_q = rec.data(),
                             .x_q_stride = latte::cuda::x_int8_record_bytes(k)},
                            nullptr);
    const auto got = download(y.data(), y.size());
    int bad = 0;
    for (int t = 0; t < n; ++t) {
      const int xr = group.x_row[t];
      const float* xt = &x[static_cast<size_t>(xr * k)];
      for (int64_t r = 0; r < rows; ++r) {
        const float* gw = &gate.values[static_cast<size_t>(r * k)];
        const float* uw = &up.values[static_cast<size_t>(r * k)];
        const double gv = dot(gw, xt, k), eg = x8_bound(gw, xt, decoded[static_cast<size_t>(xr)].dx, k);
        double want = gv, bound = eg;
        if (gated) {
          const double uv = dot(uw, xt, k), eu = x8_bound(uw, xt, decoded[static_cast<size_t>(xr)].dx, k);
          want = silu(gv) * uv;
          bound = 1.1 * eg * (std::abs(uv) + eu) + std::abs(silu(gv)) * eu;  // gated_bound without its 1e-6 floor
        }
        const double v = got[static_cast<size_t>(t * rows + r)];
        bad += !(std::abs(v - want) <= bound + 1e-6 * std::abs(want));
      }
    }
    CHECK(bad == 0);
  }
}
