// Norms, RoPE (interleaved, YaRN), SiLU gate and bf16 conversion against float64 references.
#include <doctest/doctest.h>
#include <latte/error.hpp>

#include <cmath>
#include <cstdint>

#include "cuda/activations.hpp"
#include "cuda/kv_cache_append.hpp"
#include "cuda/logits_transfer.hpp"
#include "cuda/norms.hpp"
#include "cuda/rope_yarn.hpp"
#include "cuda/x_int8.hpp"
#include "gpu_test_support.hpp"

using namespace latte;
using namespace latte::test::gpu;
using cuda::DeviceBuffer;

TEST_CASE("rms_norm with and without the fused residual add, fp32 and bf16 outputs") {
  auto rng = make_rng("rms_norm");
  for (int n : {2048, 512, 1000}) {
    const int rows = 17;
    const auto x = random_floats(static_cast<size_t>(rows * n), rng);
    const auto h = random_floats(static_cast<size_t>(rows * n), rng, 3.0f);
    const auto w = random_floats(static_cast<size_t>(n), rng);
    const float eps = 1e-6f;
    for (bool fused : {false, true}) {
      for (auto out_type : {cuda::ActOut::f32, cuda::ActOut::bf16}) {
        const auto dx = upload(x);
        auto dh = upload(h);
        const auto dw = upload(w);
        DeviceBuffer<float> out(static_cast<size_t>(rows * n));
        poison(out.data(), out.bytes());
        cuda::rms_norm({.x = dx.data(),
                        .x_stride = n,
                        .residual = fused ? dh.data() : nullptr,
                        .residual_stride = n,
                        .weight = dw.data(),
                        .n = n,
                        .rows = rows,
                        .eps = eps,
                        .out = out.data(),
                        .out_stride = n,
                        .out_type = out_type},
                       nullptr);
        std::vector<double> want(static_cast<size_t>(rows * n)), want_h(want.size());
        for (int r = 0; r < rows; ++r) {
          double ss = 0;
          for (int i = 0; i < n; ++i) {
            const double v = x[r * n + i] + (fused ? static_cast<double>(h[r * n + i]) : 0.0);
            want_h[r * n + i] = v;
            ss += v * v;
          }
          const double inv = 1.0 / std::sqrt(ss / n + eps);
          for (int i = 0; i < n; ++i) want[r * n + i] = want_h[r * n + i] * inv * w[i];
        }
        std::vector<float> got;
        if (out_type == cuda::ActOut::f32) {
          got = download(out.data(), out.size());
        } else {
          const auto bits = download(reinterpret_cast<const uint16_t*>(out.data()), static_cast<size_t>(rows * n));
          for (auto b : bits) got.push_back(bf16_to_float(b));
        }
        const std::string shape =
            "n " + std::to_string(n) + (fused ? " fused" : "") + (out_type == cuda::ActOut::bf16 ? " bf16" : " f32");
        check_close("rms_norm", shape, compare(got, want), out_type == cuda::ActOut::bf16 ? 5e-3 : 1e-6);
        if (fused)
          check_close("rms_norm residual h += x", shape, compare(download(dh.data(), dh.size()), want_h), 1e-7);
      }
    }
  }
}

TEST_CASE("rms_norm's router product: logits against float64, outputs and records as without it") {
  auto rng = make_rng("rms_norm router");
  struct Shape {
    int n, rows, experts;
  };
  for (const Shape sh :
       {Shape{2048, 1, 64}, Shape{2048, 8, 64}, Shape{7168, 3, 256}, Shape{1536, 2, 20}, Shape{5120, 5, 160}}) {
    const int n = sh.n, rows = sh.rows, E = sh.experts;
    const std::string shape =
        "n " + std::to_string(n) + ", rows " + std::to_string(rows) + ", experts " + std::to_string(E);
    CAPTURE(shape);
    const auto x = random_floats(static_cast<size_t>(rows) * n, rng, 2.0f);
    const auto w = random_floats(static_cast<size_t>(n), rng);
    const auto router = random_floats(static_cast<size_t>(E) * n, rng, 0.05f);
    const auto dx = upload(x);
    const auto dw = upload(w);
    const auto drouter = upload(router);
    const int64_t q_stride = cuda::x_int8_record_bytes(n);
    const int64_t logit_stride = E + 3;  // the 3 values past each row's logits stay poisoned
    DeviceBuffer<float> out_plain(static_cast<size_t>(rows) * n), out(static_cast<size_t>(rows) * n);
    DeviceBuffer<uint8_t> q_plain(static_cast<size_t>(rows * q_stride)), q(static_cast<size_t>(rows * q_stride));
    DeviceBuffer<float> logits(static_cast<size_t>(rows * logit_stride));
    for (void* p :
         {static_cast<void*>(out_plain.data()), static_cast<void*>(out.data()), static_cast<void*>(q_plain.data()),
          static_cast<void*>(q.data()), static_cast<void*>(logits.data())}) {
      poison(p, p == logits.data() ? logits.bytes() : p == q.data() || p == q_plain.data() ? q.bytes() : out.bytes());
    }
    cuda::RmsNormParams params{.x = dx.data(),
                               .x_stride = n,
                               .weight = dw.data(),
                               .n = n,
                               .rows = rows,
                               .eps = 1e-6f,
                               .out = out_plain.data(),
                               .out_stride = n,
                               .out_q = q_plain.data(),
                               .out_q_stride = q_stride};
    cuda::rms_norm(params, nullptr);
    params.out = out.data();
    params.out_q = q.data();
    params.router = drouter.data();
    params.router_rows = E;
    params.router_out = logits.data();
    params.router_out_stride = logit_stride;
    cuda::rms_norm(params, nullptr);
    const auto y = download(out.data(), out.size());
    CHECK_MESSAGE(y == download(out_plain.data(), out_plain.size()), shape,
                  ": the outputs differ from the plain launch's");
    CHECK_MESSAGE(download(q.data(), q.size()) == download(q_plain.data(), q_plain.size()), shape,
                  ": the records differ from the plain launch's");
    // logits against float64 products of the kernel's own (checked above) outputs and the router rows
    const auto got = download(logits.data(), logits.size());
    std::vector<float> got_logits;
    std::vector<double> want;
    for (int r = 0; r < rows; ++r) {
      for (int e = 0; e < E; ++e) {
        double sum = 0;
        for (int i = 0; i < n; ++i) sum += static_cast<double>(router[static_cast<size_t>(e) * n + i]) * y[r * n + i];
        want.push_back(sum);
        got_logits.push_back(got[r * logit_stride + e]);
      }
      for (int e = E; e < logit_stride; ++e)
        CHECK_MESSAGE(std::isnan(got[r * logit_stride + e]), shape, ": wrote past row ", r);
    }
    check_close("rms_norm router", shape, compare(got_logits, want), 1e-5);
  }
  // what the router product cannot take is an error, not a race
  const auto dx = upload(random_floats(2048, rng));
  const auto dw = upload(random_floats(2048, rng));
  DeviceBuffer<float> router(64 * 2048), out(2048), logits(64);
  const cuda::RmsNormParams good{.x = dx.data(),
                                 .x_stride = 2048,
                                 .weight = dw.data(),
                                 .n = 2048,
                                 .rows = 1,
                                 .out = out.data(),
                                 .out_stride = 2048,
                                 .router = router.data(),
                                 .router_rows = 64,
                                 .router_out = logits.data(),
                                 .router_out_stride = 64};
  CHECK_NOTHROW(cuda::rms_norm(good, nullptr));
  auto bad = good;
  bad.residual = out.data();
  bad.residual_stride = 2048;
  CHECK_THROWS_AS(cuda::rms_norm(bad, nullptr), Error);  // every block would add the residual
  bad = good;
  bad.out = const_cast<float*>(dx.data());
  CHECK_THROWS_AS(cuda::rms_norm(bad, nullptr), Error);  // in place: the router blocks would read outputs
  bad = good;
  bad.router_out_stride = 63;
  CHECK_THROWS_AS(cuda::rms_norm(bad, nullptr), Error);
  bad = good;
  bad.out_type = cuda::ActOut::bf16;
  CHECK_THROWS_AS(cuda::rms_norm(bad, nullptr), Error);
}

TEST_CASE("layer_norm with weight and bias (the indexer key norm)") {
  auto rng = make_rng("layer_norm");
  const int n = 128, rows = 33;
  auto x = random_floats(static_cast<size_t>(rows * n), rng, 2.0f);
  for (auto& v : x) v += 3.0f;  // a mean far from 0 exercises the two-pass variance
  const auto w = random_floats(n, rng), b = random_floats(n, rng);
  const auto dx = upload(x), dw = upload(w), db = upload(b);
  DeviceBuffer<float> out(x.size());
  poison(out.data(), out.bytes());
  cuda::layer_norm({.x = dx.data(),
                    .x_stride = n,
                    .weight = dw.data(),
                    .bias = db.data(),
                    .n = n,
                    .rows = rows,
                    .eps = 1e-5f,
                    .out = out.data(),
                    .out_stride = n},
                   nullptr);
  std::vector<double> want(x.size());
  for (int r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int i = 0; i < n; ++i) mean += x[r * n + i];
    mean /= n;
    for (int i = 0; i < n; ++i) var += (x[r * n + i] - mean) * (x[r * n + i] - mean);
    var /= n;
    for (int i = 0; i < n; ++i) want[r * n + i] = (x[r * n + i] - mean) / std::sqrt(var + 1e-5) * w[i] + b[i];
  }
  check_close("layer_norm", "128 x 33", compare(download(out.data(), out.size()), want), 1e-6);
}

namespace {

/// Interleaved YaRN RoPE in float64 (DESIGN.md / ggml's rope_yarn with mscale 1).
void reference_rope(std::vector<double>& d, int64_t token_stride, int heads, int64_t head_stride, int offset, int n_rot,
                    const std::vector<int32_t>& pos, const cuda::RopeYarnParams& p) {
  for (size_t t = 0; t < pos.size(); ++t)
    for (int i = 0; i < n_rot / 2; ++i) {
      const double extrap = pos[t] * std::pow(static_cast<double>(p.freq_base), -2.0 * i / n_rot);
      const double interp = p.freq_scale * extrap;
      double theta = interp;
      if (p.ext_factor != 0.0f) {
        const double y = (i - p.corr.low) / std::max(0.001, static_cast<double>(p.corr.high - p.corr.low));
        const double mix = (1.0 - std::min(1.0, std::max(0.0, y))) * p.ext_factor;
        theta = interp * (1 - mix) + extrap * mix;
      }
      for (int h = 0; h < heads; ++h) {
        double* v = d.data() + t * token_stride + h * head_stride + offset + 2 * i;
        const double x0 = v[0], x1 = v[1];
        v[0] = x0 * std::cos(theta) - x1 * std::sin(theta);
        v[1] = x0 * std::sin(theta) + x1 * std::cos(theta);
      }
    }
}

}  // namespace

TEST_CASE("rope_yarn rotates adjacent pairs of the last R dims of each head (V2-Lite YaRN) and k_pe") {
  auto rng = make_rng("rope_yarn");
  const auto corr = cuda::yarn_corr_dims(64, 4096, 10000.0f, 32.0f, 1.0f);
  // ggml's numbers for these parameters: dims [12, 28]... computed independently below
  const double low = std::floor(64 * std::log(4096 / (32 * 2 * M_PI)) / (2 * std::log(10000.0)));
  const double high = std::ceil(64 * std::log(4096 / (1 * 2 * M_PI)) / (2 * std::log(10000.0)));
  CHECK(corr.low == doctest::Approx(std::max(0.0, low)));
  CHECK(corr.high == doctest::Approx(std::min(63.0, high)));
  struct Layout {
    const char* name;
    int heads, head_stride, offset, n_rot, token_stride;
  };
  for (const Layout& l : {Layout{"q (16 heads, rope after 128 nope dims)", 16, 192, 128, 64, 3072},
                          Layout{"k_pe (after the 512-dim latent)", 1, 576, 512, 64, 576},
                          Layout{"indexer (first 64 of 128)", 32, 128, 0, 64, 4096}}) {
    for (float ext : {0.0f, 1.0f}) {
      const std::vector<int32_t> pos = {0, 1, 7, 4095, 4096, 32767, 163839};
      const auto data = random_floats(pos.size() * l.token_stride, rng);
      auto d = upload(data);
      const auto dpos = upload(pos);
      const cuda::RopeYarnParams p{.data = d.data(),
                                   .token_stride = l.token_stride,
                                   .n_heads = l.heads,
                                   .head_stride = l.head_stride,
                                   .rot_offset = l.offset,
                                   .n_rot = l.n_rot,
                                   .positions = dpos.data(),
                                   .n_tokens = static_cast<int>(pos.size()),
                                   .freq_base = 10000.0f,
                                   .freq_scale = 1.0f / 40.0f,
                                   .ext_factor = ext,
                                   .corr = corr};
      cuda::rope_yarn(p, nullptr);
      std::vector<double> want(data.begin(), data.end());
      reference_rope(want, l.token_stride, l.heads, l.head_stride, l.offset, l.n_rot, pos, p);
      check_close("rope_yarn", std::string(l.name) + (ext != 0 ? " yarn" : " plain"),
                  compare(download(d.data(), d.size()), want), 1e-6);
    }
  }
}

TEST_CASE("rope_yarn out of place: q from a wider projection row, k_pe as the second target, one launch") {
  auto rng = make_rng("rope_yarn out of place");
  const auto corr = cuda::yarn_corr_dims(64, 4096, 10000.0f, 32.0f, 1.0f);
  // a projection row as the decode step has it: q (16 heads x 192) | latent (512) | k_pe (64)
  const int heads = 16, qk = 192, nope = 128, rot = 64, width = heads * qk + 512 + rot, q_row = heads * qk;
  const std::vector<int32_t> pos = {3, 4096, 163839};
  const int T = static_cast<int>(pos.size());
  const auto proj = random_floats(static_cast<size_t>(T) * width, rng);
  const auto dproj = upload(proj);
  const auto dpos = upload(pos);
  DeviceBuffer<float> q(static_cast<size_t>(T) * q_row), k(static_cast<size_t>(T) * rot);
  poison(q.data(), q.bytes());
  poison(k.data(), k.bytes());
  const cuda::RopeYarnParams p{.data = q.data(),
                               .token_stride = q_row,
                               .src = dproj.data(),
                               .src_token_stride = width,
                               .pair_src = dproj.data() + q_row + 512,
                               .pair_src_stride = width,
                               .pair_dst = k.data(),
                               .pair_dst_stride = rot,
                               .n_heads = heads,
                               .head_stride = qk,
                               .rot_offset = nope,
                               .n_rot = rot,
                               .positions = dpos.data(),
                               .n_tokens = T,
                               .freq_base = 10000.0f,
                               .freq_scale = 1.0f / 40.0f,
                               .ext_factor = 1.0f,
                               .corr = corr};
  cuda::rope_yarn(p, nullptr);
  std::vector<double> want_q(static_cast<size_t>(T) * q_row), want_k(static_cast<size_t>(T) * rot);
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < q_row; ++i)
      want_q[static_cast<size_t>(t * q_row + i)] = proj[static_cast<size_t>(t * width + i)];
    for (int i = 0; i < rot; ++i)
      want_k[static_cast<size_t>(t * rot + i)] = proj[static_cast<size_t>(t * width + q_row + 512 + i)];
  }
  reference_rope(want_q, q_row, heads, qk, nope, rot, pos, p);
  reference_rope(want_k, rot, 1, rot, 0, rot, pos, p);
  check_close("rope_yarn", "q out of place (16 x 192 from a 3648-wide row)",
              compare(download(q.data(), q.size()), want_q), 1e-6);
  check_close("rope_yarn", "k_pe second target", compare(download(k.data(), k.size()), want_k), 1e-6);
  // the source is left as it was
  CHECK(download(dproj.data(), dproj.size()) == proj);
}

TEST_CASE("rope_yarn's extra targets: q_nope as records and bf16, q_pe as bf16, the latent normalised") {
  auto rng = make_rng("rope_yarn q_nope records");
  const auto corr = cuda::yarn_corr_dims(64, 4096, 10000.0f, 32.0f, 1.0f);
  const int qk = 192, nope = 128, rot = 64;
  const int64_t rec = cuda::x_int8_record_bytes(nope) + 16;  // a stride wider than one record
  struct Case {
    int heads, tokens;
    bool out_of_place;
  };
  for (const Case& c : {Case{16, 1, true}, Case{16, 3, true}, Case{16, 8, true}, Case{128, 1, false},
                        Case{128, 5, false}, Case{16, 64, false}, Case{16, 200, true}, Case{128, 40, false}}) {
    CAPTURE(c.heads);
    CAPTURE(c.tokens);
    CAPTURE(c.out_of_place);
    const int q_row = c.heads * qk, width = q_row + 576, T = c.tokens;
    std::vector<int32_t> pos(static_cast<size_t>(T));
    for (int t = 0; t < T; ++t) pos[static_cast<size_t>(t)] = 17 * t + 5;
    const auto dpos = upload(pos);
    // varied magnitudes per head so the scales differ between units
    auto src = random_floats(static_cast<size_t>(T) * width, rng);
    for (size_t i = 0; i < src.size(); ++i) src[i] *= static_cast<float>(1 + (i / 32) % 7);
    const auto dsrc = upload(src);
    DeviceBuffer<float> q(static_cast<size_t>(T) * q_row);
    if (c.out_of_place) {
      poison(q.data(), q.bytes());
    } else {
      std::vector<float> in_place(static_cast<size_t>(T) * q_row);
      for (int t = 0; t < T; ++t)
        std::copy_n(src.begin() + static_cast<int64_t>(t) * width, q_row, in_place.begin() + int64_t{t} * q_row);
      LATTE_CUDA_CHECK(cudaMemcpy(q.data(), in_place.data(), q.bytes(), cudaMemcpyHostToDevice));
    }
    const size_t n_rec = static_cast<size_t>(T) * c.heads;
    DeviceBuffer<uint8_t> got(n_rec * rec), want(n_rec * rec);
    poison(got.data(), got.bytes());
    // the bf16 copy of the rotated dims and the latent's normalisation (the last 512 of the source row)
    DeviceBuffer<uint16_t> rot16(n_rec * rot);
    poison(rot16.data(), rot16.bytes());
    DeviceBuffer<uint16_t> nope16(n_rec * nope);  // and of the unrotated ones
    poison(nope16.data(), nope16.bytes());
    const int L = 512;
    const auto norm_w = random_floats(L, rng);
    const auto dnorm_w = upload(norm_w);
    DeviceBuffer<float> latent(static_cast<size_t>(T) * L);
    poison(latent.data(), latent.bytes());
    cuda::RopeYarnParams p{.data = q.data(),
                           .token_stride = q_row,
                           .nope_q = got.data(),
                           .nope_q_stride = rec,
                           .rot_bf16 = reinterpret_cast<__nv_bfloat16*>(rot16.data()),
                           .nope_bf16 = reinterpret_cast<__nv_bfloat16*>(nope16.data()),
                           .norm_src = dsrc.data() + q_row + 64,
                           .norm_src_stride = width,
                           .norm_weight = dnorm_w.data(),
                           .norm_dst = latent.data(),
                           .norm_dst_stride = L,
                           .norm_n = L,
                           .norm_eps = 1e-6f,
                           .n_heads = c.heads,
                           .head_stride = qk,
                           .rot_offset = nope,
                           .n_rot = rot,
                           .positions = dpos.data(),
                           .n_tokens = T,
                           .freq_base = 10000.0f,
                           .freq_scale = 1.0f / 40.0f,
                           .ext_factor = 1.0f,
                           .corr = corr};
    if (c.out_of_place) {
      p.src = dsrc.data();
      p.src_token_stride = width;
    }
    cuda::rope_yarn(p, nullptr);
    // the nope dims of q after the launch are the source's, unchanged: quantize them independently
    poison(want.data(), want.bytes());
    cuda::quantize_x_int8({.x = q.data(),
                           .x_stride = qk,
                           .rows = static_cast<int>(n_rec),
                           .k = nope,
                           .out = want.data(),
                           .out_stride = rec},
                          nullptr);
    const auto g = download(got.data(), got.size()), w = download(want.data(), want.size());
    int64_t differ = 0;
    for (size_t r = 0; r < n_rec; ++r) {
      for (int64_t b = 0; b < cuda::x_int8_record_bytes(nope); ++b) differ += g[r * rec + b] != w[r * rec + b];
    }
    CHECK_MESSAGE(differ == 0, differ << " record bytes differ from quantize_x_int8's");
    // and the rotation is what it is without records
    std::vector<double> want_q(static_cast<size_t>(T) * q_row);
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < q_row; ++i)
        want_q[static_cast<size_t>(t) * q_row + i] = src[static_cast<size_t>(t) * width + i];
    reference_rope(want_q, q_row, c.heads, qk, nope, rot, pos, p);
    const auto got_q = download(q.data(), q.size());
    check_close("rope_yarn", "q with records", compare(got_q, want_q), 1e-6);
    // bf16 of the rotated dims: the nearest bf16 of the fp32 rotation the launch wrote
    const auto bits = download(rot16.data(), rot16.size());
    int64_t bf16_differ = 0;
    for (size_t r = 0; r < n_rec; ++r)
      for (int d = 0; d < rot; ++d) bf16_differ += bits[r * rot + d] != fp32_to_bf16(got_q[r * qk + nope + d]);
    CHECK_MESSAGE(bf16_differ == 0, bf16_differ << " bf16 values differ");
    // bf16 of the unrotated dims: the nearest bf16 of the source's values (in place: read before the rotation)
    const auto nope_bits = download(nope16.data(), nope16.size());
    int64_t nope_differ = 0;
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < c.heads; ++h)
        for (int d = 0; d < nope; ++d)
          nope_differ += nope_bits[(static_cast<size_t>(t) * c.heads + h) * nope + d] !=
                         fp32_to_bf16(src[static_cast<size_t>(t) * width + h * qk + d]);
    CHECK_MESSAGE(nope_differ == 0, nope_differ << " bf16 values of the unrotated dims differ");
    // the normalised latent against float64
    std::vector<double> want_latent(static_cast<size_t>(T) * L);
    for (int t = 0; t < T; ++t) {
      const float* x = &src[static_cast<size_t>(t) * width + q_row + 64];
      double ss = 0.0;
      for (int i = 0; i < L; ++i) ss += static_cast<double>(x[i]) * x[i];
      const double inv = 1.0 / std::sqrt(ss / L + 1e-6);
      for (int i = 0; i < L; ++i)
        want_latent[static_cast<size_t>(t) * L + i] = x[i] * inv * norm_w[static_cast<size_t>(i)];
    }
    check_close("rope_yarn", "latent normalised", compare(download(latent.data(), latent.size()), want_latent), 1e-5);
  }
  DeviceBuffer<float> buf(4096);
  DeviceBuffer<uint8_t> rec_buf(4096);
  DeviceBuffer<int32_t> one(1);
  // an offset that is not a multiple of 32, and a stride shorter than a record
  CHECK_THROWS_AS(cuda::rope_yarn({.data = buf.data(),
                                   .token_stride = 192,
                                   .nope_q = rec_buf.data(),
                                   .nope_q_stride = 400,
                                   .head_stride = 192,
                                   .rot_offset = 112,
                                   .n_rot = 64,
                                   .positions = one.data(),
                                   .n_tokens = 1},
                                  nullptr),
                  Error);
  CHECK_THROWS_AS(cuda::rope_yarn({.data = buf.data(),
                                   .token_stride = 192,
                                   .nope_q = rec_buf.data(),
                                   .nope_q_stride = 304,
                                   .head_stride = 192,
                                   .rot_offset = 128,
                                   .n_rot = 64,
                                   .positions = one.data(),
                                   .n_tokens = 1},
                                  nullptr),
                  Error);
}

TEST_CASE("rope_yarn's cache rows: the latent and k_pe written where and as kv_cache_append writes them") {
  auto rng = make_rng("rope_yarn cache rows");
  const auto corr = cuda::yarn_corr_dims(64, 4096, 10000.0f, 32.0f, 1.0f);
  const int L = 512, R = 64, row = L + R, qk = 192, heads = 16, q_row = heads * qk, width = q_row + row;
  // a paged cache: pages of 4 positions, two sequences whose pages are interleaved in the pool
  const int page_size = 4, pages_per_seq = 8, n_pages = 2 * pages_per_seq;
  std::vector<int64_t> table(2 * pages_per_seq);
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < pages_per_seq; ++i)
      table[static_cast<size_t>(b * pages_per_seq + i)] = (n_pages - 1) - (2 * i + b);
  const auto dtable = upload(table);
  const cuda::PagedRows<__nv_bfloat16> layout{.page_table = dtable.data(),
                                              .page_stride = int64_t{page_size} * row,
                                              .token_stride = row,
                                              .page_size = page_size,
                                              .page_table_stride = pages_per_seq};
  for (int T : {1, 3, 9}) {
    CAPTURE(T);
    std::vector<int32_t> pos(static_cast<size_t>(T)), batch(static_cast<size_t>(T));
    for (int t = 0; t < T; ++t) {
      batch[static_cast<size_t>(t)] = t % 2;
      pos[static_cast<size_t>(t)] = (7 * t + 3) % (page_size * pages_per_seq);
    }
    const auto dpos = upload(pos), dbatch = upload(batch);
    auto src = random_floats(static_cast<size_t>(T) * width, rng);
    const auto dsrc = upload(src);
    const auto norm_w = random_floats(L, rng);
    const auto dnorm_w = upload(norm_w);
    DeviceBuffer<float> q(static_cast<size_t>(T) * q_row), latent(static_cast<size_t>(T) * L),
        k_pe(static_cast<size_t>(T) * R);
    DeviceBuffer<uint16_t> got(static_cast<size_t>(n_pages) * page_size * row), want(got.size());
    poison(got.data(), got.bytes());
    LATTE_CUDA_CHECK(cudaMemcpy(want.data(), got.data(), got.bytes(), cudaMemcpyDeviceToDevice));
    cuda::PagedRows<__nv_bfloat16> cache = layout;
    cache.data = reinterpret_cast<__nv_bfloat16*>(got.data());
    cuda::rope_yarn({.data = q.data(),
                     .token_stride = q_row,
                     .src = dsrc.data(),
                     .src_token_stride = width,
                     .pair_src = dsrc.data() + q_row + L,
                     .pair_src_stride = width,
                     .pair_dst = k_pe.data(),
                     .pair_dst_stride = R,
                     .norm_src = dsrc.data() + q_row,
                     .norm_src_stride = width,
                     .norm_weight = dnorm_w.data(),
                     .norm_dst = latent.data(),
                     .norm_dst_stride = L,
                     .norm_n = L,
                     .norm_eps = 1e-6f,
                     .cache = cache,
                     .cache_batch = dbatch.data(),
                     .cache_norm_offset = 0,
                     .cache_pair_offset = L,
                     .n_heads = heads,
                     .head_stride = qk,
                     .rot_offset = qk - R,
                     .n_rot = R,
                     .positions = dpos.data(),
                     .n_tokens = T,
                     .freq_base = 10000.0f,
                     .freq_scale = 1.0f / 40.0f,
                     .ext_factor = 1.0f,
                     .corr = corr},
                    nullptr);
    // the append of the launch's own fp32 outputs into a copy of the poisoned pool
    cache.data = reinterpret_cast<__nv_bfloat16*>(want.data());
    cuda::run_kv_cache_append({.src = latent.data(),
                               .src_token_stride = L,
                               .n_tokens = T,
                               .dim = L,
                               .dst = cache,
                               .batch_index = dbatch.data(),
                               .positions = dpos.data(),
                               .tail_src = k_pe.data(),
                               .tail_src_token_stride = R,
                               .tail_dim = R,
                               .tail_dst_offset = L},
                              nullptr);
    const auto g = download(got.data(), got.size()), w = download(want.data(), want.size());
    int64_t differ = 0;
    for (size_t i = 0; i < g.size(); ++i) differ += g[i] != w[i];
    CHECK_MESSAGE(differ == 0, differ << " cache values differ from the append's (rows written, rows left alone)");
    // and those outputs are the latent's normalisation (float64) and a rotation of k_pe that keeps its norm
    const auto lat = download(latent.data(), latent.size());
    const auto kp = download(k_pe.data(), k_pe.size());
    for (int t = 0; t < T; ++t) {
      const float* x = &src[static_cast<size_t>(t) * width + q_row];
      double ss = 0.0;
      for (int i = 0; i < L; ++i) ss += static_cast<double>(x[i]) * x[i];
      const double inv = 1.0 / std::sqrt(ss / L + 1e-6);
      double worst = 0.0;
      for (int i = 0; i < L; ++i) {
        const double want_v = x[i] * inv * norm_w[static_cast<size_t>(i)];
        worst = std::max(worst, std::abs(lat[static_cast<size_t>(t) * L + i] - want_v) / (std::abs(want_v) + 1e-3));
      }
      CHECK(worst < 1e-5);
      for (int i = 0; i < R; i += 2) {
        const double a = x[L + i], b = x[L + i + 1];
        const double ra = kp[static_cast<size_t>(t) * R + i], rb = kp[static_cast<size_t>(t) * R + i + 1];
        CHECK(std::abs(std::hypot(ra, rb) - std::hypot(a, b)) <= 1e-5 * (1.0 + std::hypot(a, b)));
      }
    }
  }
  // cache rows without the second target, and a k_pe segment that leaves the row
  DeviceBuffer<float> buf(8192);
  DeviceBuffer<uint16_t> pool(8192);
  DeviceBuffer<int32_t> one(1);
  LATTE_CUDA_CHECK(cudaMemset(one.data(), 0, one.bytes()));  // position 0
  LATTE_CUDA_CHECK(cudaMemset(buf.data(), 0, buf.bytes()));
  cuda::PagedRows<__nv_bfloat16> small{
      .data = reinterpret_cast<__nv_bfloat16*>(pool.data()), .page_stride = 0, .token_stride = row};
  cuda::RopeYarnParams bad{.data = buf.data(),
                           .token_stride = qk,
                           .norm_src = buf.data(),
                           .norm_weight = buf.data(),
                           .norm_dst = buf.data() + 1024,
                           .norm_n = L,
                           .cache = small,
                           .cache_pair_offset = L,
                           .head_stride = qk,
                           .rot_offset = qk - R,
                           .n_rot = R,
                           .positions = one.data(),
                           .n_tokens = 1};
  CHECK_THROWS_AS(cuda::rope_yarn(bad, nullptr), Error);
  bad.pair_src = buf.data() + 4096;
  bad.pair_dst = buf.data() + 6144;
  bad.cache_pair_offset = L + 8;
  CHECK_THROWS_AS(cuda::rope_yarn(bad, nullptr), Error);
  bad.cache_pair_offset = L;
  CHECK_NOTHROW(cuda::rope_yarn(bad, nullptr));
}

TEST_CASE("silu_gate and convert_to_bf16") {
  auto rng = make_rng("silu_gate");
  const int rows = 13, cols = 1408;
  const auto g = random_floats(static_cast<size_t>(rows * cols), rng, 3.0f);
  const auto u = random_floats(static_cast<size_t>(rows * cols), rng);
  const auto dg = upload(g), du = upload(u);
  DeviceBuffer<float> out(g.size());
  poison(out.data(), out.bytes());
  cuda::silu_gate({.gate = dg.data(),
                   .gate_stride = cols,
                   .up = du.data(),
                   .up_stride = cols,
                   .out = out.data(),
                   .out_stride = cols,
                   .rows = rows,
                   .cols = cols},
                  nullptr);
  std::vector<double> want(g.size());
  for (size_t i = 0; i < g.size(); ++i) want[i] = g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i];
  check_close("silu_gate", "13 x 1408", compare(download(out.data(), out.size()), want), 1e-6);

  DeviceBuffer<uint16_t> bf(g.size());
  poison(bf.data(), bf.bytes());
  cuda::convert_to_bf16(dg.data(), cols, bf.data(), cols, rows, cols, nullptr);
  const auto bits = download(bf.data(), bf.size());
  int64_t mismatches = 0;
  for (size_t i = 0; i < g.size(); ++i) mismatches += bits[i] != fp32_to_bf16(g[i]);
  CHECK_MESSAGE(mismatches == 0, "convert_to_bf16: " << mismatches << " values differ from fp32_to_bf16");
}

TEST_CASE("norm and rope launchers reject invalid shapes with latte::Error") {
  DeviceBuffer<float> buf(256);
  CHECK_THROWS_AS(cuda::rms_norm({.x = buf.data(),
                                  .x_stride = 64,
                                  .weight = buf.data(),
                                  .n = 128,
                                  .rows = 1,
                                  .out = buf.data(),
                                  .out_stride = 128},
                                 nullptr),
                  Error);
  DeviceBuffer<int32_t> pos(1);
  CHECK_THROWS_AS(
      cuda::rope_yarn({.data = buf.data(), .token_stride = 64, .n_rot = 63, .positions = pos.data(), .n_tokens = 1},
                      nullptr),
      Error);
}

TEST_CASE("copy_logits_to_host copies strided device logits densely into pinned memory") {
  auto rng = make_rng("copy_logits_to_host");
  const int64_t rows = 3, vocab = 1000, stride = 1024;
  const auto logits = random_floats(static_cast<size_t>(rows * stride), rng);
  const auto d = upload(logits);
  cuda::PinnedBuffer<float> host(static_cast<size_t>(rows * vocab));
  cuda::Stream stream;
  cuda::copy_logits_to_host(d.data(), rows, vocab, stride, host, stream.get());
  stream.synchronize();
  int64_t bad = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t v = 0; v < vocab; ++v) bad += host.data()[r * vocab + v] != logits[r * stride + v];
  CHECK_MESSAGE(bad == 0, "copy_logits_to_host: " << bad << " values differ");
  cuda::PinnedBuffer<float> small(10);
  CHECK_THROWS_AS(cuda::copy_logits_to_host(d.data(), rows, vocab, stride, small, stream.get()), Error);
}
