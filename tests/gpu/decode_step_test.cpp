// The fused decode step (src/cuda/decode_step*.{hpp,cpp,cu}) against a float64 reference of one decode
// step written here from DESIGN.md's model math (RMSNorm, the attention input projection, YaRN RoPE on
// interleaved pairs, absorbed MLA attention over a bf16 latent cache, group-limited routing, gated
// experts), using weights that latte's CPU quantizer encoded and its CPU decoder decoded back. Random
// shapes and weight types per matrix, fresh seeds (printed), NaN-poisoned outputs. Runs on the GPU
// (latte_gpu_tests) and on the CPU emulation of the kernels (tests/emulation), with a small grid there.
#include <doctest/doctest.h>
#include <latte/model.hpp>
#include <latte/quant.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "cuda/decode_step.hpp"
#include "cuda/device_weights.hpp"
#include "gpu/attention_test_support.hpp"

namespace {

using latte::GgmlType;
using latte::ModelConfig;
using namespace latte::test::attention;
namespace cuda = latte::cuda;

/// A random matrix: its encoded rows on the device and its decoded values for the reference.
struct TestMatrix {
  GgmlType type = GgmlType::f32;
  int64_t rows = 0, k = 0;
  std::vector<float> values;  // rows x k, decoded
  cuda::DeviceBuffer<uint8_t> device;
  [[nodiscard]] cuda::DeviceMatrix view() const {
    return {.type = type,
            .data = reinterpret_cast<const std::byte*>(device.data()),
            .rows = rows,
            .k = k,
            .row_bytes = static_cast<int64_t>(latte::row_bytes(type, static_cast<uint64_t>(k)))};
  }
  [[nodiscard]] const float* row(int64_t r) const { return values.data() + r * k; }
};

/// A random type that can encode rows of k values.
GgmlType pick_type(int64_t k, Rng& rng) {
  static const GgmlType kinds[] = {GgmlType::q4_k,  GgmlType::q6_k, GgmlType::q5_k, GgmlType::q3_k, GgmlType::q2_k,
                                   GgmlType::q8_0,  GgmlType::q5_0, GgmlType::q4_0, GgmlType::q4_1, GgmlType::q5_1,
                                   GgmlType::mxfp4, GgmlType::f16,  GgmlType::bf16, GgmlType::f32};
  for (;;) {
    const GgmlType t = kinds[rng.uniform_int(0, static_cast<int>(std::size(kinds)) - 1)];
    if (k % latte::type_traits(t).block_values == 0) return t;
  }
}

std::unique_ptr<TestMatrix> random_matrix(int64_t rows, int64_t k, Rng& rng, float scale, GgmlType type) {
  auto m = std::make_unique<TestMatrix>();
  m->type = type;
  m->rows = rows;
  m->k = k;
  const uint64_t rb = latte::row_bytes(type, static_cast<uint64_t>(k));
  std::vector<uint8_t> bytes(rb * static_cast<uint64_t>(rows));
  m->values.resize(static_cast<size_t>(rows * k));
  std::vector<float> src(static_cast<size_t>(k));
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : src) v = rng.uniform(-scale, scale);
    latte::quantize_row(type, src.data(), bytes.data() + r * rb, k);
    latte::dequantize_row(type, bytes.data() + r * rb, m->values.data() + r * k, k);
  }
  m->device = upload(bytes);
  return m;
}

struct TestVector {
  std::vector<float> values;
  cuda::DeviceBuffer<float> device;
};
std::unique_ptr<TestVector> random_vector(int64_t n, Rng& rng, float lo, float hi) {
  auto v = std::make_unique<TestVector>();
  v->values.resize(static_cast<size_t>(n));
  for (float& x : v->values) x = rng.uniform(lo, hi);
  v->device = upload(v->values);
  return v;
}

/// One block's weights (absent pieces null).
struct TestLayer {
  std::unique_ptr<TestVector> attn_norm, q_a_norm, kv_a_norm, ffn_norm, bias;
  std::unique_ptr<TestMatrix> query, kv_a, q_b, k_b, v_b, attn_output;
  std::unique_ptr<TestMatrix> gate, up, down;  // dense, or the shared experts
  std::unique_ptr<TestMatrix> router, exp_gate, exp_up, exp_down;
};

struct TestModel {
  ModelConfig c;
  std::unique_ptr<TestMatrix> token_embd, output;
  std::unique_ptr<TestVector> output_norm;
  std::vector<TestLayer> layers;
  std::shared_ptr<cuda::DeviceWeights> weights = std::make_shared<cuda::DeviceWeights>();
};

TestModel make_model(const ModelConfig& c, Rng& rng) {
  TestModel m;
  m.c = c;
  const int H = c.n_embd, N = c.n_head, P = c.qk_nope_head_dim, R = c.qk_rope_head_dim, L = c.kv_lora_rank;
  const int V = c.v_head_dim, Lq = c.q_lora_rank, qk = P + R;
  auto mat = [&](int64_t rows, int64_t k, float gain = 1.0f) {
    return random_matrix(rows, k, rng, gain * 1.7f / std::sqrt(static_cast<float>(k)), pick_type(k, rng));
  };
  m.token_embd = random_matrix(c.n_vocab, H, rng, 1.0f, pick_type(H, rng));
  m.output = mat(c.n_vocab, H);
  m.output_norm = random_vector(H, rng, 0.5f, 1.5f);
  cuda::DeviceWeights& w = *m.weights;
  w.token_embd = m.token_embd->view();
  w.output = m.output->view();
  w.output_norm = m.output_norm->device.data();
  m.layers.resize(static_cast<size_t>(c.n_layer));
  w.layers.resize(static_cast<size_t>(c.n_layer));
  for (int il = 0; il < c.n_layer; ++il) {
    TestLayer& t = m.layers[static_cast<size_t>(il)];
    cuda::DeviceLayer& d = w.layers[static_cast<size_t>(il)];
    t.attn_norm = random_vector(H, rng, 0.5f, 1.5f);
    t.kv_a_norm = random_vector(L, rng, 0.5f, 1.5f);
    t.ffn_norm = random_vector(H, rng, 0.5f, 1.5f);
    d.attn_norm = t.attn_norm->device.data();
    d.kv_a_norm = t.kv_a_norm->device.data();
    d.ffn_norm = t.ffn_norm->device.data();
    t.query = mat(Lq > 0 ? Lq : int64_t{N} * qk, H);
    t.kv_a = mat(L + R, H);
    d.attn_query = t.query->view();
    d.attn_kv_a = t.kv_a->view();
    if (Lq > 0) {
      t.q_a_norm = random_vector(Lq, rng, 0.5f, 1.5f);
      d.q_a_norm = t.q_a_norm->device.data();
      t.q_b = mat(int64_t{N} * qk, Lq);
      d.attn_q_b = t.q_b->view();
    }
    t.k_b = mat(int64_t{N} * L, P, 2.0f);  // per head L rows of P
    t.v_b = mat(int64_t{N} * V, L);        // per head V rows of L
    t.attn_output = mat(H, int64_t{N} * V);
    d.k_b = t.k_b->view();
    d.v_b = t.v_b->view();
    d.attn_output = t.attn_output->view();
    if (!c.is_moe_layer(il)) {
      t.gate = mat(c.n_ff, H);
      t.up = mat(c.n_ff, H);
      t.down = mat(H, c.n_ff);
      d.dense = {.gate = t.gate->view(), .up = t.up->view(), .gate_up = {}, .down = t.down->view()};
      continue;
    }
    const int E = c.n_expert, F = c.n_ff_expert, Fs = c.n_ff_expert * c.n_expert_shared;
    t.router = mat(E, H, 2.0f);
    d.router = t.router->view();
    if (rng.uniform_int(0, 1) == 1) {
      t.bias = random_vector(E, rng, -0.2f, 0.2f);
      d.exp_probs_b = t.bias->device.data();
    }
    t.exp_gate = mat(int64_t{E} * F, H);
    t.exp_up = mat(int64_t{E} * F, H);
    t.exp_down = mat(int64_t{E} * H, F);
    d.experts = {
        .gate = t.exp_gate->view(), .up = t.exp_up->view(), .down = t.exp_down->view(), .gate_up_stride_rows = F};
    if (Fs > 0) {
      t.gate = mat(Fs, H);
      t.up = mat(Fs, H);
      t.down = mat(H, Fs);
      d.shared = {.gate = t.gate->view(), .up = t.up->view(), .gate_up = {}, .down = t.down->view()};
    }
  }
  return m;
}

// ---- the float64 reference ------------------------------------------------------------------------

using Vec = std::vector<double>;

Vec rms_norm(const Vec& x, const float* w, double eps) {
  double ss = 0.0;
  for (double v : x) ss += v * v;
  const double r = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * r * w[i];
  return y;
}

/// rows [r0, r0 + n) of m times x[x0 .. x0 + k).
Vec matvec(const TestMatrix& m, const Vec& x, int64_t r0 = 0, int64_t n = -1, size_t x0 = 0) {
  if (n < 0) n = m.rows;
  Vec y(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    const float* w = m.row(r0 + r);
    double s = 0.0;
    for (int64_t i = 0; i < m.k; ++i) s += static_cast<double>(w[i]) * x[x0 + static_cast<size_t>(i)];
    y[static_cast<size_t>(r)] = s;
  }
  return y;
}

/// ggml's rotation of pair i at `pos`, YaRN per DESIGN.md (cos/sin unscaled).
void rope_pair(const ModelConfig& c, int pos, int i, double& x0, double& x1) {
  const int R = c.qk_rope_head_dim;
  const double extrap = pos * std::pow(static_cast<double>(c.rope_freq_base), -2.0 * i / R);
  double theta = extrap;
  const latte::RopeScaling& rs = c.rope_scaling;
  if (rs.type == latte::RopeScalingType::yarn && rs.factor != 1.0f) {
    auto corr_dim = [&](double rotations) {
      return R * std::log(rs.original_context_length / (rotations * 2.0 * M_PI)) / (2.0 * std::log(c.rope_freq_base));
    };
    const double low = std::max(0.0, std::floor(corr_dim(rs.yarn_beta_fast)));
    const double high = std::min(R - 1.0, std::ceil(corr_dim(rs.yarn_beta_slow)));
    const double ramp = 1.0 - std::min(1.0, std::max(0.0, (i - low) / std::max(0.001, high - low)));
    theta = extrap / rs.factor * (1.0 - ramp) + extrap * ramp;
  }
  const double a = x0, b = x1;
  x0 = a * std::cos(theta) - b * std::sin(theta);
  x1 = a * std::sin(theta) + b * std::cos(theta);
}

/// DESIGN.md's routing: ids and weights of the K experts.
void route(const ModelConfig& c, const Vec& logits, const float* bias, std::vector<int>& ids, std::vector<double>& w) {
  const int E = c.n_expert;
  Vec score(static_cast<size_t>(E)), select(static_cast<size_t>(E));
  if (c.expert_gating == latte::ExpertGating::softmax) {
    double mx = -INFINITY, sum = 0.0;
    for (double v : logits) mx = std::max(mx, v);
    for (int e = 0; e < E; ++e) sum += (score[e] = std::exp(logits[e] - mx));
    for (double& s : score) s /= sum;
  } else {
    for (int e = 0; e < E; ++e) score[e] = 1.0 / (1.0 + std::exp(-logits[e]));
  }
  for (int e = 0; e < E; ++e) select[e] = score[e] + (bias ? bias[e] : 0.0);
  std::vector<bool> allowed(static_cast<size_t>(E), true);
  const int G = std::max(1, c.n_expert_group);
  if (G > 1) {
    const int gs = E / G;
    std::vector<std::pair<double, int>> groups;
    for (int g = 0; g < G; ++g) {
      Vec v(select.begin() + g * gs, select.begin() + (g + 1) * gs);
      std::sort(v.rbegin(), v.rend());
      groups.push_back({gs >= 2 ? v[0] + v[1] : v[0], g});
    }
    std::sort(groups.begin(), groups.end(), [](auto a, auto b) { return a.first > b.first; });
    std::fill(allowed.begin(), allowed.end(), false);
    for (int i = 0; i < c.n_expert_group_used; ++i) {
      for (int e = 0; e < gs; ++e) allowed[static_cast<size_t>(groups[static_cast<size_t>(i)].second * gs + e)] = true;
    }
  }
  std::vector<int> order(static_cast<size_t>(E));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return select[a] > select[b]; });
  ids.clear();
  w.clear();
  double sum = 0.0;
  for (int e : order) {
    if (!allowed[static_cast<size_t>(e)] || static_cast<int>(ids.size()) == c.n_expert_used) continue;
    ids.push_back(e);
    w.push_back(score[e]);
    sum += score[e];
  }
  for (double& x : w) x = x * (c.expert_weights_norm ? 1.0 / sum : 1.0) * c.expert_weights_scale;
}

struct Reference {
  std::vector<Vec> layer_out;            // x after each block
  std::vector<std::vector<float>> rows;  // each block's appended cache row (bf16 values)
  Vec logits;
};

/// One decode step of `token` at position `pos` over caches[il] ([pos][L + R] bf16 values). The row each
/// block appends is rounded to bf16 (ref.rows); attention reads `appended[il]` at `pos` when given (the
/// kernel's own rows: one bf16 rounding that fell the other way must not count as an attention error).
Reference reference_step(const TestModel& m, int token, int pos, const std::vector<std::vector<float>>& caches,
                         const std::vector<std::vector<float>>* appended = nullptr) {
  const ModelConfig& c = m.c;
  const int H = c.n_embd, N = c.n_head, P = c.qk_nope_head_dim, R = c.qk_rope_head_dim, L = c.kv_lora_rank;
  const int V = c.v_head_dim, Lq = c.q_lora_rank, qk = P + R, row = L + R;
  const double eps = c.rms_norm_eps, scale = c.attention_scale();
  Reference ref;
  Vec x(m.token_embd->row(token), m.token_embd->row(token) + H);
  for (int il = 0; il < c.n_layer; ++il) {
    const TestLayer& t = m.layers[static_cast<size_t>(il)];
    const Vec xn = rms_norm(x, t.attn_norm->values.data(), eps);
    Vec q = matvec(*t.query, xn);
    const Vec kv = matvec(*t.kv_a, xn);
    if (Lq > 0) q = matvec(*t.q_b, rms_norm(q, t.q_a_norm->values.data(), eps));
    // the new cache row, bf16 as the cache holds it
    std::vector<float> new_row(static_cast<size_t>(row));
    const Vec c_lat = rms_norm(Vec(kv.begin(), kv.begin() + L), t.kv_a_norm->values.data(), eps);
    for (int i = 0; i < L; ++i) new_row[i] = round_bf16(static_cast<float>(c_lat[i]));
    for (int i = 0; i < R / 2; ++i) {
      double a = kv[L + 2 * i], b = kv[L + 2 * i + 1];
      rope_pair(c, pos, i, a, b);
      new_row[L + 2 * i] = round_bf16(static_cast<float>(a));
      new_row[L + 2 * i + 1] = round_bf16(static_cast<float>(b));
    }
    ref.rows.push_back(new_row);
    const std::vector<float>& cache = caches[static_cast<size_t>(il)];
    const std::vector<float>& last = appended ? (*appended)[static_cast<size_t>(il)] : new_row;
    auto cached = [&](int j, int d) -> double {
      return j < pos ? cache[static_cast<size_t>(j) * row + d] : last[static_cast<size_t>(d)];
    };
    Vec attn(static_cast<size_t>(N) * V);
    for (int h = 0; h < N; ++h) {
      Vec q_pe(q.begin() + h * qk + P, q.begin() + (h + 1) * qk);
      for (int i = 0; i < R / 2; ++i) rope_pair(c, pos, i, q_pe[2 * i], q_pe[2 * i + 1]);
      const Vec ql = matvec(*t.k_b, q, int64_t{h} * L, L, static_cast<size_t>(h) * qk);
      Vec s(static_cast<size_t>(pos + 1));
      for (int j = 0; j <= pos; ++j) {
        double v = 0.0;
        for (int d = 0; d < L; ++d) v += ql[d] * cached(j, d);
        for (int d = 0; d < R; ++d) v += q_pe[d] * cached(j, L + d);
        s[j] = scale * v;
      }
      double mx = -INFINITY, den = 0.0;
      for (double v : s) mx = std::max(mx, v);
      for (double& v : s) den += (v = std::exp(v - mx));
      Vec o_lat(static_cast<size_t>(L), 0.0);
      for (int j = 0; j <= pos; ++j) {
        for (int d = 0; d < L; ++d) o_lat[d] += s[j] / den * cached(j, d);
      }
      const Vec o = matvec(*t.v_b, o_lat, int64_t{h} * V, V);
      std::copy(o.begin(), o.end(), attn.begin() + h * V);
    }
    const Vec out = matvec(*t.attn_output, attn);
    for (int i = 0; i < H; ++i) x[i] += out[i];
    const Vec fn = rms_norm(x, t.ffn_norm->values.data(), eps);
    auto gated_ffn = [&](const TestMatrix& g, const TestMatrix& u, const TestMatrix& d, int64_t r0, int64_t F,
                         int64_t down0, double weight) {
      const Vec a = matvec(g, fn, r0, F), b = matvec(u, fn, r0, F);
      Vec h(static_cast<size_t>(F));
      for (int64_t i = 0; i < F; ++i) h[i] = a[i] / (1.0 + std::exp(-a[i])) * b[i];
      const Vec y = matvec(d, h, down0, H);
      for (int i = 0; i < H; ++i) x[i] += weight * y[i];
    };
    if (!c.is_moe_layer(il)) {
      gated_ffn(*t.gate, *t.up, *t.down, 0, c.n_ff, 0, 1.0);
    } else {
      const Vec logits = matvec(*t.router, fn);
      std::vector<int> ids;
      std::vector<double> w;
      route(c, logits, t.bias ? t.bias->values.data() : nullptr, ids, w);
      const int F = c.n_ff_expert;
      const Vec x_before = x;
      for (size_t k = 0; k < ids.size(); ++k) {
        gated_ffn(*t.exp_gate, *t.exp_up, *t.exp_down, int64_t{ids[k]} * F, F, int64_t{ids[k]} * H, w[k]);
      }
      if (t.down) gated_ffn(*t.gate, *t.up, *t.down, 0, t.gate->rows, 0, 1.0);
    }
    ref.layer_out.push_back(x);
  }
  ref.logits = matvec(*m.output, rms_norm(x, m.output_norm->values.data(), eps));
  return ref;
}

/// max |got - want| / max |want| (a NaN anywhere: infinity).
double rel_max(const std::vector<float>& got, const Vec& want) {
  double err = 0.0, scale = 1e-30;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = std::abs(static_cast<double>(got[i]) - want[i]);
    err = std::isnan(d) ? INFINITY : std::max(err, d);
    scale = std::max(scale, std::abs(want[i]));
  }
  return err / scale;
}

ModelConfig small_config(bool glm_like, Rng& rng) {
  ModelConfig c;
  c.arch = latte::Architecture::deepseek2;
  c.n_vocab = 384;
  c.n_embd = 256;
  c.n_layer = 2;
  c.n_dense_lead = 1;
  c.n_ff = 512;
  c.kv_lora_rank = 512;
  c.qk_rope_head_dim = 64;
  c.rms_norm_eps = 1e-6f;
  c.n_expert = 16;
  c.n_ff_expert = 256;
  if (!glm_like) {  // DeepSeek-V2-Lite-like: no q_lora, softmax gating, 2 shared experts, no YaRN
    c.n_head = 4;
    c.q_lora_rank = 0;
    c.qk_nope_head_dim = 128;
    c.v_head_dim = 128;
    c.n_expert_used = 3;
    c.n_expert_shared = 2;
    c.expert_gating = latte::ExpertGating::softmax;
    c.rope_freq_base = 10000.0f;
  } else {  // GLM-4.7-Flash / V3-like: q_lora, 20 heads (two head groups), sigmoid, groups, YaRN
    c.n_head = 20;
    c.q_lora_rank = 256;
    c.qk_nope_head_dim = 192;
    c.v_head_dim = 256;
    c.n_expert_used = 4;
    c.n_expert_shared = 1;
    c.n_expert_group = 4;
    c.n_expert_group_used = 2;
    c.expert_weights_norm = true;
    c.expert_weights_scale = 1.8f;
    c.expert_gating = latte::ExpertGating::sigmoid;
    c.rope_freq_base = 1000000.0f;
    c.rope_scaling = {.type = latte::RopeScalingType::yarn,
                      .factor = 40.0f,
                      .original_context_length = 4096,
                      .yarn_beta_fast = 32.0f,
                      .yarn_beta_slow = 1.0f,
                      .yarn_log_multiplier = 0.1f};
  }
  if (rng.uniform_int(0, 1) == 1) c.n_dense_lead = 0;
  return c;
}

/// Grid sizes to run: the emulation runs a few blocks (LATTE_EMU_SMS), the GPU its full grid and a
/// small odd one (the partition of rows and tasks must not depend on the grid).
std::vector<int> grids() {
  if (std::getenv("LATTE_EMU_SMS") != nullptr) return {0};
  return {0, 7};
}

void check_step(bool glm_like, int n_past) {
  Rng rng;
  INFO("seed " << rng.seed);
  const ModelConfig c = small_config(glm_like, rng);
  const TestModel m = make_model(c, rng);
  const int row = c.kv_lora_rank + c.qk_rope_head_dim;
  const int token = rng.uniform_int(0, c.n_vocab - 1);
  // caches with room for n_past + 1 positions, the row at n_past poisoned (the step writes it)
  std::vector<std::vector<float>> caches;
  std::vector<cuda::DeviceBuffer<uint16_t>> device_caches;
  std::vector<const std::byte*> cache_rows;
  for (int il = 0; il < c.n_layer; ++il) {
    Bf16Values v = random_bf16(static_cast<size_t>(n_past) * row, rng, -1.5f, 1.5f);
    caches.push_back(v.values);
    v.bits.resize(static_cast<size_t>(n_past + 1) * row, 0xffffu);
    device_caches.push_back(upload(v.bits));
    cache_rows.push_back(reinterpret_cast<const std::byte*>(device_caches.back().data()));
  }

  for (int grid : grids()) {
    const std::string what = "grid " + std::to_string(grid) +
                             (glm_like ? ", q_lora / sigmoid / groups / YaRN" : ", V2-Lite-like") + ", n_past " +
                             std::to_string(n_past);
    INFO(what);
    cuda::DecodeStep step(c, m.weights, grid);
    cuda::DeviceBuffer<float> logits(static_cast<size_t>(c.n_vocab), "logits");
    cuda::DeviceBuffer<float> layer_out(static_cast<size_t>(c.n_layer) * c.n_embd, "layer out");
    poison(logits.data(), logits.bytes());
    poison(layer_out.data(), layer_out.bytes());
    for (int il = 0; il < c.n_layer; ++il) {
      poison(device_caches[static_cast<size_t>(il)].data() + static_cast<size_t>(n_past) * row, 2u * row);
    }
    const bool timed = n_past == 37;  // the per-phase timing must not change what the step computes
    if (timed) step.set_timing(true);
    step.stage({.token = token, .position = n_past, .cache = cache_rows});
    step.enqueue(logits.data(), nullptr, {.layer_out = layer_out.data()});
    LATTE_CUDA_CHECK(cudaDeviceSynchronize());
    if (timed) {
      step.collect_timing(nullptr);
      const std::string table = step.timing_table();
      INFO(table);
      CHECK(table.find("1 steps") != std::string::npos);
      for (const char* phase :
           {"attention input", "W_UK + append", "attention ", "downs", "output head", "x prepare"}) {
        CHECK(table.find(phase) != std::string::npos);
      }
    }

    std::vector<std::vector<float>> appended;
    for (int il = 0; il < c.n_layer; ++il) {
      const std::vector<uint16_t> bits =
          download(device_caches[static_cast<size_t>(il)].data() + static_cast<size_t>(n_past) * row, row);
      appended.emplace_back(static_cast<size_t>(row));
      for (int d = 0; d < row; ++d) appended.back()[static_cast<size_t>(d)] = bf16_value(bits[static_cast<size_t>(d)]);
    }
    const Reference ref = reference_step(m, token, n_past, caches, &appended);
    const std::vector<float> got_out = download(layer_out.data(), layer_out.size());
    for (int il = 0; il < c.n_layer; ++il) {
      // the appended row: the reference's rounding, up to one bf16 step (or 1e-4 of the row's scale)
      const std::vector<float>& want = ref.rows[static_cast<size_t>(il)];
      float scale = 0.0f;
      for (float v : want) scale = std::max(scale, std::abs(v));
      int off = 0;
      for (int d = 0; d < row; ++d) {
        const float got = appended[static_cast<size_t>(il)][static_cast<size_t>(d)], w = want[static_cast<size_t>(d)];
        if (!(std::abs(got - w) <= std::abs(w) / 128.0f + 1e-4f * scale)) ++off;
      }
      INFO("block " << il << " appended row: " << off << " values off");
      CHECK(off == 0);
      const std::vector<float> x(got_out.begin() + il * c.n_embd, got_out.begin() + (il + 1) * c.n_embd);
      const double err = rel_max(x, ref.layer_out[static_cast<size_t>(il)]);
      INFO("block " << il << " output rel error " << err);
      CHECK(err < 3e-4);
    }
    const double err = rel_max(download(logits.data(), logits.size()), ref.logits);
    INFO("logits rel error " << err);
    CHECK(err < 3e-4);
  }
}

}  // namespace

TEST_CASE("fused decode step matches a float64 reference: V2-Lite-like block mix, random weight types") {
  for (int n_past : {0, 37, 1000}) check_step(false, n_past);  // 1000: over 32 attention splits on a GPU
}

TEST_CASE("fused decode step matches a float64 reference: q_lora, 20 heads, sigmoid groups, YaRN") {
  check_step(true, 29);
}

TEST_CASE("fused decode step: unsupported models are named, not run") {
  Rng rng;
  ModelConfig c = small_config(false, rng);
  TestModel m = make_model(c, rng);
  c.arch = latte::Architecture::glm_dsa;
  c.indexer = {.n_head = 4, .head_dim = 128, .top_k = 16};
  CHECK(cuda::DecodeStep::unsupported_reason(c, *m.weights, 8, 232448).find("indexer") != std::string::npos);
  c = m.c;
  c.kv_lora_rank = 256;
  CHECK(cuda::DecodeStep::unsupported_reason(c, *m.weights, 8, 232448).find("kv_lora_rank") != std::string::npos);
  c = m.c;
  CHECK(cuda::DecodeStep::unsupported_reason(c, *m.weights, 8, 232448).empty());
  CHECK(cuda::DecodeStep::unsupported_reason(c, *m.weights, 8, 40000).find("stages") != std::string::npos);
  m.weights->layers[1].attn_output.type = GgmlType::iq4_nl;
  CHECK(cuda::DecodeStep::unsupported_reason(c, *m.weights, 8, 232448).find("attn_output") != std::string::npos);
}
