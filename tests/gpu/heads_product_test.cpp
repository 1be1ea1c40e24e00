// heads_product (the mla backend's per-head W_UK / W_UV of a 2-16-row decode step) against float64 products, with
// every head's A inside a wider row (as q_nope inside q), padded weight rows, and poisoned outputs that must stay
// untouched past each output row's heads. Also built into the CPU emulation (tests/emulation).
#include <doctest/doctest.h>
#include <latte/error.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/heads_product.hpp"
#include "gpu/attention_test_support.hpp"

namespace {

using namespace latte::test::attention;
using latte::Error;

std::vector<float> uniform_floats(size_t n, Rng& rng) {
  std::vector<float> v(n);
  for (float& x : v) x = rng.uniform(-1.0f, 1.0f);
  return v;
}

struct Shape {
  int m, n, k, batch;
};

}  // namespace

TEST_CASE("heads_product: per-head fp32 products of 1-16 rows, fp32 and bf16 outputs, against float64") {
  Rng rng;
  CAPTURE(rng.seed);
  // k = 32 and 128: 8 lanes per row (1 and 4 float4), k = 192: 16 lanes (3), k = 256: 16 (4), k = 512: 32 (4); n
  // not a multiple of a block's rows (64, 32 or 16)
  const Shape shapes[] = {{1, 100, 128, 3}, {2, 512, 128, 2}, {5, 40, 32, 4},    {8, 70, 192, 3},
                          {9, 128, 512, 2}, {16, 33, 512, 3}, {16, 200, 256, 2}, {3, 17, 512, 1}};
  for (const Shape& s : shapes) {
    for (int outputs = 1; outputs <= 3; ++outputs) {  // 1: fp32, 2: bf16, 3: both
      CAPTURE(s.m);
      CAPTURE(s.n);
      CAPTURE(s.k);
      CAPTURE(outputs);
      REQUIRE(latte::cuda::heads_product_takes(s.m, s.k));
      const int64_t stride_a = s.k + 64, lda = static_cast<int64_t>(s.batch) * stride_a + 8;
      const int64_t ldw = s.k + 4, stride_w = static_cast<int64_t>(s.n) * ldw + 12;
      const int64_t ldc = static_cast<int64_t>(s.batch) * s.n + 3;  // a poisoned tail per output row
      const auto a = uniform_floats(static_cast<size_t>(s.m * lda), rng);
      const auto w = uniform_floats(static_cast<size_t>(s.batch * stride_w), rng);
      const auto da = upload(a);
      const auto dw = upload(w);
      latte::cuda::DeviceBuffer<float> c(static_cast<size_t>(s.m * ldc));
      latte::cuda::DeviceBuffer<uint16_t> c_bf16(static_cast<size_t>(s.m * ldc));
      poison(c.data(), c.bytes());
      poison(c_bf16.data(), c_bf16.bytes());
      latte::cuda::heads_product({.a = da.data(),
                                  .lda = lda,
                                  .stride_a = stride_a,
                                  .w = dw.data(),
                                  .ldw = ldw,
                                  .stride_w = stride_w,
                                  .c = outputs & 1 ? c.data() : nullptr,
                                  .c_bf16 = outputs & 2 ? reinterpret_cast<__nv_bfloat16*>(c_bf16.data()) : nullptr,
                                  .ldc = ldc,
                                  .stride_c = s.n,
                                  .m = s.m,
                                  .n = s.n,
                                  .k = s.k,
                                  .batch = s.batch},
                                 nullptr);
      const auto got = download(c.data(), c.size());
      const auto got_bf16 = download_as_float(c_bf16.data(), c_bf16.size(), true);
      int bad = 0, touched = 0;
      double worst = 0;
      for (int t = 0; t < s.m; ++t) {
        for (int b = 0; b < s.batch; ++b) {
          for (int j = 0; j < s.n; ++j) {
            double want = 0, magnitude = 0;
            for (int x = 0; x < s.k; ++x) {
              const double p = static_cast<double>(a[static_cast<size_t>(t * lda + b * stride_a + x)]) *
                               w[static_cast<size_t>(b * stride_w + j * ldw + x)];
              want += p;
              magnitude += std::abs(p);
            }
            // fp32 products summed in fp32: at most ~(k + 2) roundings of 2^-24 of the magnitude
            const double tol = (s.k + 2) * std::ldexp(magnitude, -24);
            const size_t at = static_cast<size_t>(t * ldc + b * s.n + j);
            if (outputs & 1) {
              const double err = std::abs(got[at] - want);
              worst = std::max(worst, err / (magnitude + 1e-30));
              bad += !(err <= tol);
            } else {
              touched += !std::isnan(got[at]);
            }
            if (outputs & 2) {
              // the fp32 sum rounded once to bf16: within half a bf16 unit (2^-9 relative) and the sum's error
              bad += !(std::abs(got_bf16[at] - want) <= tol + std::abs(want) * std::ldexp(1.0, -8));
            } else {
              touched += !std::isnan(got_bf16[at]);
            }
          }
        }
        for (int64_t j = static_cast<int64_t>(s.batch) * s.n; j < ldc; ++j) {
          touched += !std::isnan(got[static_cast<size_t>(t * ldc + j)]);
          touched += !std::isnan(got_bf16[static_cast<size_t>(t * ldc + j)]);
        }
      }
      CHECK_MESSAGE(bad == 0, bad << " outputs off float64 (largest error " << worst << " of the magnitude)");
      CHECK_MESSAGE(touched == 0, touched << " values written outside the asked outputs");
    }
  }
}

TEST_CASE("heads_product refuses shapes and operands it cannot take with latte::Error") {
  CHECK_FALSE(latte::cuda::heads_product_takes(17, 128));
  CHECK_FALSE(latte::cuda::heads_product_takes(0, 128));
  CHECK_FALSE(latte::cuda::heads_product_takes(2, 100));   // not a multiple of 32
  CHECK_FALSE(latte::cuda::heads_product_takes(2, 1024));  // 64 values per lane at 32 lanes
  CHECK_FALSE(latte::cuda::heads_product_takes(16, 1024));
  latte::cuda::DeviceBuffer<float> buf(4096);
  const latte::cuda::HeadsProductParams ok{.a = buf.data(),
                                           .lda = 128,
                                           .w = buf.data(),
                                           .ldw = 128,
                                           .stride_w = 0,
                                           .c = buf.data(),
                                           .ldc = 8,
                                           .m = 2,
                                           .n = 8,
                                           .k = 128,
                                           .batch = 1};
  latte::cuda::HeadsProductParams bad = ok;
  bad.m = 17;
  CHECK_THROWS_AS(latte::cuda::heads_product(bad, nullptr), Error);
  bad = ok;
  bad.c = nullptr;  // no output
  CHECK_THROWS_AS(latte::cuda::heads_product(bad, nullptr), Error);
  bad = ok;
  bad.a = buf.data() + 1;  // not 16-byte aligned
  CHECK_THROWS_AS(latte::cuda::heads_product(bad, nullptr), Error);
  bad = ok;
  bad.lda = 126;  // below k and not a multiple of 4
  CHECK_THROWS_AS(latte::cuda::heads_product(bad, nullptr), Error);
  bad = ok;
  bad.batch = 0;
  CHECK_THROWS_AS(latte::cuda::heads_product(bad, nullptr), Error);
}
