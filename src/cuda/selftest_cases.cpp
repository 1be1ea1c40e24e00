// The GPU self-test cases (CUDA builds): every kernel family of the CUDA forward pass, on fresh random
// data at the shapes of a plan (src/diagnostics/selftest_plan.hpp: the loaded model's, or the built-in
// presets'), against a float64 CPU reference, each output poisoned (NaN / 0xFF bytes) before its
// launch so that an element the kernel fails to write shows as an infinite error. The bounds and why
// they hold are listed in selftest_plan.cpp. A case whose launch throws is a failure with the message.
#include "diagnostics/selftest_cases.hpp"
#include "core/task_pool.hpp"
#include "cpu/rope.hpp"
#include "cuda/activations.hpp"
#include "cuda/check.hpp"
#include "cuda/dequantize.hpp"
#include "cuda/device_buffer.hpp"
#include "cuda/device_caps.hpp"
#include "cuda/device_weights.hpp"
#include "cuda/dsa_indexer.hpp"
#include "cuda/embedding.hpp"
#include "cuda/flash_prefill.hpp"
#include "cuda/gemm_quant.hpp"
#include "cuda/gemv_quant.hpp"
#include "cuda/kv_cache_append.hpp"
#include "cuda/linear.hpp"
#include "cuda/mla_decode.hpp"
#include "cuda/moe_dispatch.hpp"
#include "cuda/moe_experts.hpp"
#include "cuda/moe_router.hpp"
#include "cuda/norms.hpp"
#include "cuda/rope_yarn.hpp"
#include "cuda/standalone_params.hpp"
#include "cuda/standard_decode.hpp"
#include "diagnostics/selftest_plan.hpp"

#include <latte/error.hpp>
#include <latte/quant.hpp>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace latte::diagnostics::detail {

namespace {

double rel_error(const std::vector<float>& out, const std::vector<double>& ref) {
  double d = 0, r = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    d += (out[i] - ref[i]) * (out[i] - ref[i]);
    r += ref[i] * ref[i];
  }
  return r > 0 ? std::sqrt(d / r) : std::sqrt(d);
}

template <class T>
cuda::DeviceBuffer<T> upload(const std::vector<T>& host) {
  cuda::DeviceBuffer<T> d(std::max<size_t>(host.size(), 1), "selftest upload");
  if (!host.empty()) {
    LATTE_CUDA_CHECK(cudaMemcpy(d.data(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  return d;
}

template <class T>
std::vector<T> download(const T* device, size_t n) {
  std::vector<T> host(n);
  LATTE_CUDA_CHECK(cudaDeviceSynchronize());
  LATTE_CUDA_CHECK(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

/// A device output of `n` elements, every byte 0xFF (NaN for floats, -1 for int32).
template <class T>
cuda::DeviceBuffer<T> poisoned(size_t n) {
  cuda::DeviceBuffer<T> d(std::max<size_t>(n, 1), "selftest output");
  LATTE_CUDA_CHECK(cudaMemset(d.data(), 0xFF, d.bytes()));
  return d;
}

struct Table {
  std::string text;
  bool passed = true;
  int n_cases = 0, n_failed = 0;
  void add(const std::string& kernel, const std::string& shape, double err, double bound) {
    const bool ok = err <= bound;
    passed = passed && ok;
    ++n_cases;
    n_failed += ok ? 0 : 1;
    char line[320];
    std::snprintf(line, sizeof line, "%-34s  %-36s  rel err %-10.3g bound %-8.0e %s\n", kernel.c_str(), shape.c_str(),
                  err, bound, ok ? "ok" : "MISMATCH");
    text += line;
  }
  void error(const std::string& kernel, const std::string& shape, const std::string& message) {
    passed = false;
    ++n_cases;
    ++n_failed;
    text += kernel + "  " + shape + "  MISMATCH: the launch failed: " + message + "\n";
  }
};

using Rng = std::mt19937_64;

/// Bell-shaped random values, fast: the sum of four uniforms from a splitmix64 stream, centred and
/// scaled to unit variance (range +-3.46). Test data needs fresh values, not exact normality, and
/// tens of millions of them must cost well under a second.
class FastNormal {
 public:
  explicit FastNormal(Rng& rng) : state_(rng()) {}
  float operator()() {
    const uint64_t a = next(), b = next();
    constexpr float unit = 1.0f / 4294967296.0f;
    const float sum = static_cast<float>(a >> 32) * unit + static_cast<float>(a & 0xFFFFFFFFu) * unit +
                      static_cast<float>(b >> 32) * unit + static_cast<float>(b & 0xFFFFFFFFu) * unit;
    return (sum - 2.0f) * 1.7320508f;
  }

 private:
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t state_;
};

std::vector<float> normal_values(size_t n, Rng& rng, float sigma = 1.0f) {
  FastNormal normal(rng);
  std::vector<float> v(n);
  for (float& x : v) x = sigma * normal();
  return v;
}

/// bf16 bits of n random values, and the values they hold.
void bf16_values(size_t n, Rng& rng, std::vector<uint16_t>& bits, std::vector<double>& values) {
  FastNormal normal(rng);
  bits.resize(n);
  values.resize(n);
  for (size_t i = 0; i < n; ++i) {
    bits[i] = fp32_to_bf16(normal());
    values[i] = bf16_to_fp32(bits[i]);
  }
}

double round_bf16(double v) { return bf16_to_fp32(fp32_to_bf16(static_cast<float>(v))); }

/// Runs body(r0, r1) over [0, rows) in blocks on the host's cores (the matrix cases' encoding and float64
/// references dominated the self-test's time on one core). Each row's result does not depend on the split.
void parallel_rows(int rows, const std::function<void(int, int)>& body) {
  static const unsigned threads = std::clamp(std::thread::hardware_concurrency(), 1u, 16u);
  constexpr int kBlock = 16;
  const int blocks = (rows + kBlock - 1) / kBlock;
  if (threads == 1 || blocks <= 1) {
    body(0, rows);
    return;
  }
  TaskPool pool(std::min(threads, static_cast<unsigned>(blocks)));
  pool.run(static_cast<size_t>(blocks), [&](size_t b) {
    const int r0 = static_cast<int>(b) * kBlock;
    body(r0, std::min(rows, r0 + kBlock));
  });
}

/// `rows` rows of `k` random values quantized to `type` (valid blocks by construction), and their
/// dequantized values. The values are drawn in row order on this thread (the seed gives the same matrix), the
/// rows encoded in parallel.
std::vector<uint8_t> random_rows(GgmlType type, int rows, int k, Rng& rng, std::vector<float>& dense) {
  const size_t rb = row_bytes(type, static_cast<uint64_t>(k));
  std::vector<uint8_t> out(rb * static_cast<size_t>(rows));
  dense.resize(static_cast<size_t>(rows) * k);
  FastNormal normal(rng);
  for (float& v : dense) v = normal();
  parallel_rows(rows, [&](int r0, int r1) {  // rows r0 .. r1 - 1 as one run of blocks (k is whole blocks)
    quantize_row(type, dense.data() + static_cast<size_t>(r0) * k, out.data() + rb * static_cast<size_t>(r0),
                 static_cast<int64_t>(r1 - r0) * k);
  });
  dequantize_rows(type, out.data(), dense.data(), rows, k);
  return out;
}

/// ref[t, r] = sum_i w[r, i] x[t, i] in float64 for the tokens t = 0, stride, 2 stride, ... (rows of
/// `ref` in that order), operands optionally rounded to bf16 first.
std::vector<double> reference_product(const std::vector<float>& w, const std::vector<float>& x, int rows, int k,
                                      int n_tokens, int stride, bool bf16_operands) {
  const auto operand = [&](float v) { return bf16_operands ? round_bf16(v) : static_cast<double>(v); };
  std::vector<double> xd(x.size());
  for (size_t i = 0; i < x.size(); ++i) xd[i] = operand(x[i]);
  const int n_sampled = (n_tokens + stride - 1) / stride;
  std::vector<double> ref(static_cast<size_t>(n_sampled) * rows);
  parallel_rows(rows, [&](int r0, int r1) {
    std::vector<double> wr(static_cast<size_t>(k));
    for (int r = r0; r < r1; ++r) {
      for (int i = 0; i < k; ++i) wr[static_cast<size_t>(i)] = operand(w[static_cast<size_t>(r) * k + i]);
      for (int j = 0; j < n_sampled; ++j) {
        const double* xt = xd.data() + static_cast<size_t>(j) * stride * k;
        double s = 0;
        for (int i = 0; i < k; ++i) s += wr[static_cast<size_t>(i)] * xt[i];
        ref[static_cast<size_t>(j) * rows + r] = s;
      }
    }
  });
  return ref;
}

// ---- weight products ---------------------------------------------------------------------------

/// dequantize_rows, gemv_quant (the case's token counts) and Linear over more rows than a GEMV pass
/// (the tensor-core GEMM where the type has one) on one random matrix.
void matrix_cases(const SelftestCase& c, Rng& rng, Table& table) {
  std::vector<float> dense;
  const auto host = random_rows(c.type, c.rows, c.k, rng, dense);
  const auto w = upload(host);
  if (c.family == SelftestFamily::dequantize) {
    auto out = poisoned<float>(dense.size());
    cuda::dequantize_rows({.type = c.type,
                           .weight = w.data(),
                           .weight_bytes = static_cast<int64_t>(host.size()),
                           .n_source_rows = c.rows,
                           .n_rows = c.rows,
                           .k = c.k,
                           .row_ids = nullptr,
                           .out = out.data(),
                           .out_stride = c.k,
                           .out_type = cuda::DequantOut::f32},
                          nullptr);
    table.add(c.name, c.shape, rel_error(download(out.data(), dense.size()), {dense.begin(), dense.end()}), c.bound);
    return;
  }
  for (int n_tokens : c.token_counts) {
    const std::string name = c.name + " x" + std::to_string(n_tokens);
    const auto x = normal_values(static_cast<size_t>(n_tokens) * c.k, rng);
    const auto dx = upload(x);
    auto y = poisoned<float>(static_cast<size_t>(n_tokens) * c.rows);
    bool bf16_operands = false;
    std::string path;
    if (c.family == SelftestFamily::gemv) {
      if (!cuda::gemv_supports(c.type)) {
        table.error(name, c.shape, "gemv_quant has no kernel for this type");
        continue;
      }
      cuda::GemvParams p;
      p.type = c.type;
      p.weight = w.data();
      p.weight_bytes = static_cast<int64_t>(host.size());
      p.n_rows = c.rows;
      p.k = c.k;
      p.x = dx.data();
      p.x_stride = c.k;
      p.y = y.data();
      p.y_stride = c.rows;
      p.n_tokens = n_tokens;
      cuda::gemv_quant(p, nullptr);
    } else {
      // What the forward pass runs for a prefill product (cuda::Linear): with a fused kernel for the type,
      // the tensor-core GEMM, or from blas_min_rows() rows a bf16 dequantization and cuBLAS (x and W rounded
      // to bf16 either way); fp32 weights without one: fp32 cuBLAS; else GEMV passes of 8 rows.
      cuda::DeviceMatrix m{.type = c.type,
                           .data = reinterpret_cast<const std::byte*>(w.data()),
                           .rows = c.rows,
                           .k = c.k,
                           .row_bytes = static_cast<int64_t>(row_bytes(c.type, static_cast<uint64_t>(c.k)))};
      bf16_operands = cuda::Linear::bf16_operands(m, n_tokens);
      path = !bf16_operands ? (c.type == GgmlType::f32 ? " (cublas f32)" : " (gemv passes)")
                            : (n_tokens >= cuda::Linear::blas_min_rows() ? " (bf16 cublas)" : " (gemm)");
      cuda::Linear linear;
      linear(m, {.x = dx.data(), .x_stride = c.k, .rows = n_tokens, .y = y.data(), .y_stride = c.rows}, nullptr);
    }
    // Long products: the reference on every 16th token (the float64 sums dominate the run time); every
    // output is still checked to have been written.
    const int stride = n_tokens > 32 ? 16 : 1;
    const auto ref = reference_product(dense, x, c.rows, c.k, n_tokens, stride, bf16_operands);
    const auto got = download(y.data(), static_cast<size_t>(n_tokens) * c.rows);
    std::vector<float> sampled;
    bool all_written = true;
    for (int t = 0; t < n_tokens; ++t) {
      for (int r = 0; r < c.rows; ++r) {
        const float v = got[static_cast<size_t>(t) * c.rows + r];
        all_written = all_written && std::isfinite(v);
        if (t % stride == 0) sampled.push_back(v);
      }
    }
    table.add(name + path, c.shape, all_written ? rel_error(sampled, ref) : INFINITY, c.bound);
  }
}

// ---- elementwise -------------------------------------------------------------------------------

void rms_norm_case(const SelftestCase& c, Rng& rng, Table& table) {
  const int rows = c.rows, n = c.k;
  const bool residual = c.family == SelftestFamily::rms_norm_residual;
  const auto x = normal_values(static_cast<size_t>(rows) * n, rng);
  const auto h = normal_values(static_cast<size_t>(rows) * n, rng);
  auto w = normal_values(static_cast<size_t>(n), rng, 0.1f);
  for (float& v : w) v += 1.0f;
  const float eps = 1e-6f;
  std::vector<double> ref(x.size()), ref_h(x.size());
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int i = 0; i < n; ++i) {
      const size_t j = static_cast<size_t>(r) * n + i;
      ref_h[j] = residual ? static_cast<double>(h[j]) + x[j] : x[j];
      ss += ref_h[j] * ref_h[j];
    }
    const double inv = 1.0 / std::sqrt(ss / n + eps);
    for (int i = 0; i < n; ++i) {
      const size_t j = static_cast<size_t>(r) * n + i;
      ref[j] = ref_h[j] * inv * w[static_cast<size_t>(i)];
    }
  }
  const auto dx = upload(x);
  auto dh = upload(h);
  const auto dw = upload(w);
  auto out = poisoned<float>(x.size());
  cuda::RmsNormParams p;
  p.x = dx.data();
  p.x_stride = n;
  p.residual = residual ? dh.data() : nullptr;
  p.residual_stride = residual ? n : 0;
  p.weight = dw.data();
  p.n = n;
  p.rows = rows;
  p.eps = eps;
  p.out = out.data();
  p.out_stride = n;
  cuda::rms_norm(p, nullptr);
  double err = rel_error(download(out.data(), x.size()), ref);
  if (residual) err = std::max(err, rel_error(download(dh.data(), h.size()), ref_h));  // h += x written back
  table.add(c.name, c.shape, err, c.bound);
}

void layer_norm_case(const SelftestCase& c, Rng& rng, Table& table) {
  const int rows = c.rows, n = c.k;
  auto x = normal_values(static_cast<size_t>(rows) * n, rng);
  for (size_t i = 0; i < x.size(); ++i) x[i] += 0.5f;  // a mean to remove
  auto w = normal_values(static_cast<size_t>(n), rng, 0.1f);
  for (float& v : w) v += 1.0f;
  const auto b = normal_values(static_cast<size_t>(n), rng, 0.1f);
  const float eps = 1e-6f;
  std::vector<double> ref(x.size());
  for (int r = 0; r < rows; ++r) {
    const float* xr = x.data() + static_cast<size_t>(r) * n;
    double mean = 0, var = 0;
    for (int i = 0; i < n; ++i) mean += xr[i];
    mean /= n;
    for (int i = 0; i < n; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    const double inv = 1.0 / std::sqrt(var / n + eps);
    for (int i = 0; i < n; ++i) {
      ref[static_cast<size_t>(r) * n + i] =
          (xr[i] - mean) * inv * w[static_cast<size_t>(i)] + b[static_cast<size_t>(i)];
    }
  }
  const auto dx = upload(x);
  const auto dw = upload(w);
  const auto db = upload(b);
  auto out = poisoned<float>(x.size());
  cuda::layer_norm({.x = dx.data(),
                    .x_stride = n,
                    .weight = dw.data(),
                    .bias = db.data(),
                    .n = n,
                    .rows = rows,
                    .eps = eps,
                    .out = out.data(),
                    .out_stride = n},
                   nullptr);
  table.add(c.name, c.shape, rel_error(download(out.data(), x.size()), ref), c.bound);
}

void silu_gate_case(const SelftestCase& c, Rng& rng, Table& table) {
  const int rows = c.rows, cols = c.k;
  const auto g = normal_values(static_cast<size_t>(rows) * cols, rng, 2.0f);
  const auto u = normal_values(static_cast<size_t>(rows) * cols, rng);
  std::vector<double> ref(g.size());
  for (size_t i = 0; i < g.size(); ++i) ref[i] = g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i];
  const auto dg = upload(g);
  const auto du = upload(u);
  const bool bf16 = c.type == GgmlType::bf16;
  cuda::DeviceBuffer<std::byte> out(g.size() * (bf16 ? 2 : 4), "selftest output");
  LATTE_CUDA_CHECK(cudaMemset(out.data(), 0xFF, out.bytes()));
  cuda::silu_gate({.gate = dg.data(),
                   .gate_stride = cols,
                   .up = du.data(),
                   .up_stride = cols,
                   .out = out.data(),
                   .out_stride = cols,
                   .out_type = bf16 ? cuda::ActOut::bf16 : cuda::ActOut::f32,
                   .rows = rows,
                   .cols = cols},
                  nullptr);
  std::vector<float> got(g.size());
  if (bf16) {
    const auto bits = download(reinterpret_cast<const uint16_t*>(out.data()), g.size());
    for (size_t i = 0; i < got.size(); ++i) got[i] = bf16_to_fp32(bits[i]);
  } else {
    got = download(reinterpret_cast<const float*>(out.data()), g.size());
  }
  table.add(c.name, c.shape, rel_error(got, ref), c.bound);
}

/// RoPE against the CPU forward's rotary embedding (cpu::RotaryEmbedding: the model's base and
/// scaling), angles position * inv_freq in float64.
void rope_case(const SelftestCase& c, Rng& rng, Table& table) {
  const SelftestRope& r = c.rope;
  const int T = static_cast<int>(r.positions.size());
  const auto data = normal_values(static_cast<size_t>(T) * r.token_stride, rng);
  const cpu::RotaryEmbedding reference(r.n_rot, r.freq_base, r.scaling);
  std::vector<double> ref(data.begin(), data.end());
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < r.n_rot / 2; ++i) {
      const double theta = r.positions[static_cast<size_t>(t)] * reference.inv_freq()[static_cast<size_t>(i)];
      for (int h = 0; h < r.n_heads; ++h) {
        double* v = ref.data() + static_cast<size_t>(t) * r.token_stride + static_cast<size_t>(h) * r.head_stride +
                    r.rot_offset + 2 * i;
        const double x0 = v[0], x1 = v[1];
        v[0] = x0 * std::cos(theta) - x1 * std::sin(theta);
        v[1] = x0 * std::sin(theta) + x1 * std::cos(theta);
      }
    }
  }
  auto d = upload(data);
  const auto pos = upload(std::vector<int32_t>(r.positions.begin(), r.positions.end()));
  cuda::RopeYarnParams p{.data = d.data(),
                         .token_stride = r.token_stride,
                         .n_heads = r.n_heads,
                         .head_stride = r.head_stride,
                         .rot_offset = r.rot_offset,
                         .n_rot = r.n_rot,
                         .positions = pos.data(),
                         .n_tokens = T,
                         .freq_base = r.freq_base,
                         .freq_scale = r.freq_scale,
                         .ext_factor = r.ext_factor,
                         .corr = {}};
  if (r.ext_factor != 0) p.corr = cuda::yarn_corr_dims(r.n_rot, r.n_ctx_orig, r.freq_base, r.beta_fast, r.beta_slow);
  cuda::rope_yarn(p, nullptr);
  table.add(c.name, c.shape, rel_error(download(d.data(), data.size()), ref), c.bound);
}

void embedding_case(const SelftestCase& c, Rng& rng, Table& table) {
  constexpr int vocab = 64;
  std::vector<float> dense;
  const auto host = random_rows(c.type, vocab, c.k, rng, dense);
  std::vector<int32_t> ids = {0, vocab - 1};
  std::uniform_int_distribution<int32_t> pick(0, vocab - 1);
  while (static_cast<int>(ids.size()) < c.rows) ids.push_back(pick(rng));
  std::vector<double> ref;
  for (int32_t id : ids)
    ref.insert(ref.end(), dense.begin() + static_cast<ptrdiff_t>(id) * c.k,
               dense.begin() + static_cast<ptrdiff_t>(id + 1) * c.k);
  const auto table_d = upload(host);
  const auto ids_d = upload(ids);
  auto out = poisoned<float>(ref.size());
  cuda::embedding_lookup({.type = c.type,
                          .table = table_d.data(),
                          .table_bytes = static_cast<int64_t>(host.size()),
                          .vocab = vocab,
                          .hidden = c.k,
                          .ids = ids_d.data(),
                          .n_tokens = static_cast<int>(ids.size()),
                          .out = out.data(),
                          .out_stride = c.k},
                         nullptr);
  table.add(c.name, c.shape, rel_error(download(out.data(), ref.size()), ref), c.bound);
}

// ---- MoE -----------------------------------------------------------------------------------------

/// The router's choice for one token in float64 (DESIGN.md): ids in selection order and weights, and
/// the smallest gap between a chosen and an unchosen candidate (0: a near-tie, draw again).
double reference_route(const SelftestMoe& m, const float* logits, const std::vector<float>& bias, int32_t* ids,
                       double* weights) {
  const int E = m.n_experts;
  std::vector<double> score(static_cast<size_t>(E)), select(static_cast<size_t>(E));
  if (!m.sigmoid) {
    const double mx = *std::max_element(logits, logits + E);
    double sum = 0;
    for (int e = 0; e < E; ++e) sum += score[static_cast<size_t>(e)] = std::exp(logits[e] - mx);
    for (double& s : score) s /= sum;
  } else {
    for (int e = 0; e < E; ++e) score[static_cast<size_t>(e)] = 1.0 / (1.0 + std::exp(-static_cast<double>(logits[e])));
  }
  for (int e = 0; e < E; ++e) {
    select[static_cast<size_t>(e)] = score[static_cast<size_t>(e)] + (m.bias ? bias[static_cast<size_t>(e)] : 0.0);
  }
  double margin = INFINITY;
  std::vector<bool> allowed(static_cast<size_t>(E), true);
  if (m.n_groups > 1) {
    const int gs = E / m.n_groups;
    std::vector<std::pair<double, int>> groups;
    for (int g = 0; g < m.n_groups; ++g) {
      std::vector<double> v(select.begin() + g * gs, select.begin() + (g + 1) * gs);
      std::sort(v.rbegin(), v.rend());
      groups.push_back({-(v[0] + (gs > 1 ? v[1] : 0.0)), g});
    }
    std::sort(groups.begin(), groups.end());
    if (m.groups_used < m.n_groups) {
      margin = std::min(margin, groups[static_cast<size_t>(m.groups_used)].first -
                                    groups[static_cast<size_t>(m.groups_used - 1)].first);
    }
    std::fill(allowed.begin(), allowed.end(), false);
    for (int r = 0; r < m.groups_used; ++r) {
      const int g = groups[static_cast<size_t>(r)].second;
      for (int e = g * gs; e < (g + 1) * gs; ++e) allowed[static_cast<size_t>(e)] = true;
    }
  }
  std::vector<std::pair<double, int>> order;
  for (int e = 0; e < E; ++e) {
    if (allowed[static_cast<size_t>(e)]) order.push_back({-select[static_cast<size_t>(e)], e});
  }
  std::sort(order.begin(), order.end());
  if (static_cast<int>(order.size()) > m.k) {
    margin = std::min(margin, order[static_cast<size_t>(m.k)].first - order[static_cast<size_t>(m.k - 1)].first);
  }
  double sum = 0;
  for (int j = 0; j < m.k; ++j) {
    ids[j] = order[static_cast<size_t>(j)].second;
    sum += score[static_cast<size_t>(ids[j])];
  }
  for (int j = 0; j < m.k; ++j) weights[j] = score[static_cast<size_t>(ids[j])] / (m.normalize ? sum : 1.0) * m.scale;
  return margin;
}

/// The kernels' view of a case's MoE shape.
cuda::MoeShape moe_shape(const SelftestMoe& m) {
  return {.n_experts = m.n_experts,
          .k = m.k,
          .hidden = m.hidden,
          .ffn = m.ffn,
          .gate_type = m.gate_type,
          .up_type = m.up_type,
          .down_type = m.down_type,
          .gating = m.sigmoid ? cuda::MoeGating::sigmoid : cuda::MoeGating::softmax,
          .n_groups = m.n_groups,
          .groups_used = m.groups_used,
          .normalize = m.normalize,
          .scale = m.scale};
}

/// moe_route at the model's expert count, k, groups and gating. Two rows: the ids (fraction of
/// tokens whose chosen set differs, bound 0) and the weights (aligned by expert id).
void moe_router_case(const SelftestCase& c, Rng& rng, Table& table) {
  const SelftestMoe& m = c.moe;
  const int T = c.rows, E = m.n_experts, K = m.k;
  std::vector<float> logits(static_cast<size_t>(T) * E), bias(static_cast<size_t>(E));
  std::vector<int32_t> want_ids(static_cast<size_t>(T) * K);
  std::vector<double> want_w(static_cast<size_t>(T) * K);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& b : bias) b = m.bias ? 0.1f * normal(rng) : 0.0f;
  for (int t = 0; t < T; ++t) {
    float* row = logits.data() + static_cast<size_t>(t) * E;
    // Draw again on a near-tie: fp32 and float64 may then legitimately choose differently.
    for (int attempt = 0; attempt < 100; ++attempt) {
      for (int e = 0; e < E; ++e) row[e] = 2.0f * normal(rng);
      if (reference_route(m, row, bias, want_ids.data() + static_cast<size_t>(t) * K,
                          want_w.data() + static_cast<size_t>(t) * K) > 1e-5) {
        break;
      }
    }
  }
  const auto dl = upload(logits);
  const auto db = upload(bias);
  auto ids = poisoned<int32_t>(want_ids.size());
  auto w = poisoned<float>(want_w.size());
  cuda::moe_route(
      cuda::moe_router_params(moe_shape(m), T, dl.data(), m.bias ? db.data() : nullptr, ids.data(), w.data()), nullptr);
  const auto got_ids = download(ids.data(), want_ids.size());
  const auto got_w = download(w.data(), want_w.size());
  int differing = 0;
  std::vector<float> aligned(got_w.size(), NAN);
  for (int t = 0; t < T; ++t) {
    const size_t o = static_cast<size_t>(t) * K;
    std::vector<int32_t> a(got_ids.begin() + static_cast<ptrdiff_t>(o),
                           got_ids.begin() + static_cast<ptrdiff_t>(o + K));
    std::vector<int32_t> b(want_ids.begin() + static_cast<ptrdiff_t>(o),
                           want_ids.begin() + static_cast<ptrdiff_t>(o + K));
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    if (a != b) ++differing;
    for (int j = 0; j < K; ++j) {
      for (int i = 0; i < K; ++i) {
        if (got_ids[o + static_cast<size_t>(i)] == want_ids[o + static_cast<size_t>(j)]) {
          aligned[o + static_cast<size_t>(j)] = got_w[o + static_cast<size_t>(i)];
        }
      }
    }
  }
  table.add(c.name + " ids", c.shape, static_cast<double>(differing) / T, 0.0);
  table.add(c.name + " weights", c.shape, rel_error(aligned, want_w), c.bound);
}

/// Random expert stacks (host dense values, device blocks), kept for the next case of the same shape
/// and types (the decode and prefill cases of one target share them).
struct ExpertSet {
  SelftestMoe shape;
  std::vector<float> gate_dense, up_dense, down_dense;
  cuda::DeviceBuffer<uint8_t> d_gate, d_up, d_down;
};

bool same_experts(const SelftestMoe& a, const SelftestMoe& b) {
  return a.n_experts == b.n_experts && a.hidden == b.hidden && a.ffn == b.ffn && a.gate_type == b.gate_type &&
         a.up_type == b.up_type && a.down_type == b.down_type;
}

/// The routed-expert FFN over a few random experts: the decode path (GEMV groups, fp32) or the
/// prefill path (grouped tensor-core GEMMs, bf16 operands), as the forward pass chooses them.
void moe_experts_case(const SelftestCase& c, Rng& rng, Table& table, std::unique_ptr<ExpertSet>& cache) {
  const SelftestMoe& m = c.moe;
  const cuda::MoeShape shape = moe_shape(m);
  const int T = c.rows, E = m.n_experts, K = m.k, H = m.hidden, F = m.ffn;
  if (!cache || !same_experts(cache->shape, m)) {
    auto fresh = std::make_unique<ExpertSet>();
    fresh->shape = m;
    fresh->d_gate = upload(random_rows(m.gate_type, E * F, H, rng, fresh->gate_dense));
    fresh->d_up = upload(random_rows(m.up_type, E * F, H, rng, fresh->up_dense));
    fresh->d_down = upload(random_rows(m.down_type, E * H, F, rng, fresh->down_dense));
    cache = std::move(fresh);
  }
  const std::vector<float>&gate_dense = cache->gate_dense, &up_dense = cache->up_dense, &down_dense = cache->down_dense;
  const cuda::MoeExpertWeights experts =
      cuda::moe_expert_weights(shape, cache->d_gate.data(), cache->d_up.data(), cache->d_down.data());
  // Each token: K distinct experts (a random subset), random positive weights.
  const std::vector<int32_t> ids = cuda::random_expert_ids(shape, T, rng);
  std::vector<float> weights(ids.size());
  std::uniform_real_distribution<float> uniform(0.1f, 1.0f);
  for (float& w : weights) w = uniform(rng);
  const auto x = normal_values(static_cast<size_t>(T) * H, rng);
  const bool prefill = c.family == SelftestFamily::moe_prefill;
  const bool grouped = prefill && cuda::gemm_quant_supports(m.gate_type) && cuda::gemm_quant_supports(m.up_type) &&
                       cuda::gemm_quant_supports(m.down_type);
  // Reference: float64, rounding what the grouped GEMM path rounds to bf16 (x, W, silu(g) * u).
  auto operands = [&](const std::vector<float>& v) {
    std::vector<double> d(v.begin(), v.end());
    if (grouped) {
      for (double& e : d) e = round_bf16(e);
    }
    return d;
  };
  const std::vector<double> gd = operands(gate_dense), ud = operands(up_dense), dd = operands(down_dense),
                            xd = operands(x);
  std::vector<double> ref(static_cast<size_t>(T) * H, 0.0), act(static_cast<size_t>(F));
  for (int t = 0; t < T; ++t) {
    const double* xt = xd.data() + static_cast<size_t>(t) * H;
    for (int j = 0; j < K; ++j) {
      const int e = ids[static_cast<size_t>(t) * K + j];
      for (int f = 0; f < F; ++f) {
        const size_t row = (static_cast<size_t>(e) * F + f) * H;
        double g = 0, u = 0;
        for (int i = 0; i < H; ++i) {
          g += gd[row + i] * xt[i];
          u += ud[row + i] * xt[i];
        }
        const double a = g / (1.0 + std::exp(-g)) * u;
        act[static_cast<size_t>(f)] = grouped ? round_bf16(a) : a;
      }
      const double wt = weights[static_cast<size_t>(t) * K + j];
      for (int h = 0; h < H; ++h) {
        const double* row = dd.data() + (static_cast<size_t>(e) * H + h) * F;
        double s = 0;
        for (int f = 0; f < F; ++f) s += row[f] * act[static_cast<size_t>(f)];
        ref[static_cast<size_t>(t) * H + h] += wt * s;
      }
    }
  }
  const auto d_ids = upload(ids);
  const auto d_w = upload(weights);
  const auto d_x = upload(x);
  auto out = poisoned<float>(ref.size());
  cuda::MoeWorkspace ws(cuda::moe_workspace_shape(shape, T));
  if (grouped) {
    std::vector<uint16_t> xb(x.size());
    for (size_t i = 0; i < x.size(); ++i) xb[i] = fp32_to_bf16(x[i]);
    const auto d_xb = upload(xb);
    cuda::moe_experts_prefill(experts, ws,
                              cuda::moe_experts_call(shape, T,
                                                     {.ids = d_ids.data(),
                                                      .weights = d_w.data(),
                                                      .x_bf16 = reinterpret_cast<const __nv_bfloat16*>(d_xb.data()),
                                                      .out = out.data()}),
                              nullptr);
  } else {
    for (int t0 = 0; t0 < T; t0 += cuda::gemv_max_tokens) {
      const int n = std::min(cuda::gemv_max_tokens, T - t0);
      cuda::moe_experts_decode(experts, ws,
                               cuda::moe_experts_call(shape, n,
                                                      {.ids = d_ids.data() + static_cast<size_t>(t0) * K,
                                                       .weights = d_w.data() + static_cast<size_t>(t0) * K,
                                                       .x = d_x.data() + static_cast<size_t>(t0) * H,
                                                       .out = out.data() + static_cast<size_t>(t0) * H}),
                               nullptr);
    }
  }
  const std::string path = prefill ? (grouped ? "" : " (decode path: no fused GEMM)") : "";
  table.add(c.name + path, c.shape, rel_error(download(out.data(), ref.size()), ref), c.bound);
}

// ---- attention -----------------------------------------------------------------------------------

/// Dense MLA decode, one query token per sequence, fp32 output, against a float64 softmax over the
/// same bf16 values. Cache: [batch, capacity, 576] contiguous.
void mla_decode_case(const SelftestCase& sc, Rng& rng, Table& table) {
  const int n_heads = sc.n_heads;
  const std::vector<int>& kv_lens = sc.kv_lens;
  constexpr int L = cuda::kMlaLatentDim, R = cuda::kMlaRopeDim, row = cuda::kMlaCacheRow;
  const int batch = static_cast<int>(kv_lens.size());
  int capacity = 0;
  for (int n : kv_lens) capacity = std::max(capacity, n);
  std::vector<uint16_t> q_lat_bits, q_rope_bits, cache_bits;
  std::vector<double> q_lat, q_rope, cache;
  bf16_values(static_cast<size_t>(batch) * n_heads * L, rng, q_lat_bits, q_lat);
  bf16_values(static_cast<size_t>(batch) * n_heads * R, rng, q_rope_bits, q_rope);
  bf16_values(static_cast<size_t>(batch) * capacity * row, rng, cache_bits, cache);
  const float scale = sc.scale;

  std::vector<double> ref(static_cast<size_t>(batch) * n_heads * L, 0.0);
  std::vector<double> p(static_cast<size_t>(capacity));
  for (int b = 0; b < batch; ++b) {
    for (int h = 0; h < n_heads; ++h) {
      const double* ql = q_lat.data() + (static_cast<size_t>(b) * n_heads + h) * L;
      const double* qr = q_rope.data() + (static_cast<size_t>(b) * n_heads + h) * R;
      double max = -INFINITY;
      for (int s = 0; s < kv_lens[static_cast<size_t>(b)]; ++s) {
        const double* c = cache.data() + (static_cast<size_t>(b) * capacity + s) * row;
        double dot = 0;
        for (int d = 0; d < L; ++d) dot += ql[d] * c[d];
        for (int d = 0; d < R; ++d) dot += qr[d] * c[L + d];
        p[static_cast<size_t>(s)] = scale * dot;
        max = std::max(max, p[static_cast<size_t>(s)]);
      }
      double sum = 0;
      for (int s = 0; s < kv_lens[static_cast<size_t>(b)]; ++s)
        sum += (p[static_cast<size_t>(s)] = std::exp(p[static_cast<size_t>(s)] - max));
      double* o = ref.data() + (static_cast<size_t>(b) * n_heads + h) * L;
      for (int s = 0; s < kv_lens[static_cast<size_t>(b)]; ++s) {
        const double* c = cache.data() + (static_cast<size_t>(b) * capacity + s) * row;
        for (int d = 0; d < L; ++d) o[d] += p[static_cast<size_t>(s)] / sum * c[d];
      }
    }
  }

  const auto d_q_lat = upload(q_lat_bits);
  const auto d_q_rope = upload(q_rope_bits);
  const auto d_cache = upload(cache_bits);
  const auto d_lens = upload(std::vector<int32_t>(kv_lens.begin(), kv_lens.end()));
  auto out = poisoned<float>(ref.size());
  const cuda::MlaDecodeParams params =
      cuda::mla_decode_params({.batch = batch, .n_heads = n_heads, .capacity = capacity, .scale = scale},
                              {.q_latent = reinterpret_cast<const __nv_bfloat16*>(d_q_lat.data()),
                               .q_rope = reinterpret_cast<const __nv_bfloat16*>(d_q_rope.data()),
                               .cache = reinterpret_cast<const __nv_bfloat16*>(d_cache.data()),
                               .kv_lens = d_lens.data(),
                               .out = out.data()});
  const cuda::MlaDecodePlan plan = cuda::plan_mla_decode(params, 0, cuda::MlaSplitMerge::automatic, sc.tile_tokens);
  cuda::DeviceBuffer<std::byte> workspace(std::max<size_t>(plan.workspace_bytes, 16), "selftest workspace");
  cuda::run_mla_decode(params, plan, workspace.data(), workspace.bytes(), nullptr);
  table.add(sc.name, sc.shape, rel_error(download(out.data(), ref.size()), ref), sc.bound);
}

/// Dense standard decode, fp32 output: K [batch, capacity, heads, qk], V [batch, capacity, heads, v].
void standard_decode_case(const SelftestCase& sc, Rng& rng, Table& table) {
  const int n_heads = sc.n_heads, qk = sc.head_dim_qk, v = sc.head_dim_v;
  const std::vector<int>& kv_lens = sc.kv_lens;
  const int batch = static_cast<int>(kv_lens.size());
  int capacity = 0;
  for (int n : kv_lens) capacity = std::max(capacity, n);
  std::vector<uint16_t> q_bits, k_bits, v_bits;
  std::vector<double> q, k, vv;
  bf16_values(static_cast<size_t>(batch) * n_heads * qk, rng, q_bits, q);
  bf16_values(static_cast<size_t>(batch) * capacity * n_heads * qk, rng, k_bits, k);
  bf16_values(static_cast<size_t>(batch) * capacity * n_heads * v, rng, v_bits, vv);
  const float scale = sc.scale;

  std::vector<double> ref(static_cast<size_t>(batch) * n_heads * v, 0.0);
  std::vector<double> p(static_cast<size_t>(capacity));
  for (int b = 0; b < batch; ++b) {
    const int n_kv = kv_lens[static_cast<size_t>(b)];
    for (int h = 0; h < n_heads; ++h) {
      const double* qh = q.data() + (static_cast<size_t>(b) * n_heads + h) * qk;
      double max = -INFINITY;
      for (int s = 0; s < n_kv; ++s) {
        const double* kh = k.data() + ((static_cast<size_t>(b) * capacity + s) * n_heads + h) * qk;
        double dot = 0;
        for (int d = 0; d < qk; ++d) dot += qh[d] * kh[d];
        p[static_cast<size_t>(s)] = scale * dot;
        max = std::max(max, p[static_cast<size_t>(s)]);
      }
      double sum = 0;
      for (int s = 0; s < n_kv; ++s) sum += (p[static_cast<size_t>(s)] = std::exp(p[static_cast<size_t>(s)] - max));
      double* o = ref.data() + (static_cast<size_t>(b) * n_heads + h) * v;
      for (int s = 0; s < n_kv; ++s) {
        const double* vh = vv.data() + ((static_cast<size_t>(b) * capacity + s) * n_heads + h) * v;
        for (int d = 0; d < v; ++d) o[d] += p[static_cast<size_t>(s)] / sum * vh[d];
      }
    }
  }

  const auto d_q = upload(q_bits);
  const auto d_k = upload(k_bits);
  const auto d_v = upload(v_bits);
  const auto d_lens = upload(std::vector<int32_t>(kv_lens.begin(), kv_lens.end()));
  auto out = poisoned<float>(ref.size());
  const cuda::StandardDecodeParams params = cuda::standard_decode_params(
      {.batch = batch, .n_heads = n_heads, .capacity = capacity, .head_dim_qk = qk, .head_dim_v = v, .scale = scale},
      {.q = reinterpret_cast<const __nv_bfloat16*>(d_q.data()),
       .k = reinterpret_cast<const __nv_bfloat16*>(d_k.data()),
       .v = reinterpret_cast<const __nv_bfloat16*>(d_v.data()),
       .kv_lens = d_lens.data(),
       .out = out.data()});
  const cuda::StandardDecodePlan plan = cuda::plan_standard_decode(params);
  cuda::DeviceBuffer<std::byte> workspace(std::max<size_t>(plan.workspace_bytes, 16), "selftest workspace");
  cuda::run_standard_decode(params, plan, workspace.data(), workspace.bytes(), nullptr);
  table.add(sc.name, sc.shape, rel_error(download(out.data(), ref.size()), ref), sc.bound);
}

/// Flash prefill of T queries at positions pos0 .. pos0 + T - 1 over a contiguous per-head K/V cache
/// of pos0 + T positions; sparse: each query sees only a random list of top_k positions (built into a
/// key mask by run_build_key_mask), still causal.
void flash_prefill_case(const SelftestCase& sc, Rng& rng, Table& table) {
  const int N = sc.n_heads, qk = sc.head_dim_qk, V = sc.head_dim_v, pos0 = sc.kv_lens[0], T = sc.kv_lens[1];
  const int n_keys = pos0 + T;
  std::vector<uint16_t> q_bits, k_bits, v_bits;
  std::vector<double> q, k, v;
  bf16_values(static_cast<size_t>(T) * N * qk, rng, q_bits, q);
  bf16_values(static_cast<size_t>(n_keys) * N * qk, rng, k_bits, k);
  bf16_values(static_cast<size_t>(n_keys) * N * V, rng, v_bits, v);
  // Sparse lists: per query, top_k random positions (some beyond the query: causality must drop them),
  // padded with -1.
  const bool sparse = sc.top_k > 0;
  std::vector<int32_t> lists;
  std::vector<std::vector<bool>> visible(static_cast<size_t>(T),
                                         std::vector<bool>(static_cast<size_t>(n_keys), !sparse));
  if (sparse) {
    lists.assign(static_cast<size_t>(T) * sc.top_k, -1);
    std::vector<int32_t> all(static_cast<size_t>(n_keys));
    std::iota(all.begin(), all.end(), 0);
    for (int t = 0; t < T; ++t) {
      std::shuffle(all.begin(), all.end(), rng);
      const int n = std::min(sc.top_k - 1, n_keys);  // one entry left as padding
      for (int i = 0; i < n; ++i) {
        lists[static_cast<size_t>(t) * sc.top_k + i] = all[static_cast<size_t>(i)];
        visible[static_cast<size_t>(t)][static_cast<size_t>(all[static_cast<size_t>(i)])] = true;
      }
      // Every query sees at least itself (the forward pass's selection always includes the diagonal).
      const int self = pos0 + t;
      if (!visible[static_cast<size_t>(t)][static_cast<size_t>(self)]) {
        lists[static_cast<size_t>(t) * sc.top_k] = self;
        visible[static_cast<size_t>(t)][static_cast<size_t>(all[0])] = false;
        visible[static_cast<size_t>(t)][static_cast<size_t>(self)] = true;
      }
    }
  }
  std::vector<double> ref(static_cast<size_t>(T) * N * V, 0.0), p(static_cast<size_t>(n_keys));
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < N; ++h) {
      const double* qh = q.data() + (static_cast<size_t>(t) * N + h) * qk;
      double max = -INFINITY;
      for (int s = 0; s <= pos0 + t; ++s) {
        p[static_cast<size_t>(s)] = -INFINITY;
        if (!visible[static_cast<size_t>(t)][static_cast<size_t>(s)]) continue;
        const double* kh = k.data() + (static_cast<size_t>(s) * N + h) * qk;
        double dot = 0;
        for (int d = 0; d < qk; ++d) dot += qh[d] * kh[d];
        p[static_cast<size_t>(s)] = sc.scale * dot;
        max = std::max(max, p[static_cast<size_t>(s)]);
      }
      double sum = 0;
      for (int s = 0; s <= pos0 + t; ++s) {
        sum += (p[static_cast<size_t>(s)] =
                    std::isfinite(p[static_cast<size_t>(s)]) ? std::exp(p[static_cast<size_t>(s)] - max) : 0.0);
      }
      double* o = ref.data() + (static_cast<size_t>(t) * N + h) * V;
      for (int s = 0; s <= pos0 + t; ++s) {
        if (p[static_cast<size_t>(s)] == 0.0) continue;
        const double* vh = v.data() + (static_cast<size_t>(s) * N + h) * V;
        for (int d = 0; d < V; ++d) o[d] += p[static_cast<size_t>(s)] / sum * vh[d];
      }
    }
  }
  const auto d_q = upload(q_bits);
  const auto d_k = upload(k_bits);
  const auto d_v = upload(v_bits);
  const auto d_lists = upload(lists);
  const int64_t mask_stride = (n_keys + 31) / 32;
  auto mask = poisoned<uint32_t>(static_cast<size_t>(T) * mask_stride);
  if (sparse) {
    cuda::run_build_key_mask({.indices = d_lists.data(),
                              .index_stride = sc.top_k,
                              .top_k = sc.top_k,
                              .n_queries = T,
                              .n_keys = n_keys,
                              .mask = mask.data(),
                              .mask_stride = mask_stride},
                             nullptr);
  }
  auto out = poisoned<float>(ref.size());
  cuda::FlashPrefillParams params = cuda::flash_prefill_params(
      {.n_heads = N, .capacity = n_keys, .head_dim_qk = qk, .head_dim_v = V, .scale = sc.scale}, T,
      {.q = reinterpret_cast<const __nv_bfloat16*>(d_q.data()),
       .k = reinterpret_cast<const __nv_bfloat16*>(d_k.data()),
       .v = reinterpret_cast<const __nv_bfloat16*>(d_v.data()),
       .out = out.data()});
  params.key_mask = sparse ? mask.data() : nullptr;
  params.key_mask_stride = sparse ? mask_stride : 0;
  cuda::run_flash_prefill(params, nullptr);
  table.add(sc.name, sc.shape, rel_error(download(out.data(), ref.size()), ref), sc.bound);
}

/// The DSA indexer: scores of q_len queries per sequence over each sequence's cached indexer keys
/// (the model's heads, zero-padded to the kernel's 32 as the forward pass pads them), then the top-k
/// of the GPU's own scores against an exact CPU selection.
void dsa_indexer_case(const SelftestCase& sc, Rng& rng, Table& table) {
  if (sc.n_heads > cuda::kDsaIndexHeads || sc.head_dim_qk != cuda::kDsaIndexHeadDim) {
    table.error(sc.name, sc.shape, "the kernels take at most 32 indexer heads of 128 dims");
    return;
  }
  constexpr int NH = cuda::kDsaIndexHeads, D = cuda::kDsaIndexHeadDim;
  const int B = static_cast<int>(sc.kv_lens.size()), QL = sc.rows;
  const int max_kv = *std::max_element(sc.kv_lens.begin(), sc.kv_lens.end());
  const int64_t scores_stride = (max_kv + 7) / 8 * 8;
  std::vector<uint16_t> q_bits, k_bits;
  std::vector<double> q, k;
  bf16_values(static_cast<size_t>(B) * QL * NH * D, rng, q_bits, q);
  bf16_values(static_cast<size_t>(B) * max_kv * D, rng, k_bits, k);
  std::vector<float> w(static_cast<size_t>(B) * QL * NH, 0.0f);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (size_t r = 0; r < static_cast<size_t>(B) * QL; ++r) {
    for (int h = 0; h < NH; ++h) {
      if (h < sc.n_heads) {
        w[r * NH + static_cast<size_t>(h)] = normal(rng) / std::sqrt(static_cast<float>(sc.n_heads));
      } else {
        std::fill_n(q_bits.begin() + static_cast<ptrdiff_t>((r * NH + h) * D), D, uint16_t{0});
        std::fill_n(q.begin() + static_cast<ptrdiff_t>((r * NH + h) * D), D, 0.0);
      }
    }
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  std::vector<double> ref;
  std::vector<float> got_visible;
  const auto d_q = upload(q_bits);
  const auto d_k = upload(k_bits);
  const auto d_w = upload(w);
  const auto d_lens = upload(std::vector<int32_t>(sc.kv_lens.begin(), sc.kv_lens.end()));
  auto scores = poisoned<float>(static_cast<size_t>(B) * QL * scores_stride);
  cuda::run_dsa_index_scores({.q = reinterpret_cast<const __nv_bfloat16*>(d_q.data()),
                              .q_token_stride = static_cast<int64_t>(NH) * D,
                              .q_head_stride = D,
                              .weights = d_w.data(),
                              .weights_token_stride = NH,
                              .k_cache = {.data = reinterpret_cast<const __nv_bfloat16*>(d_k.data()),
                                          .page_stride = static_cast<int64_t>(max_kv) * D,
                                          .token_stride = D},
                              .kv_lens = d_lens.data(),
                              .batch = B,
                              .q_len = QL,
                              .max_kv_len = max_kv,
                              .scale = scale,
                              .scores = scores.data(),
                              .scores_stride = scores_stride},
                             nullptr);
  const auto got = download(scores.data(), static_cast<size_t>(B) * QL * scores_stride);
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < QL; ++t) {
      const size_t row = static_cast<size_t>(b) * QL + t;
      const int n_visible = sc.kv_lens[static_cast<size_t>(b)] - QL + t + 1;
      for (int s = 0; s < n_visible; ++s) {
        const double* kr = k.data() + (static_cast<size_t>(b) * max_kv + s) * D;
        double total = 0;
        for (int h = 0; h < NH; ++h) {
          const double* qr = q.data() + (row * NH + h) * D;
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += qr[d] * kr[d];
          total += static_cast<double>(w[row * NH + static_cast<size_t>(h)]) * std::max(0.0, scale * dot);
        }
        ref.push_back(total);
        got_visible.push_back(got[row * scores_stride + static_cast<size_t>(s)]);
      }
    }
  }
  table.add(sc.name + " scores", sc.shape, rel_error(got_visible, ref), sc.bound);

  // Top-k over the GPU's scores: the selection must be exactly the CPU's (ties: lower position).
  const int64_t index_stride = sc.top_k;
  auto indices = poisoned<int32_t>(static_cast<size_t>(B) * QL * index_stride);
  cuda::run_dsa_top_k({.scores = scores.data(),
                       .scores_stride = scores_stride,
                       .kv_lens = d_lens.data(),
                       .batch = B,
                       .q_len = QL,
                       .top_k = sc.top_k,
                       .indices = indices.data(),
                       .index_stride = index_stride},
                      nullptr);
  const auto got_idx = download(indices.data(), static_cast<size_t>(B) * QL * index_stride);
  int differing = 0;
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < QL; ++t) {
      const size_t row = static_cast<size_t>(b) * QL + t;
      const int n_visible = sc.kv_lens[static_cast<size_t>(b)] - QL + t + 1;
      std::vector<int32_t> order(static_cast<size_t>(n_visible));
      std::iota(order.begin(), order.end(), 0);
      const float* sr = got.data() + row * scores_stride;
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t c) { return sr[a] > sr[c]; });
      order.resize(static_cast<size_t>(std::min(n_visible, sc.top_k)));
      std::sort(order.begin(), order.end());
      order.resize(static_cast<size_t>(sc.top_k), -1);
      if (!std::equal(order.begin(), order.end(), got_idx.begin() + static_cast<ptrdiff_t>(row * index_stride))) {
        ++differing;
      }
    }
  }
  table.add(sc.name + " top-k", sc.shape, static_cast<double>(differing) / (B * QL), 0.0);
}

/// KV append: n tokens' rows (n_heads x dim, fp32) into a contiguous bf16 cache of 2 sequences at
/// listed (sequence, position) slots; every cache element must then equal bf16(src) where written and
/// its former value elsewhere. The error is the fraction of elements that differ.
void kv_append_case(const SelftestCase& sc, Rng& rng, Table& table) {
  const int n = sc.rows, H = sc.n_heads, dim = sc.head_dim_qk, capacity = 48, batch = 2;
  const int64_t token_stride = static_cast<int64_t>(H) * dim;
  std::vector<uint16_t> cache(static_cast<size_t>(batch) * capacity * token_stride);
  std::uniform_int_distribution<int> bits(0, 0xFFFF);
  for (uint16_t& v : cache) v = static_cast<uint16_t>(bits(rng) & 0x3FFF);  // finite, distinct from bf16(src) mostly
  // (sequence, position) slots: both ends of the capacity, the sequences interleaved.
  const std::vector<int32_t> seq = {0, 1, 1, 0, 1, 0, 1, 0};
  const std::vector<int32_t> pos = {0, 47, 3, 29, 30, 47, 0, 12};
  if (n > static_cast<int>(seq.size())) throw Error(ErrorCode::internal, "selftest: kv_append has 8 slots");
  const auto src = normal_values(static_cast<size_t>(n) * token_stride, rng, 3.0f);
  std::vector<uint16_t> want = cache;
  for (int i = 0; i < n; ++i) {
    for (int64_t j = 0; j < token_stride; ++j) {
      want[(static_cast<size_t>(seq[static_cast<size_t>(i)]) * capacity +
            static_cast<size_t>(pos[static_cast<size_t>(i)])) *
               static_cast<size_t>(token_stride) +
           static_cast<size_t>(j)] =
          fp32_to_bf16(src[static_cast<size_t>(i) * static_cast<size_t>(token_stride) + static_cast<size_t>(j)]);
    }
  }
  auto d_cache = upload(cache);
  const auto d_src = upload(src);
  const auto d_seq = upload(seq);
  const auto d_pos = upload(pos);
  const cuda::PagedRows<__nv_bfloat16> dst{.data = reinterpret_cast<__nv_bfloat16*>(d_cache.data()),
                                           .page_stride = static_cast<int64_t>(capacity) * token_stride,
                                           .token_stride = token_stride,
                                           .head_stride = H > 1 ? dim : 0};
  if (H == 1 && sc.k > 0 && sc.k < dim) {
    // The latent row in two appends, as the MLA backend writes it: c at 0, k_pe at offset k.
    cuda::run_kv_cache_append({.src = d_src.data(),
                               .src_type = cuda::AppendSourceType::f32,
                               .src_token_stride = token_stride,
                               .n_tokens = n,
                               .n_heads = 1,
                               .dim = sc.k,
                               .dst = dst,
                               .dst_offset = 0,
                               .batch_index = d_seq.data(),
                               .positions = d_pos.data()},
                              nullptr);
    cuda::run_kv_cache_append({.src = d_src.data() + sc.k,
                               .src_type = cuda::AppendSourceType::f32,
                               .src_token_stride = token_stride,
                               .n_tokens = n,
                               .n_heads = 1,
                               .dim = dim - sc.k,
                               .dst = dst,
                               .dst_offset = sc.k,
                               .batch_index = d_seq.data(),
                               .positions = d_pos.data()},
                              nullptr);
  } else {
    cuda::run_kv_cache_append({.src = d_src.data(),
                               .src_type = cuda::AppendSourceType::f32,
                               .src_token_stride = token_stride,
                               .src_head_stride = dim,
                               .n_tokens = n,
                               .n_heads = H,
                               .dim = dim,
                               .dst = dst,
                               .dst_offset = 0,
                               .batch_index = d_seq.data(),
                               .positions = d_pos.data()},
                              nullptr);
  }
  const auto got = download(d_cache.data(), cache.size());
  size_t differing = 0;
  for (size_t i = 0; i < got.size(); ++i) differing += got[i] != want[i] ? 1 : 0;
  table.add(sc.name, sc.shape, static_cast<double>(differing) / static_cast<double>(got.size()), sc.bound);
}

void run_case(const SelftestCase& c, Rng& rng, Table& table, std::unique_ptr<ExpertSet>& experts) {
  switch (c.family) {
    case SelftestFamily::dequantize:
    case SelftestFamily::gemv:
    case SelftestFamily::gemm:
      return matrix_cases(c, rng, table);
    case SelftestFamily::rms_norm:
    case SelftestFamily::rms_norm_residual:
      return rms_norm_case(c, rng, table);
    case SelftestFamily::layer_norm:
      return layer_norm_case(c, rng, table);
    case SelftestFamily::rope_yarn:
      return rope_case(c, rng, table);
    case SelftestFamily::moe_router:
      return moe_router_case(c, rng, table);
    case SelftestFamily::moe_decode:
    case SelftestFamily::moe_prefill:
      return moe_experts_case(c, rng, table, experts);
    case SelftestFamily::silu_gate:
      return silu_gate_case(c, rng, table);
    case SelftestFamily::embedding:
      return embedding_case(c, rng, table);
    case SelftestFamily::mla_decode:
      return mla_decode_case(c, rng, table);
    case SelftestFamily::standard_decode:
      return standard_decode_case(c, rng, table);
    case SelftestFamily::flash_prefill:
      return flash_prefill_case(c, rng, table);
    case SelftestFamily::dsa_indexer:
      return dsa_indexer_case(c, rng, table);
    case SelftestFamily::kv_append:
      return kv_append_case(c, rng, table);
  }
}

}  // namespace

bool selftest_built() noexcept { return true; }

std::string selftest_identity(int ordinal) {
  const cuda::DeviceCaps& caps = cuda::device_caps(ordinal);
  int driver = 0;
  LATTE_CUDA_CHECK(cudaDriverGetVersion(&driver));
  return "sm" + std::to_string(caps.cc_major) + std::to_string(caps.cc_minor) + "-" + std::to_string(driver);
}

SelftestResult run_selftest_cases(int ordinal, const SelftestPlan& plan) {
  LATTE_CUDA_CHECK(cudaSetDevice(ordinal));
  const uint64_t seed = std::random_device{}();
  Rng rng(seed);
  Table table;
  const cuda::DeviceCaps& caps = cuda::device_caps(ordinal);
  const auto t0 = std::chrono::steady_clock::now();
  table.text += "device " + std::to_string(ordinal) + ": " + caps.name + " (" + selftest_identity(ordinal) +
                "), shapes of " + plan.label + ", seed " + std::to_string(seed) + "\n";
  std::unique_ptr<ExpertSet> experts;
  for (const SelftestCase& c : plan.cases) {
    try {
      run_case(c, rng, table, experts);
    } catch (const std::exception& e) {
      table.error(c.name, c.shape, e.what());
      // A failed launch may leave a sticky CUDA error; later cases report their own.
      (void)cudaGetLastError();
    }
  }
  for (const std::string& line : plan.not_covered) table.text += "not covered: " + line + "\n";
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  char summary[160];
  std::snprintf(summary, sizeof summary, "%d checks, %d mismatched, %.1f s\n", table.n_cases, table.n_failed, seconds);
  table.text += summary;
  SelftestResult r;
  r.ran = true;
  r.passed = table.passed;
  r.table = table.text;
  return r;
}

}  // namespace latte::diagnostics::detail
