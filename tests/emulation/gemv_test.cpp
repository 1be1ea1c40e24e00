// The GEMV kernels (src/cuda/gemv_kernel.cuh) on the CPU emulation, against products of weights that
// latte's CPU quantizer encoded and its CPU decoder (dequantize_row) decoded back, summed in double.
// Covers what the launcher picks on its own: whole x rows per block with the grid walking several row
// tiles (more row groups than one wave of blocks holds), per-warp x for long rows, split-K warps for
// short matrices, 1 / 2 / 3 / 8 tokens, gated, residual, gathered and bf16-output modes.
#include <doctest/doctest.h>
#include <latte/quant.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/gemv_quant.hpp"
#include "gpu/attention_test_support.hpp"
#include "gpu/gemv_test_support.hpp"

namespace {

using latte::GgmlType;
using namespace latte::test::attention;
using namespace latte::test::gemv;

/// Largest |got - want| over the largest |want| (NaN: a value never written fails).
double relative_error(const std::vector<float>& got, const std::vector<double>& want) {
  double err = 0.0, scale = 1e-30;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = std::abs(static_cast<double>(got[i]) - want[i]);
    err = std::isnan(d) ? INFINITY : std::max(err, d);
    scale = std::max(scale, std::abs(want[i]));
  }
  return err / scale;
}

}  // namespace

TEST_CASE("emulated gemv: dense rows for K-quant, legacy and IQ4 types, 1-8 tokens, row tiles walked per block") {
  Rng rng;
  struct Shape {
    int64_t rows, k;
  };
  // 4400 x 2048: 2200 row groups in 550 tiles of 4 warps, more than one wave of 132 x 4 blocks, so
  // blocks walk two tiles; 37 x 1280: a partial last step and split-K warps; 9 x 12288: too long
  // for x rows at 2 tokens (per-warp x then).
  for (GgmlType type :
       {GgmlType::q4_k, GgmlType::q6_k, GgmlType::q8_0, GgmlType::q5_0, GgmlType::iq4_nl, GgmlType::iq4_xs}) {
    for (const Shape s : {Shape{4400, 2048}, Shape{37, 1280}, Shape{9, 12288}}) {
      if ((type == GgmlType::iq4_nl || type == GgmlType::iq4_xs) && s.rows > 1000) continue;  // (emulation time)
      if (s.k % latte::type_traits(type).block_values != 0) continue;
      const Matrix w = random_matrix(type, s.rows, s.k, rng);
      const auto dw = upload(w.bytes);
      for (int tokens : {1, 2, 3, 8}) {
        if (s.rows > 1000 && tokens == 3) continue;  // (emulation time)
        CAPTURE(latte::type_name(type));
        CAPTURE(s.rows);
        CAPTURE(s.k);
        CAPTURE(tokens);
        const auto x = random_vector(static_cast<size_t>(tokens * s.k), rng);
        const auto dx = upload(x);
        latte::cuda::DeviceBuffer<float> y(static_cast<size_t>(tokens * s.rows));
        poison(y.data(), y.bytes());
        latte::cuda::gemv_quant({.type = type,
                                 .weight = dw.data(),
                                 .weight_bytes = static_cast<int64_t>(w.bytes.size()),
                                 .n_rows = static_cast<int>(s.rows),
                                 .k = static_cast<int>(s.k),
                                 .x = dx.data(),
                                 .x_stride = s.k,
                                 .y = y.data(),
                                 .y_stride = s.rows,
                                 .n_tokens = tokens},
                                nullptr);
        std::vector<double> want(static_cast<size_t>(tokens * s.rows));
        for (int t = 0; t < tokens; ++t)
          for (int64_t r = 0; r < s.rows; ++r)
            want[static_cast<size_t>(t * s.rows + r)] = dot(&w.values[r * s.k], &x[t * s.k], s.k);
        CHECK(relative_error(download(y.data(), y.size()), want) <= 1e-5);
      }
    }
  }
}

TEST_CASE("emulated gemv: gated with residual, gathered groups, bf16 output") {
  Rng rng;
  const int64_t rows = 300, k = 2048, experts = 3;
  const GgmlType type = GgmlType::q4_k;
  const Matrix gate = random_matrix(type, rows * experts, k, rng);
  const Matrix up = random_matrix(type, rows * experts, k, rng);
  const auto dgate = upload(gate.bytes), dup = upload(up.bytes);
  const int64_t matrix_bytes = static_cast<int64_t>(latte::row_bytes(type, k)) * rows;
  // Two groups: expert 2 takes tokens 1 and 3 (rows 0 and 1 of y), expert 0 takes token 0 (row 2).
  const std::vector<latte::cuda::GemvGroup> groups = {{.matrix = 2, .count = 2, .x_row = {1, 3}, .y_row = {0, 1}},
                                                      {.matrix = 0, .count = 1, .x_row = {0}, .y_row = {2}}};
  const std::vector<int32_t> n_groups = {2};
  const auto dgroups = upload(groups);
  const auto dn = upload(n_groups);
  const auto x = random_vector(static_cast<size_t>(4 * k), rng);
  const auto residual = random_vector(static_cast<size_t>(3 * rows), rng);
  const auto dx = upload(x), dres = upload(residual);
  latte::cuda::DeviceBuffer<float> y(static_cast<size_t>(3 * rows));
  poison(y.data(), y.bytes());
  latte::cuda::GemvParams p{.type = type,
                            .weight = dgate.data(),
                            .weight_up = dup.data(),
                            .weight_bytes = static_cast<int64_t>(gate.bytes.size()),
                            .matrix_stride_bytes = matrix_bytes,
                            .n_rows = static_cast<int>(rows),
                            .k = static_cast<int>(k),
                            .x = dx.data(),
                            .x_stride = k,
                            .y = y.data(),
                            .y_stride = rows,
                            .residual = dres.data(),
                            .groups = dgroups.data(),
                            .n_groups = dn.data(),
                            .max_groups = 3,  // one more than used: its blocks leave at once
                            .max_tokens_per_group = 2};
  latte::cuda::gemv_quant(p, nullptr);
  std::vector<double> want(static_cast<size_t>(3 * rows));
  for (const auto& g : groups) {
    for (int t = 0; t < g.count; ++t) {
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t row = g.matrix * rows + r;
        const float* xt = &x[static_cast<size_t>(g.x_row[t] * k)];
        const size_t out = static_cast<size_t>(g.y_row[t] * rows + r);
        want[out] = silu(dot(&gate.values[row * k], xt, k)) * dot(&up.values[row * k], xt, k) + residual[out];
      }
    }
  }
  CHECK(relative_error(download(y.data(), y.size()), want) <= 1e-5);

  // the same products without the residual, written as bf16 (nearest even of the fp32 result)
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
  for (size_t i = 0; i < f32.size(); ++i) differ += b16[i] != bf16_bits(f32[i]);
  CHECK(differ == 0);
}
