// The GPU self-test cases (CUDA builds): each kernel family on fresh random data at the shapes of the
// built-in presets, against the CPU reference, with poisoned outputs (an unwritten element is NaN).
//
// Cases and bounds (normalised error ||gpu - cpu|| / ||cpu||):
//   dequantize_rows, fp32 output, every GPU type      1e-6   (exact decode; only fp32 rounding)
//   gemv_quant, 1 and 4 tokens, every GPU type        1e-4   (fp32 sums in another order)
//   rms_norm, fp32                                     1e-5
//   mla_decode (absorbed MLA attention, bf16 inputs)   1e-2   (bf16 probabilities inside the kernel)
//   standard_decode (per-head K/V, bf16 inputs)        1e-2
// Shapes: rows = the latent projection's L + R = 576 (not a multiple of any tile); k = the deepseek-v3
// hidden size 7168 for the 256-value block types, the glm-4.7-flash hidden size 2048 for the others.
// Types latte cannot quantize on the CPU (no reference encoder, e.g. mxfp4) are not covered here; the
// attention kernels but dense MLA and standard decode (flash prefill, DSA) are not covered yet.
#include "diagnostics/selftest_cases.hpp"
#include "cuda/check.hpp"
#include "cuda/dequantize.hpp"
#include "cuda/device_buffer.hpp"
#include "cuda/device_caps.hpp"
#include "cuda/gemv_quant.hpp"
#include "cuda/mla_decode.hpp"
#include "cuda/norms.hpp"
#include "cuda/standard_decode.hpp"

#include <latte/error.hpp>
#include <latte/quant.hpp>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace latte::diagnostics::detail {

namespace {

const std::vector<GgmlType>& gpu_types() {
  static const std::vector<GgmlType> types = {
      GgmlType::f32,  GgmlType::f16,   GgmlType::bf16, GgmlType::q4_0, GgmlType::q4_1, GgmlType::q5_0, GgmlType::q5_1,
      GgmlType::q8_0, GgmlType::mxfp4, GgmlType::q2_k, GgmlType::q3_k, GgmlType::q4_k, GgmlType::q5_k, GgmlType::q6_k};
  return types;
}

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
  cuda::DeviceBuffer<T> d(host.size(), "selftest upload");
  LATTE_CUDA_CHECK(cudaMemcpy(d.data(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

std::vector<float> download(const float* device, size_t n) {
  std::vector<float> host(n);
  LATTE_CUDA_CHECK(cudaDeviceSynchronize());
  LATTE_CUDA_CHECK(cudaMemcpy(host.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost));
  return host;
}

struct Table {
  std::string text;
  bool passed = true;
  void add(const std::string& kernel, const std::string& shape, double err, double bound) {
    const bool ok = err <= bound;
    passed = passed && ok;
    char line[256];
    std::snprintf(line, sizeof line, "%-28s %-22s rel err %-10.3g bound %-8.0e %s\n", kernel.c_str(), shape.c_str(),
                  err, bound, ok ? "ok" : "MISMATCH");
    text += line;
  }
};

/// `rows` rows of `k` random values quantized to `type` (valid blocks by construction).
std::vector<uint8_t> random_rows(GgmlType type, int rows, int k, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(static_cast<size_t>(k));
  const size_t rb = row_bytes(type, static_cast<uint64_t>(k));
  std::vector<uint8_t> out(rb * static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) {
    for (float& v : values) v = normal(rng);
    quantize_row(type, values.data(), out.data() + rb * static_cast<size_t>(r), k);
  }
  return out;
}

void dequantize_and_gemv(GgmlType type, int rows, int k, std::mt19937_64& rng, Table& table) {
  const std::string label(type_name(type));
  const std::string shape = std::to_string(rows) + "x" + std::to_string(k);
  const auto host = random_rows(type, rows, k, rng);
  std::vector<float> dense(static_cast<size_t>(rows) * k);
  dequantize_rows(type, host.data(), dense.data(), rows, k);
  const auto w = upload(host);

  // dequantize_rows -> fp32
  cuda::DeviceBuffer<float> out(dense.size(), "selftest output");
  LATTE_CUDA_CHECK(cudaMemset(out.data(), 0xFF, out.bytes()));
  cuda::dequantize_rows({.type = type,
                         .weight = w.data(),
                         .weight_bytes = static_cast<int64_t>(host.size()),
                         .n_source_rows = rows,
                         .n_rows = rows,
                         .k = k,
                         .row_ids = nullptr,
                         .out = out.data(),
                         .out_stride = k,
                         .out_type = cuda::DequantOut::f32},
                        nullptr);
  table.add("dequantize_rows " + label, shape,
            rel_error(download(out.data(), dense.size()), std::vector<double>(dense.begin(), dense.end())), 1e-6);

  // gemv_quant, 1 and 4 tokens
  if (!cuda::gemv_supports(type)) return;
  for (int n_tokens : {1, 4}) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n_tokens) * k);
    for (float& v : x) v = normal(rng);
    std::vector<double> ref(static_cast<size_t>(n_tokens) * rows);
    for (int t = 0; t < n_tokens; ++t) {
      for (int r = 0; r < rows; ++r) {
        double s = 0;
        for (int i = 0; i < k; ++i)
          s += static_cast<double>(dense[static_cast<size_t>(r) * k + i]) * x[static_cast<size_t>(t) * k + i];
        ref[static_cast<size_t>(t) * rows + r] = s;
      }
    }
    const auto dx = upload(x);
    cuda::DeviceBuffer<float> y(ref.size(), "selftest output");
    LATTE_CUDA_CHECK(cudaMemset(y.data(), 0xFF, y.bytes()));
    cuda::GemvParams p;
    p.type = type;
    p.weight = w.data();
    p.weight_bytes = static_cast<int64_t>(host.size());
    p.n_rows = rows;
    p.k = k;
    p.x = dx.data();
    p.x_stride = k;
    p.y = y.data();
    p.y_stride = rows;
    p.n_tokens = n_tokens;
    cuda::gemv_quant(p, nullptr);
    table.add("gemv_quant " + label + " x" + std::to_string(n_tokens), shape,
              rel_error(download(y.data(), ref.size()), ref), 1e-4);
  }
}

void rms_norm_case(int rows, int n, std::mt19937_64& rng, Table& table) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows) * n), w(static_cast<size_t>(n));
  for (float& v : x) v = normal(rng);
  for (float& v : w) v = 1.0f + 0.1f * normal(rng);
  const float eps = 1e-6f;
  std::vector<double> ref(x.size());
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int i = 0; i < n; ++i)
      ss += static_cast<double>(x[static_cast<size_t>(r) * n + i]) * x[static_cast<size_t>(r) * n + i];
    const double inv = 1.0 / std::sqrt(ss / n + eps);
    for (int i = 0; i < n; ++i)
      ref[static_cast<size_t>(r) * n + i] = x[static_cast<size_t>(r) * n + i] * inv * w[static_cast<size_t>(i)];
  }
  const auto dx = upload(x);
  const auto dw = upload(w);
  cuda::DeviceBuffer<float> out(x.size(), "selftest output");
  LATTE_CUDA_CHECK(cudaMemset(out.data(), 0xFF, out.bytes()));
  cuda::RmsNormParams p;
  p.x = dx.data();
  p.x_stride = n;
  p.weight = dw.data();
  p.n = n;
  p.rows = rows;
  p.eps = eps;
  p.out = out.data();
  p.out_stride = n;
  cuda::rms_norm(p, nullptr);
  table.add("rms_norm f32", std::to_string(rows) + "x" + std::to_string(n),
            rel_error(download(out.data(), x.size()), ref), 1e-5);
}

/// Dense MLA decode, one query token per sequence, fp32 output, against a float64 softmax over the
/// same bf16 values. Cache: [batch, capacity, 576] contiguous.
void mla_decode_case(int n_heads, std::vector<int> kv_lens, std::mt19937_64& rng, Table& table) {
  constexpr int L = cuda::kMlaLatentDim, R = cuda::kMlaRopeDim, row = cuda::kMlaCacheRow;
  const int batch = static_cast<int>(kv_lens.size());
  int capacity = 0;
  for (int n : kv_lens) capacity = std::max(capacity, n);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto bf16_values = [&](size_t n, std::vector<uint16_t>& bits, std::vector<double>& values) {
    bits.resize(n);
    values.resize(n);
    for (size_t i = 0; i < n; ++i) {
      bits[i] = fp32_to_bf16(normal(rng));
      values[i] = bf16_to_fp32(bits[i]);
    }
  };
  std::vector<uint16_t> q_lat_bits, q_rope_bits, cache_bits;
  std::vector<double> q_lat, q_rope, cache;
  bf16_values(static_cast<size_t>(batch) * n_heads * L, q_lat_bits, q_lat);
  bf16_values(static_cast<size_t>(batch) * n_heads * R, q_rope_bits, q_rope);
  bf16_values(static_cast<size_t>(batch) * capacity * row, cache_bits, cache);
  const float scale = 1.0f / std::sqrt(192.0f);

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
  cuda::DeviceBuffer<float> out(ref.size(), "selftest output");
  LATTE_CUDA_CHECK(cudaMemset(out.data(), 0xFF, out.bytes()));
  cuda::MlaDecodeParams params;
  params.q_latent = reinterpret_cast<const __nv_bfloat16*>(d_q_lat.data());
  params.q_latent_token_stride = static_cast<int64_t>(n_heads) * L;
  params.q_latent_head_stride = L;
  params.q_rope = reinterpret_cast<const __nv_bfloat16*>(d_q_rope.data());
  params.q_rope_token_stride = static_cast<int64_t>(n_heads) * R;
  params.q_rope_head_stride = R;
  params.cache.data = reinterpret_cast<const __nv_bfloat16*>(d_cache.data());
  params.cache.page_stride = static_cast<int64_t>(capacity) * row;
  params.cache.token_stride = row;
  params.kv_lens = d_lens.data();
  params.batch = batch;
  params.q_len = 1;
  params.n_heads = n_heads;
  params.max_kv_len = capacity;
  params.scale = scale;
  params.out_type = cuda::AttnOutputType::f32;
  params.out = out.data();
  const cuda::MlaDecodePlan plan = cuda::plan_mla_decode(params);
  cuda::DeviceBuffer<std::byte> workspace(std::max<size_t>(plan.workspace_bytes, 16), "selftest workspace");
  cuda::run_mla_decode(params, plan, workspace.data(), workspace.bytes(), nullptr);
  std::string shape = std::to_string(n_heads) + " heads, kv";
  for (int n : kv_lens) {
    shape += ' ';
    shape += std::to_string(n);
  }
  table.add("mla_decode bf16", shape, rel_error(download(out.data(), ref.size()), ref), 1e-2);
}

/// Dense standard decode, fp32 output: K [batch, capacity, heads, qk], V [batch, capacity, heads, v].
void standard_decode_case(int n_heads, int qk, int v, std::vector<int> kv_lens, std::mt19937_64& rng, Table& table) {
  const int batch = static_cast<int>(kv_lens.size());
  int capacity = 0;
  for (int n : kv_lens) capacity = std::max(capacity, n);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto bf16_values = [&](size_t n, std::vector<uint16_t>& bits, std::vector<double>& values) {
    bits.resize(n);
    values.resize(n);
    for (size_t i = 0; i < n; ++i) {
      bits[i] = fp32_to_bf16(normal(rng));
      values[i] = bf16_to_fp32(bits[i]);
    }
  };
  std::vector<uint16_t> q_bits, k_bits, v_bits;
  std::vector<double> q, k, vv;
  bf16_values(static_cast<size_t>(batch) * n_heads * qk, q_bits, q);
  bf16_values(static_cast<size_t>(batch) * capacity * n_heads * qk, k_bits, k);
  bf16_values(static_cast<size_t>(batch) * capacity * n_heads * v, v_bits, vv);
  const float scale = 1.0f / std::sqrt(static_cast<float>(qk));

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
  cuda::DeviceBuffer<float> out(ref.size(), "selftest output");
  LATTE_CUDA_CHECK(cudaMemset(out.data(), 0xFF, out.bytes()));
  cuda::StandardDecodeParams params;
  params.q = reinterpret_cast<const __nv_bfloat16*>(d_q.data());
  params.q_batch_stride = static_cast<int64_t>(n_heads) * qk;
  params.q_head_stride = qk;
  params.k_cache.data = reinterpret_cast<const __nv_bfloat16*>(d_k.data());
  params.k_cache.page_stride = static_cast<int64_t>(capacity) * n_heads * qk;
  params.k_cache.token_stride = static_cast<int64_t>(n_heads) * qk;
  params.k_cache.head_stride = qk;
  params.v_cache.data = reinterpret_cast<const __nv_bfloat16*>(d_v.data());
  params.v_cache.page_stride = static_cast<int64_t>(capacity) * n_heads * v;
  params.v_cache.token_stride = static_cast<int64_t>(n_heads) * v;
  params.v_cache.head_stride = v;
  params.kv_lens = d_lens.data();
  params.batch = batch;
  params.n_heads = n_heads;
  params.head_dim_qk = qk;
  params.head_dim_v = v;
  params.max_kv_len = capacity;
  params.scale = scale;
  params.out_type = cuda::AttnOutputType::f32;
  params.out = out.data();
  const cuda::StandardDecodePlan plan = cuda::plan_standard_decode(params);
  cuda::DeviceBuffer<std::byte> workspace(std::max<size_t>(plan.workspace_bytes, 16), "selftest workspace");
  cuda::run_standard_decode(params, plan, workspace.data(), workspace.bytes(), nullptr);
  std::string shape = std::to_string(n_heads) + "x(" + std::to_string(qk) + "," + std::to_string(v) + "), kv";
  for (int n : kv_lens) {
    shape += ' ';
    shape += std::to_string(n);
  }
  table.add("standard_decode bf16", shape, rel_error(download(out.data(), ref.size()), ref), 1e-2);
}

}  // namespace

bool selftest_built() noexcept { return true; }

std::string selftest_identity(int ordinal) {
  const cuda::DeviceCaps& caps = cuda::device_caps(ordinal);
  int driver = 0;
  LATTE_CUDA_CHECK(cudaDriverGetVersion(&driver));
  return "sm" + std::to_string(caps.cc_major) + std::to_string(caps.cc_minor) + "-" + std::to_string(driver);
}

SelftestResult run_selftest_cases(int ordinal) {
  LATTE_CUDA_CHECK(cudaSetDevice(ordinal));
  std::mt19937_64 rng(std::random_device{}());
  Table table;
  const cuda::DeviceCaps& caps = cuda::device_caps(ordinal);
  table.text += "device " + std::to_string(ordinal) + ": " + caps.name + " (" + selftest_identity(ordinal) + ")\n";
  for (GgmlType type : gpu_types()) {
    if (!type_traits(type).quantizable) continue;
    dequantize_and_gemv(type, 576, type_traits(type).block_values == 256 ? 7168 : 2048, rng, table);
  }
  rms_norm_case(7, 7168, rng, table);
  rms_norm_case(5, 512, rng, table);
  mla_decode_case(16, {37, 700}, rng, table);                 // deepseek-v2-lite heads
  mla_decode_case(128, {1000, 5}, rng, table);                // deepseek-v3 heads
  standard_decode_case(16, 192, 128, {37, 700}, rng, table);  // deepseek dims
  standard_decode_case(8, 256, 256, {300, 9}, rng, table);    // glm-5 dims
  SelftestResult r;
  r.ran = true;
  r.passed = table.passed;
  r.table = table.text;
  return r;
}

}  // namespace latte::diagnostics::detail
