// Prefill GEMMs: the fused dequantize + mma.sync kernel (dense, gathered A rows, grouped tiles,
// residual) and the dequantize + cuBLAS fallback, against float64 references on the same
// bf16-rounded operands (tight) and on the unrounded fp32 operands (the bf16 precision contract).
#include <doctest/doctest.h>
#include <latte/error.hpp>

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include "cuda/gemm_bf16.hpp"
#include "cuda/gemm_quant.hpp"
#include "gpu_test_support.hpp"

using namespace latte;
using namespace latte::test::gpu;
using cuda::DeviceBuffer;

namespace {

std::vector<uint16_t> to_bf16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = fp32_to_bf16(v[i]);
  return b;
}

/// Dense-mode parameters: C[m, n] = A[m, k] W^T for W, `host`'s n rows of `type` uploaded at `w`, A bf16 at `a`.
cuda::QuantGemmParams dense_gemm_params(GgmlType type, const std::vector<uint8_t>& host, const void* w, int64_t n,
                                        int64_t k, const void* a, float* c, int64_t m) {
  return {.type = type,
          .weight = w,
          .weight_bytes = static_cast<int64_t>(host.size()),
          .n_rows = static_cast<int>(n),
          .k = static_cast<int>(k),
          .a = reinterpret_cast<const __nv_bfloat16*>(a),
          .lda = k,
          .c = c,
          .ldc = n,
          .m = static_cast<int>(m)};
}

/// C[m][n] = sum_k A[a_row(m)][k] W[n][k] in float64, optionally on bf16-rounded operands.
std::vector<double> reference_gemm(const std::vector<float>& a, const std::vector<float>& w, int64_t m, int64_t n,
                                   int64_t k, bool round_operands, const std::vector<int32_t>& a_rows = {}) {
  std::vector<double> c(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    const int64_t ar = a_rows.empty() ? i : a_rows[i];
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t x = 0; x < k; ++x) {
        const float av = a[ar * k + x], wv = w[j * k + x];
        s += round_operands ? static_cast<double>(round_bf16(av)) * round_bf16(wv) : static_cast<double>(av) * wv;
      }
      c[i * n + j] = s;
    }
  }
  return c;
}

int64_t gemm_k(GgmlType type) { return type_traits(type).block_values == 256 ? 768 : 1056; }

/// A strided-batched product's check: the heads' outputs C_b[i, j] read back from `out` (rows ldc apart, C_b at
/// b n), their float64 reference sum_x operand(A_b[i, x]) operand(W_b[j, x]), and how many values past the heads'
/// outputs (columns batch n .. ldc) were written (poisoned NaN when not).
struct BatchedCheck {
  std::vector<float> got;
  std::vector<double> want;
  int64_t touched_tail = 0;
};
template <class Operand>
BatchedCheck check_batched(const std::vector<float>& a, int64_t lda, int64_t stride_a, const std::vector<float>& w,
                           int64_t ldw, int64_t stride_w, const std::vector<float>& out, int64_t ldc, int m, int n,
                           int k, int batch, Operand operand) {
  BatchedCheck r;
  for (int i = 0; i < m; ++i) {
    for (int64_t j = static_cast<int64_t>(batch) * n; j < ldc; ++j) {
      r.touched_tail += !std::isnan(out[static_cast<size_t>(i * ldc + j)]);
    }
    for (int b = 0; b < batch; ++b) {
      for (int j = 0; j < n; ++j) {
        double s = 0;
        for (int x = 0; x < k; ++x) {
          s += static_cast<double>(operand(a[static_cast<size_t>(i * lda + b * stride_a + x)])) *
               operand(w[static_cast<size_t>(b * stride_w + j * ldw + x)]);
        }
        r.got.push_back(out[static_cast<size_t>(i * ldc + b * n + j)]);
        r.want.push_back(s);
      }
    }
  }
  return r;
}

}  // namespace

TEST_CASE("gemm_quant (fused dequantize + mma.sync) matches float64 for every fused type, m = 1, 17, 130") {
  auto rng = make_rng("gemm_quant");
  for (GgmlType type :
       {GgmlType::q4_0, GgmlType::q4_1, GgmlType::q5_0, GgmlType::q5_1, GgmlType::q8_0, GgmlType::q2_k, GgmlType::q3_k,
        GgmlType::q4_k, GgmlType::q5_k, GgmlType::q6_k, GgmlType::iq4_nl, GgmlType::iq4_xs, GgmlType::bf16}) {
    REQUIRE(cuda::gemm_quant_supports(type));
    const int64_t n = 200, k = gemm_k(type);
    const auto host = random_rows(type, n, k, rng);
    const auto wf = dequantize_reference(type, host, n, k);
    const auto dw = upload(host);
    for (int64_t m : {1, 17, 130}) {
      trace("gemm_quant " + type_label(type) + " m " + std::to_string(m));
      const auto a = random_floats(static_cast<size_t>(m * k), rng);
      const auto da = upload(to_bf16_bits(a));
      DeviceBuffer<float> c(static_cast<size_t>(m * n));
      poison(c.data(), c.bytes());
      cuda::gemm_quant(dense_gemm_params(type, host, dw.data(), n, k, da.data(), c.data(), m), nullptr);
      const auto got = download(c.data(), c.size());
      const std::string shape =
          type_label(type) + " m " + std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k);
      check_close("gemm_quant vs bf16-rounded operands", shape, compare(got, reference_gemm(a, wf, m, n, k, true)),
                  1e-5);
      check_close("gemm_quant vs fp32 operands", shape, compare(got, reference_gemm(a, wf, m, n, k, false)), 1e-2);
    }
  }
}

TEST_CASE("gemm_quant grouped tiles with gathered A rows and a residual") {
  auto rng = make_rng("gemm_quant grouped");
  for (GgmlType type : {GgmlType::q4_k, GgmlType::q8_0, GgmlType::q6_k, GgmlType::iq4_nl, GgmlType::iq4_xs}) {
    trace("gemm_quant grouped " + type_label(type));
    const int64_t n = 96, k = gemm_k(type), groups = 4, tokens = 50, slots = 140;
    const int64_t matrix_bytes = static_cast<int64_t>(row_bytes(type, k)) * n;
    const auto host = random_rows(type, n * groups, k, rng);
    const auto wf = dequantize_reference(type, host, n * groups, k);
    const auto dw = upload(host);
    const auto a = random_floats(static_cast<size_t>(tokens * k), rng);
    const auto da = upload(to_bf16_bits(a));
    // 140 slots: group 0 = slots [0, 70) (a full tile and one of 6 rows), group 2 = [70, 100), group 3 =
    // [100, 140) (a tile's second 32 rows part-filled: 40 rows); group 1 empty
    std::vector<int32_t> a_rows(slots);
    std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(tokens - 1));
    for (auto& r : a_rows) r = tok(rng);
    const std::vector<cuda::GemmTile> tiles = {{0, 0, 64}, {0, 64, 70}, {2, 70, 100}, {3, 100, 140}};
    const auto d_rows = upload(a_rows);
    const auto d_tiles = upload(tiles);
    const auto d_count = upload(std::vector<int32_t>{4});
    const auto residual = random_floats(static_cast<size_t>(slots * n), rng);
    auto c = upload(residual);
    cuda::gemm_quant({.type = type,
                      .weight = dw.data(),
                      .weight_bytes = static_cast<int64_t>(host.size()),
                      .matrix_stride_bytes = matrix_bytes,
                      .n_rows = static_cast<int>(n),
                      .k = static_cast<int>(k),
                      .a = reinterpret_cast<const __nv_bfloat16*>(da.data()),
                      .lda = k,
                      .a_rows = d_rows.data(),
                      .c = c.data(),
                      .ldc = n,
                      .residual = c.data(),
                      .tiles = d_tiles.data(),
                      .n_tiles = d_count.data(),
                      .max_tiles = 5},
                     nullptr);
    std::vector<double> want(static_cast<size_t>(slots * n));
    for (int64_t s = 0; s < slots; ++s) {
      const int64_t g = s < 70 ? 0 : s < 100 ? 2 : 3;
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t x = 0; x < k; ++x) {
          acc += static_cast<double>(round_bf16(a[a_rows[s] * k + x])) * round_bf16(wf[(g * n + j) * k + x]);
        }
        want[s * n + j] = acc + residual[s * n + j];
      }
    }
    check_close("gemm_quant grouped", type_label(type), compare(download(c.data(), c.size()), want), 1e-5);
  }
}

TEST_CASE("gemm_quant_via_bf16 (dequantize + cuBLAS) matches float64, including types without a fused kernel") {
  auto rng = make_rng("gemm_quant_via_bf16");
  cuda::BlasHandle blas;
  for (GgmlType type :
       {GgmlType::q4_k, GgmlType::mxfp4, GgmlType::iq4_nl, GgmlType::iq4_xs, GgmlType::f16, GgmlType::f32}) {
    trace("gemm_quant_via_bf16 " + type_label(type));
    const int64_t n = 200, m = 130, k = gemm_k(type);
    const auto host = random_rows(type, n, k, rng);
    const auto wf = dequantize_reference(type, host, n, k);
    const auto dw = upload(host);
    const auto a = random_floats(static_cast<size_t>(m * k), rng);
    const auto da = upload(to_bf16_bits(a));
    DeviceBuffer<__nv_bfloat16> scratch(static_cast<size_t>(n * k));
    DeviceBuffer<float> c(static_cast<size_t>(m * n));
    poison(c.data(), c.bytes());
    cuda::gemm_quant_via_bf16(blas, dense_gemm_params(type, host, dw.data(), n, k, da.data(), c.data(), m),
                              scratch.data(), scratch.size(), nullptr);
    check_close("gemm_quant_via_bf16", type_label(type),
                compare(download(c.data(), c.size()), reference_gemm(a, wf, m, n, k, true)), 1e-5);
  }
}

TEST_CASE("gemm_quant_over_bf16 multiplies the copy it is given, accumulates into C and refuses other shapes") {
  // A matrix's bf16 copy (a sign-flipped one: the product must come from the copy, not from p.weight) and a
  // residual of C itself; against float64 of the copy's values.
  auto rng = make_rng("gemm_quant_over_bf16");
  cuda::BlasHandle blas;
  const GgmlType type = GgmlType::q4_k;
  const int64_t n = 96, k = gemm_k(type), ldw = cuda::bf16_weight_stride(k);
  const auto host = random_rows(type, n, k, rng);
  const auto wf = dequantize_reference(type, host, n, k);
  std::vector<float> flipped(static_cast<size_t>(n * ldw), 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t x = 0; x < k; ++x) flipped[j * ldw + x] = -round_bf16(wf[j * k + x]);
  }
  const auto dw = upload(host);
  const auto dcopy = upload(to_bf16_bits(flipped));
  for (int m : {3, 9, 40}) {
    trace("gemm_quant_over_bf16 rows " + std::to_string(m));
    const auto a = random_floats(static_cast<size_t>(m * k), rng);
    const auto residual = random_floats(static_cast<size_t>(m * n), rng);
    const auto da = upload(to_bf16_bits(a));
    auto dc = upload(residual);
    cuda::QuantGemmParams p = dense_gemm_params(type, host, dw.data(), n, k, da.data(), dc.data(), m);
    p.residual = dc.data();
    cuda::gemm_quant_over_bf16(blas, p, reinterpret_cast<const __nv_bfloat16*>(dcopy.data()), nullptr);
    std::vector<double> want(static_cast<size_t>(m * n));
    for (int i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double acc = residual[static_cast<size_t>(i * n + j)];
        for (int64_t x = 0; x < k; ++x) acc += static_cast<double>(round_bf16(a[i * k + x])) * flipped[j * ldw + x];
        want[static_cast<size_t>(i * n + j)] = acc;
      }
    }
    check_close("gemm_quant_over_bf16", type_label(type), compare(download(dc.data(), dc.size()), want), 1e-5);
    // refused before anything is enqueued: grouped tiles, a row gather, a residual other than C
    cuda::QuantGemmParams bad = p;
    DeviceBuffer<float> other(static_cast<size_t>(m * n));
    bad.residual = other.data();
    CHECK_THROWS_AS(
        cuda::gemm_quant_over_bf16(blas, bad, reinterpret_cast<const __nv_bfloat16*>(dcopy.data()), nullptr), Error);
    CHECK_THROWS_AS(cuda::gemm_quant_via_bf16(blas, bad, nullptr, 0, nullptr), Error);
    bad = p;
    DeviceBuffer<int32_t> rows(static_cast<size_t>(m));
    bad.a_rows = rows.data();
    CHECK_THROWS_AS(
        cuda::gemm_quant_over_bf16(blas, bad, reinterpret_cast<const __nv_bfloat16*>(dcopy.data()), nullptr), Error);
  }
}

TEST_CASE("gemm_bf16_batched writes each head's bf16 product at its offset and nothing between") {
  // The mla decompression's shape in small: A rows of a wider cache row (lda > k, shared by every batch
  // entry), W_b every (n + gap_w) rows of one matrix, C_b at b * (n + gap_c) of each output row.
  auto rng = make_rng("gemm_bf16_batched");
  cuda::BlasHandle blas;
  const int m = 37, n = 24, k = 64, batch = 3, gap_w = 8, gap_c = 8;
  const int64_t lda = k + 16, ldw = k, stride_w = static_cast<int64_t>(n + gap_w) * ldw;
  const int64_t stride_c = n + gap_c, ldc = batch * stride_c;
  const auto a = random_floats(static_cast<size_t>(m * lda), rng);
  const auto w = random_floats(static_cast<size_t>(batch * stride_w), rng);
  const auto da = upload(to_bf16_bits(a));
  const auto dw = upload(to_bf16_bits(w));
  DeviceBuffer<__nv_bfloat16> c(static_cast<size_t>(m * ldc));
  poison(c.data(), c.bytes());
  cuda::gemm_bf16_batched(blas,
                          {.a = reinterpret_cast<const __nv_bfloat16*>(da.data()),
                           .lda = lda,
                           .w = reinterpret_cast<const __nv_bfloat16*>(dw.data()),
                           .ldw = ldw,
                           .stride_w = stride_w,
                           .c = c.data(),
                           .ldc = ldc,
                           .stride_c = stride_c,
                           .m = m,
                           .n = n,
                           .k = k,
                           .batch = batch},
                          nullptr);
  const auto got_bits = download(reinterpret_cast<const uint16_t*>(c.data()), c.size());
  std::vector<float> got;
  std::vector<double> want;
  int64_t touched_gap = 0;
  for (int i = 0; i < m; ++i) {
    for (int b = 0; b < batch; ++b) {
      for (int j = 0; j < stride_c; ++j) {
        const uint16_t bits = got_bits[static_cast<size_t>(i * ldc + b * stride_c + j)];
        if (j >= n) {  // between heads: still the poison
          touched_gap += bits != 0xFFFF;
          continue;
        }
        double s = 0;
        for (int x = 0; x < k; ++x) {
          s += static_cast<double>(round_bf16(a[static_cast<size_t>(i * lda + x)])) *
               round_bf16(w[static_cast<size_t>(b * stride_w + j * ldw + x)]);
        }
        got.push_back(bf16_to_float(bits));
        want.push_back(s);
      }
    }
  }
  CHECK_MESSAGE(touched_gap == 0, touched_gap << " values between the heads' outputs were written");
  // fp32 sums of bf16 products, rounded to bf16 once: the bf16 half-ulp (2^-9) relative
  check_close("gemm_bf16_batched", "37 x 3 x 24, k 64", compare(got, want), 4e-3);
  CHECK_THROWS_AS(cuda::gemm_bf16_batched(blas,
                                          {.a = reinterpret_cast<const __nv_bfloat16*>(da.data()),
                                           .lda = lda,
                                           .w = reinterpret_cast<const __nv_bfloat16*>(dw.data()),
                                           .ldw = ldw,
                                           .c = c.data(),
                                           .ldc = n - 1,
                                           .m = m,
                                           .n = n,
                                           .k = k,
                                           .batch = batch},
                                          nullptr),
                  Error);
}

TEST_CASE("gemm_bf16_batched with an A per head and fp32 output (W_UK / W_UV of a decode step)") {
  // C_b[m, n] = A_b W_b^T with A_b at b * k of each A row (lda = batch k), C_b at b * n of each fp32 output
  // row (ldc = batch n + 5: a poisoned tail per row that must stay)
  auto rng = make_rng("gemm_bf16_batched_f32");
  cuda::BlasHandle blas;
  const int m = 29, n = 40, k = 48, batch = 4;
  const int64_t lda = static_cast<int64_t>(batch) * k, ldw = k, stride_w = static_cast<int64_t>(n) * ldw;
  const int64_t ldc = static_cast<int64_t>(batch) * n + 5;
  const auto a = random_floats(static_cast<size_t>(m * lda), rng);
  const auto w = random_floats(static_cast<size_t>(batch * stride_w), rng);
  const auto da = upload(to_bf16_bits(a));
  const auto dw = upload(to_bf16_bits(w));
  DeviceBuffer<float> c(static_cast<size_t>(m * ldc));
  poison(c.data(), c.bytes());
  cuda::Bf16BatchedGemmParams p{.a = reinterpret_cast<const __nv_bfloat16*>(da.data()),
                                .lda = lda,
                                .stride_a = k,
                                .w = reinterpret_cast<const __nv_bfloat16*>(dw.data()),
                                .ldw = ldw,
                                .stride_w = stride_w,
                                .c_f32 = c.data(),
                                .ldc = ldc,
                                .stride_c = n,
                                .m = m,
                                .n = n,
                                .k = k,
                                .batch = batch};
  cuda::gemm_bf16_batched(blas, p, nullptr);
  const auto r = check_batched(a, lda, k, w, ldw, stride_w, download(c.data(), c.size()), ldc, m, n, k, batch,
                               [](float v) { return round_bf16(v); });
  CHECK_MESSAGE(r.touched_tail == 0, r.touched_tail << " values past the heads' outputs were written");
  // exact bf16 products summed in fp32 over k = 48
  check_close("gemm_bf16_batched fp32", "29 x 4 x 40, k 48", compare(r.got, r.want), 1e-5);
  cuda::Bf16BatchedGemmParams both = p;
  both.c = reinterpret_cast<__nv_bfloat16*>(c.data());  // two outputs: rejected
  CHECK_THROWS_AS(cuda::gemm_bf16_batched(blas, both, nullptr), Error);
}

TEST_CASE("gemm_f32_batched keeps fp32 products: W_UK / W_UV of a decode step over fp32 weight copies") {
  // C_b[m, n] = A_b W_b^T with A_b at b * a_head of each A row (token stride lda: a head's P values then R others
  // skipped, as q_nope inside q), C_b at b * n of each output row (ldc = batch n + 3: a poisoned tail per row)
  auto rng = make_rng("gemm_f32_batched");
  cuda::BlasHandle blas;
  for (const int m : {2, 7, 16}) {
    CAPTURE(m);
    const int n = 96, k = 128, batch = 5, a_head = k + 64;
    const int64_t lda = static_cast<int64_t>(batch) * a_head, ldw = k + 8, stride_w = static_cast<int64_t>(n) * ldw;
    const int64_t ldc = static_cast<int64_t>(batch) * n + 3;
    const auto a = random_floats(static_cast<size_t>(m * lda), rng);
    const auto w = random_floats(static_cast<size_t>(batch * stride_w), rng);
    const auto da = upload(a);
    const auto dw = upload(w);
    DeviceBuffer<float> c(static_cast<size_t>(m * ldc));
    poison(c.data(), c.bytes());
    const cuda::F32BatchedGemmParams p{.a = da.data(),
                                       .lda = lda,
                                       .stride_a = a_head,
                                       .w = dw.data(),
                                       .ldw = ldw,
                                       .stride_w = stride_w,
                                       .c = c.data(),
                                       .ldc = ldc,
                                       .stride_c = n,
                                       .m = m,
                                       .n = n,
                                       .k = k,
                                       .batch = batch};
    cuda::gemm_f32_batched(blas, p, nullptr);
    const auto r = check_batched(a, lda, a_head, w, ldw, stride_w, download(c.data(), c.size()), ldc, m, n, k, batch,
                                 [](float v) { return v; });
    CHECK_MESSAGE(r.touched_tail == 0, r.touched_tail << " values past the heads' outputs were written");
    // fp32 products and sums over k = 128 (a TF32 rounding of the inputs would be ~1e-3 off)
    check_close("gemm_f32_batched", "m x 5 x 96, k 128", compare(r.got, r.want), 2e-6);
  }
  DeviceBuffer<float> buf(1024);
  const cuda::F32BatchedGemmParams ok{.a = buf.data(),
                                      .lda = 16,
                                      .w = buf.data(),
                                      .ldw = 16,
                                      .c = buf.data(),
                                      .ldc = 4,
                                      .m = 2,
                                      .n = 4,
                                      .k = 16,
                                      .batch = 1};
  cuda::F32BatchedGemmParams bad = ok;
  bad.lda = 8;  // < k
  CHECK_THROWS_AS(cuda::gemm_f32_batched(blas, bad, nullptr), Error);
  bad = ok;
  bad.batch = 0;
  CHECK_THROWS_AS(cuda::gemm_f32_batched(blas, bad, nullptr), Error);
}

TEST_CASE("gemm_quant rejects violated preconditions with latte::Error") {
  DeviceBuffer<uint8_t> buf(1 << 16);
  const auto* a = reinterpret_cast<const __nv_bfloat16*>(buf.data());
  auto* c = reinterpret_cast<float*>(buf.data());
  CHECK_THROWS_AS(cuda::gemm_quant({.type = GgmlType::mxfp4,
                                    .weight = buf.data(),
                                    .weight_bytes = 1 << 16,
                                    .n_rows = 4,
                                    .k = 64,
                                    .a = a,
                                    .lda = 64,
                                    .c = c,
                                    .ldc = 4,
                                    .m = 4},
                                   nullptr),
                  Error);
  CHECK_THROWS_AS(cuda::gemm_quant({.type = GgmlType::q4_k,
                                    .weight = buf.data(),
                                    .weight_bytes = 1 << 16,
                                    .n_rows = 4,
                                    .k = 128,
                                    .a = a,
                                    .lda = 128,
                                    .c = c,
                                    .ldc = 4,
                                    .m = 4},
                                   nullptr),
                  Error);
  CHECK_THROWS_AS(cuda::gemm_quant({.type = GgmlType::q8_0,
                                    .weight = buf.data() + 2,
                                    .weight_bytes = 1 << 15,
                                    .n_rows = 4,
                                    .k = 64,
                                    .a = a,
                                    .lda = 64,
                                    .c = c,
                                    .ldc = 4,
                                    .m = 4},
                                   nullptr),
                  Error);
}
