// GEMV, dequantize-to-bf16/fp32 and embedding lookup against the CPU reference (dequantize_row and a
// float64 dot product), on fresh random rows of every GPU type, with poisoned outputs and shapes that
// are not multiples of the tiles.
#include <doctest/doctest.h>
#include <latte/error.hpp>

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "cuda/dequantize.hpp"
#include "cuda/embedding.hpp"
#include "cuda/gemv_quant.hpp"
#include "gpu_test_support.hpp"

using namespace latte;
using namespace latte::test::gpu;
using cuda::DeviceBuffer;

namespace {

/// K that is not a multiple of the 1024-value step, for the type's block size.
int64_t odd_k(GgmlType type) { return type_traits(type).block_values == 256 ? 1280 : 1056; }

/// Uploads `bytes` at a 2-byte offset inside a larger buffer so that quantized rows start misaligned.
struct MisalignedWeights {
  DeviceBuffer<uint8_t> buffer;
  const uint8_t* data = nullptr;
  int64_t bytes = 0;
  MisalignedWeights(const std::vector<uint8_t>& host, size_t offset) : buffer(host.size() + 16) {
    LATTE_CUDA_CHECK(cudaMemcpy(buffer.data() + offset, host.data(), host.size(), cudaMemcpyHostToDevice));
    data = buffer.data() + offset;
    bytes = static_cast<int64_t>(host.size());
  }
};

bool is_float_type(GgmlType t) { return t == GgmlType::f32 || t == GgmlType::f16 || t == GgmlType::bf16; }

}  // namespace

TEST_CASE("dequantize_rows matches dequantize_row for every type, bf16 and fp32 outputs, misaligned rows") {
  auto rng = make_rng("dequantize_rows");
  // 37 rows of two steps of 1024 values (a warp's), the second partial; 5 rows of four, the last partial
  for (GgmlType type : gpu_types()) {
    for (const auto& [rows, k] : {std::pair<int64_t, int64_t>{37, odd_k(type)}, {5, 2 * odd_k(type) + 1024}}) {
      const auto host = random_rows(type, rows, k, rng);
      const auto ref = dequantize_reference(type, host, rows, k);
      const MisalignedWeights w(host, is_float_type(type) ? 0 : 2);
      const std::string shape = type_label(type) + " " + std::to_string(rows) + "x" + std::to_string(k);
      trace("dequantize_rows " + shape);
      for (auto out_type : {cuda::DequantOut::bf16, cuda::DequantOut::f32}) {
        const size_t elem = out_type == cuda::DequantOut::bf16 ? 2 : 4;
        DeviceBuffer<uint8_t> out(static_cast<size_t>(rows * k) * elem);
        poison(out.data(), out.bytes());
        cuda::dequantize_rows({.type = type,
                               .weight = w.data,
                               .weight_bytes = w.bytes,
                               .n_source_rows = static_cast<int>(rows),
                               .n_rows = static_cast<int>(rows),
                               .k = static_cast<int>(k),
                               .out = out.data(),
                               .out_stride = k,
                               .out_type = out_type},
                              nullptr);
        const auto raw = download(out.data(), out.size());
        std::vector<float> got(static_cast<size_t>(rows * k));
        std::vector<double> want(got.size());
        for (size_t i = 0; i < got.size(); ++i) {
          if (elem == 2) {
            uint16_t bits;
            std::memcpy(&bits, raw.data() + 2 * i, 2);
            got[i] = bf16_to_float(bits);
            want[i] = round_bf16(ref[i]);
          } else {
            std::memcpy(&got[i], raw.data() + 4 * i, 4);
            want[i] = ref[i];
          }
        }
        // bf16: one rounding of an fp32 value that may differ from the CPU's by 1 ulp (fused multiply-add)
        check_close(elem == 2 ? "dequantize_rows bf16" : "dequantize_rows f32", shape, compare(got, want),
                    elem == 2 ? 2e-3 : 1e-6);
      }
    }
  }
}

TEST_CASE("embedding_lookup dequantizes the selected rows and validate_token_ids rejects bad ids") {
  auto rng = make_rng("embedding_lookup");
  for (GgmlType type : {GgmlType::q4_k, GgmlType::q6_k, GgmlType::q8_0, GgmlType::f16}) {
    const int vocab = 301, hidden = 512;
    const auto host = random_rows(type, vocab, hidden, rng);
    const auto ref = dequantize_reference(type, host, vocab, hidden);
    trace("embedding_lookup " + type_label(type));
    const std::vector<int32_t> ids = {0, 300, 17, 17, 299, 5, 123};
    cuda::validate_token_ids(ids, vocab);
    const auto table = upload(host);
    const auto d_ids = upload(ids);
    DeviceBuffer<float> out(ids.size() * hidden);
    poison(out.data(), out.bytes());
    cuda::embedding_lookup({.type = type,
                            .table = table.data(),
                            .table_bytes = static_cast<int64_t>(host.size()),
                            .vocab = vocab,
                            .hidden = hidden,
                            .ids = d_ids.data(),
                            .n_tokens = static_cast<int>(ids.size()),
                            .out = out.data(),
                            .out_stride = hidden},
                           nullptr);
    const auto got = download(out.data(), out.size());
    std::vector<double> want(got.size());
    for (size_t t = 0; t < ids.size(); ++t)
      for (int c = 0; c < hidden; ++c) want[t * hidden + c] = ref[static_cast<size_t>(ids[t]) * hidden + c];
    check_close("embedding_lookup", type_label(type), compare(got, want), 1e-6);
  }
  const std::vector<int32_t> bad = {1, 2, 301};
  CHECK_THROWS_AS(cuda::validate_token_ids(bad, 301), Error);
  const std::vector<int32_t> negative = {-1};
  CHECK_THROWS_AS(cuda::validate_token_ids(negative, 301), Error);
}

namespace {

/// y[t][r] = sum_k W[r][k] x[t][k] in float64.
std::vector<double> reference_gemv(const std::vector<float>& w, const std::vector<float>& x, int64_t rows, int64_t k,
                                   int tokens) {
  std::vector<double> y(static_cast<size_t>(tokens * rows));
  for (int t = 0; t < tokens; ++t)
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0;
      for (int64_t i = 0; i < k; ++i) s += static_cast<double>(w[r * k + i]) * x[t * k + i];
      y[t * rows + r] = s;
    }
  return y;
}

double silu(double g) { return g / (1.0 + std::exp(-g)); }

/// y[t] = W x[t] for `tokens` dense rows (x and y packed: strides k and rows).
cuda::GemvParams dense_gemv(GgmlType type, const MisalignedWeights& w, int64_t rows, int64_t k, const float* x,
                            float* y, int tokens) {
  return {.type = type,
          .weight = w.data,
          .weight_bytes = w.bytes,
          .n_rows = static_cast<int>(rows),
          .k = static_cast<int>(k),
          .x = x,
          .x_stride = k,
          .y = y,
          .y_stride = rows,
          .n_tokens = tokens};
}

}  // namespace

TEST_CASE("gemv_quant matches the fp32 reference for every type and 1, 2, 3, 8 tokens") {
  auto rng = make_rng("gemv_quant");
  for (GgmlType type : gpu_types()) {
    const int64_t rows = 1007, k = odd_k(type);
    const auto host = random_rows(type, rows, k, rng);
    const auto wf = dequantize_reference(type, host, rows, k);
    const MisalignedWeights w(host, is_float_type(type) ? 0 : 2);
    for (int tokens : {1, 2, 3, 8}) {
      trace("gemv_quant " + type_label(type) + " tokens " + std::to_string(tokens));
      const auto x = random_floats(static_cast<size_t>(tokens * k), rng);
      const auto dx = upload(x);
      DeviceBuffer<float> y(static_cast<size_t>(tokens * rows));
      poison(y.data(), y.bytes());
      cuda::gemv_quant(dense_gemv(type, w, rows, k, dx.data(), y.data(), tokens), nullptr);
      const std::string shape = type_label(type) + " rows " + std::to_string(rows) + " k " + std::to_string(k) +
                                " tokens " + std::to_string(tokens);
      check_close("gemv_quant", shape, compare(download(y.data(), y.size()), reference_gemv(wf, x, rows, k, tokens)),
                  1e-5);
    }
  }
}

TEST_CASE("gemv_quant over a tall matrix: blocks walk several row tiles; bf16 output") {
  // 24001 rows of 2048: more row tiles than the grid holds resident blocks, so with x staged per block
  // each block walks several tiles; the odd row count leaves a half-filled last tile.
  auto rng = make_rng("gemv_quant tall");
  for (GgmlType type : {GgmlType::q4_k, GgmlType::q6_k, GgmlType::q8_0}) {
    const int64_t rows = 24001, k = 2048;
    const auto host = random_rows(type, rows, k, rng);
    const auto wf = dequantize_reference(type, host, rows, k);
    const MisalignedWeights w(host, 2);
    for (int tokens : {1, 2, 8}) {
      trace("gemv_quant tall " + type_label(type) + " tokens " + std::to_string(tokens));
      const auto x = random_floats(static_cast<size_t>(tokens * k), rng);
      const auto dx = upload(x);
      const auto want = reference_gemv(wf, x, rows, k, tokens);
      const std::string shape =
          type_label(type) + " rows " + std::to_string(rows) + " tokens " + std::to_string(tokens);
      DeviceBuffer<float> y(static_cast<size_t>(tokens * rows));
      poison(y.data(), y.bytes());
      cuda::GemvParams p = dense_gemv(type, w, rows, k, dx.data(), y.data(), tokens);
      cuda::gemv_quant(p, nullptr);
      const auto fp32 = download(y.data(), y.size());
      check_close("gemv_quant", shape, compare(fp32, want), 1e-5);
      // the same sums written as bf16: exactly the fp32 results rounded to nearest even
      DeviceBuffer<__nv_bfloat16> yb(static_cast<size_t>(tokens * rows));
      poison(yb.data(), yb.bytes());
      p.y = nullptr;
      p.y_bf16 = yb.data();
      cuda::gemv_quant(p, nullptr);
      const auto got = download(yb.data(), yb.size());
      size_t bad = 0, first = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        if (!(__bfloat162float(got[i]) == round_bf16(fp32[i])) && bad++ == 0) first = i;
      }
      CHECK_MESSAGE(bad == 0, "gemv_quant bf16 " << shape << ": " << bad
                                                 << " values differ from round_bf16(fp32), first at " << first << ": "
                                                 << __bfloat162float(got[first]) << " vs " << fp32[first]);
    }
  }
  DeviceBuffer<float> y(16);
  DeviceBuffer<__nv_bfloat16> yb(16);
  const auto x = upload(std::vector<float>(256, 1.0f));
  const std::vector<uint8_t> weights(static_cast<size_t>(row_bytes(GgmlType::q8_0, 256)) * 16);
  const auto dw = upload(weights);
  // exactly one of y and y_bf16
  CHECK_THROWS_AS(cuda::gemv_quant({.type = GgmlType::q8_0,
                                    .weight = dw.data(),
                                    .weight_bytes = static_cast<int64_t>(weights.size()),
                                    .n_rows = 16,
                                    .k = 256,
                                    .x = x.data(),
                                    .x_stride = 256,
                                    .y = y.data(),
                                    .y_bf16 = yb.data(),
                                    .y_stride = 16},
                                   nullptr),
                  Error);
}

TEST_CASE("gemv_quant gated, residual and gathered (per-expert group) modes") {
  auto rng = make_rng("gemv_quant modes");
  for (GgmlType type : {GgmlType::q4_k, GgmlType::q5_0, GgmlType::q6_k, GgmlType::q8_0, GgmlType::bf16}) {
    const int64_t rows = 203, k = odd_k(type), experts = 3;
    const int64_t matrix_bytes = static_cast<int64_t>(row_bytes(type, k)) * rows;
    const auto gate_host = random_rows(type, rows * experts, k, rng);
    const auto up_host = random_rows(type, rows * experts, k, rng);
    const auto gate = dequantize_reference(type, gate_host, rows * experts, k);
    const auto up = dequantize_reference(type, up_host, rows * experts, k);
    const auto dg = upload(gate_host);
    const auto du = upload(up_host);
    const int tokens = 5;
    const auto x = random_floats(static_cast<size_t>(tokens * k), rng);
    const auto dx = upload(x);
    const std::string shape = type_label(type) + " rows " + std::to_string(rows) + " k " + std::to_string(k);
    trace("gemv_quant modes " + shape);

    // residual, dense: y = W0 x + r
    const auto residual = random_floats(static_cast<size_t>(tokens * rows), rng);
    auto dy = upload(residual);
    cuda::gemv_quant({.type = type,
                      .weight = dg.data(),
                      .weight_bytes = matrix_bytes,
                      .n_rows = static_cast<int>(rows),
                      .k = static_cast<int>(k),
                      .x = dx.data(),
                      .x_stride = k,
                      .y = dy.data(),
                      .y_stride = rows,
                      .residual = dy.data(),
                      .n_tokens = tokens},
                     nullptr);
    auto want = reference_gemv(gate, x, rows, k, tokens);
    for (size_t i = 0; i < want.size(); ++i) want[i] += residual[i];
    check_close("gemv_quant residual", shape, compare(download(dy.data(), dy.size()), want), 1e-5);

    // gathered + gated: group 0 = expert 2 with tokens {4, 0}, group 1 = expert 0 with token {3}
    std::vector<cuda::GemvGroup> groups(2);
    groups[0] = {.matrix = 2, .count = 2, .x_row = {4, 0}, .y_row = {0, 1}};
    groups[1] = {.matrix = 0, .count = 1, .x_row = {3}, .y_row = {2}};
    const auto dgroups = upload(groups);
    const auto dcount = upload(std::vector<int32_t>{2});
    DeviceBuffer<float> out(3 * rows);
    poison(out.data(), out.bytes());
    cuda::gemv_quant({.type = type,
                      .weight = dg.data(),
                      .weight_up = du.data(),
                      .weight_bytes = static_cast<int64_t>(gate_host.size()),
                      .matrix_stride_bytes = matrix_bytes,
                      .n_rows = static_cast<int>(rows),
                      .k = static_cast<int>(k),
                      .x = dx.data(),
                      .x_stride = k,
                      .y = out.data(),
                      .y_stride = rows,
                      .groups = dgroups.data(),
                      .n_groups = dcount.data(),
                      .max_groups = 3,
                      .max_tokens_per_group = 2},
                     nullptr);
    std::vector<double> gated(3 * rows);
    const int slot_expert[3] = {2, 2, 0}, slot_token[3] = {4, 0, 3};
    for (int s = 0; s < 3; ++s)
      for (int64_t r = 0; r < rows; ++r) {
        double g = 0, u = 0;
        const int64_t wr = slot_expert[s] * rows + r;
        for (int64_t i = 0; i < k; ++i) {
          g += static_cast<double>(gate[wr * k + i]) * x[slot_token[s] * k + i];
          u += static_cast<double>(up[wr * k + i]) * x[slot_token[s] * k + i];
        }
        gated[s * rows + r] = silu(g) * u;
      }
    check_close("gemv_quant gathered gated", shape, compare(download(out.data(), out.size()), gated), 1e-5);
  }
}

TEST_CASE("gemv_quant and dequantize_rows reject violated preconditions with latte::Error") {
  DeviceBuffer<float> buf(4096);
  const cuda::GemvParams bad_k{.type = GgmlType::q4_k,
                               .weight = buf.data(),
                               .weight_bytes = 16384,
                               .n_rows = 4,
                               .k = 100,
                               .x = buf.data(),
                               .x_stride = 128,
                               .y = buf.data(),
                               .y_stride = 4};
  CHECK_THROWS_AS(cuda::gemv_quant(bad_k, nullptr), Error);
  cuda::GemvParams too_many = bad_k;
  too_many.k = 256;
  too_many.x_stride = 256;
  too_many.n_tokens = 9;
  CHECK_THROWS_AS(cuda::gemv_quant(too_many, nullptr), Error);
  cuda::GemvParams small = too_many;
  small.n_tokens = 1;
  small.weight_bytes = 10;
  CHECK_THROWS_AS(cuda::gemv_quant(small, nullptr), Error);
  CHECK_THROWS_AS(cuda::dequantize_rows({.type = GgmlType::q8_k,
                                         .weight = buf.data(),
                                         .weight_bytes = 16384,
                                         .n_source_rows = 1,
                                         .n_rows = 1,
                                         .k = 256,
                                         .out = buf.data(),
                                         .out_stride = 256},
                                        nullptr),
                  Error);
}
