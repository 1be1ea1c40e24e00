// Host side of the fused decode step (decode_step.hpp): which models it takes, the device tables, the
// shared-memory layout and the scratch, and the per-step upload and launch.
#include "cuda/decode_step.hpp"

#include "core/environment.hpp"

#include "cuda/check.hpp"
#include "cuda/device_caps.hpp"
#include "cuda/moe_router.hpp"
#include "cuda/quant_type_families.hpp"
#include "cuda/rope_yarn.hpp"

#include <latte/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace latte::cuda {
namespace {

using step::Matrix;

constexpr int kSplitInt8UnitBytes = 80;  // split_int8::kUnitBytes (device header)
constexpr int64_t kMaxStageBytes = 64 * 1024;
using StepTypes = JoinedTypeList<FloatTypes, LegacyQuantTypes, Mxfp4Types, KQuantTypes>;

bool is_float(GgmlType t) { return FloatTypes::contains(t); }

/// The tables, shapes and layout the kernel needs; `problem` names the first thing it cannot take.
struct Plan {
  std::string problem;
  step::Shape s;
  std::vector<step::Layer> layers;
  Matrix token_embd, output;
  const float* output_norm = nullptr;
  int xq_cap = 0, xf_cap = 0;  // split-int8 units, fp32 values
  int x_area = 0, n_stages = 0, smem = 0, max_tasks = 0, own_cap = 0;
  int64_t stage_bytes = step::kStageBytes;

  bool fail(const std::string& why) {
    if (problem.empty()) problem = why;
    return false;
  }
  /// Maps a device matrix of `rows_per` rows per stacked matrix (`stride_rows` apart) and checks it.
  Matrix matrix(const DeviceMatrix& m, const std::string& what, int64_t k, int64_t rows_per, int64_t stride_rows = 0) {
    Matrix r;
    if (!m) {
      fail(what + " is missing");
      return r;
    }
    if (!StepTypes::contains(m.type)) fail(what + ": type " + std::string(type_traits(m.type).name) + " is not fused");
    if (m.k != k) fail(what + ": " + std::to_string(m.k) + " values per row, expected " + std::to_string(k));
    if (m.k % 32 != 0) fail(what + ": rows of " + std::to_string(m.k) + " values are not whole 32-value units");
    r.data = reinterpret_cast<const uint8_t*>(m.data);
    r.row_bytes = m.row_bytes;
    r.stride = stride_rows * m.row_bytes;
    r.rows = static_cast<int32_t>(rows_per);
    r.k = static_cast<int32_t>(m.k);
    r.type = static_cast<int32_t>(m.type);
    return r;
  }
  /// Rows of `bytes` per unit (over `sources` copies) must fit one stage: the stage grows to hold them.
  void unit_fits(const std::string& what, int64_t bytes, int sources) {
    const int64_t need = bytes + 32LL * sources;
    if (need > kMaxStageBytes) {
      fail(what + ": " + std::to_string(bytes) + " bytes per output row exceed a " + std::to_string(kMaxStageBytes) +
           "-byte stage");
    }
    stage_bytes =
        std::max<int64_t>(stage_bytes, (need + step::kStageBytes - 1) / step::kStageBytes * step::kStageBytes);
  }
  /// The x area must hold `units` split-int8 units and `floats` fp32 values for some phase.
  void x_needs(int64_t units, int64_t floats) {
    xq_cap = std::max<int>(xq_cap, static_cast<int>(units));
    xf_cap = std::max<int>(xf_cap, static_cast<int>(floats));
  }
  void input(int64_t values, std::initializer_list<const Matrix*> reads, bool staged_f32) {
    bool f32 = staged_f32, q = false;
    for (const Matrix* m : reads) (is_float(static_cast<GgmlType>(m->type)) ? f32 : q) = true;
    x_needs(q ? values / 32 : 0, f32 ? values : 0);
  }
};

/// Most heads whose rows fall into one block's equal share of n_rows rows of `rows_per_head`.
int64_t heads_per_block(int64_t n_rows, int64_t rows_per_head, int grid) {
  int64_t most = 0;
  for (int b = 0; b < grid; ++b) {
    const int64_t lo = n_rows * b / grid, hi = n_rows * (b + 1) / grid;
    if (hi > lo) most = std::max(most, (hi - 1) / rows_per_head - lo / rows_per_head + 1);
  }
  return most;
}

Plan make_plan(const ModelConfig& c, const DeviceWeights& w, int grid, int smem_optin) {
  Plan p;
  step::Shape& s = p.s;
  s.H = c.n_embd, s.N = c.n_head, s.P = c.qk_nope_head_dim, s.R = c.qk_rope_head_dim, s.L = c.kv_lora_rank;
  s.V = c.v_head_dim, s.Lq = c.q_lora_rank, s.E = c.n_expert, s.K = c.n_expert_used, s.F = c.n_ff_expert;
  s.F_shared = c.n_ff_expert * c.n_expert_shared, s.F_dense = c.n_ff;
  s.n_groups = std::max(1, c.n_expert_group), s.groups_used = std::max(1, c.n_expert_group_used);
  s.sigmoid = c.expert_gating == ExpertGating::sigmoid ? 1 : 0;
  s.normalize = c.expert_weights_norm ? 1 : 0;
  s.expert_scale = c.expert_weights_scale;
  s.eps = c.rms_norm_eps;
  s.attn_scale = c.attention_scale();
  s.n_layer = c.n_layer_main();
  s.vocab = c.n_vocab;
  s.query_width = s.Lq > 0 ? s.Lq : s.N * (s.P + s.R);
  s.proj_width = s.query_width + s.L + s.R;

  if (c.has_indexer()) p.fail("the DSA indexer (glm-dsa) runs on the layered path");
  if (s.L + s.R != step::kCacheRowElems || s.L > 512 || s.L % 64 != 0) {
    p.fail("kv_lora_rank " + std::to_string(s.L) + " + rope " + std::to_string(s.R) +
           " is not the 512 + 64 latent row");
  }
  if (s.R % 2 != 0 || s.R / 2 > step::kMaxRopePairs) p.fail("rope dimension " + std::to_string(s.R));
  for (const auto& [what, v] : {std::pair{"hidden size", s.H},
                                {"qk_nope_head_dim", s.P},
                                {"q_lora_rank", s.Lq},
                                {"expert FFN", s.F},
                                {"dense FFN", s.F_dense}}) {
    if (v % 32 != 0) p.fail(std::string(what) + " " + std::to_string(v) + " is not a multiple of 32");
  }
  if (s.n_layer < 1 || s.n_layer > step::kMaxLayers) p.fail(std::to_string(s.n_layer) + " blocks");
  if (s.H > 8192 || s.Lq > 8192) p.fail("RMSNorm inputs of more than 8192 values");
  if (s.E > moe_max_experts || s.K > step::kMaxExpertsUsed || s.n_groups > moe_max_expert_groups) {
    p.fail(std::to_string(s.E) + " experts, " + std::to_string(s.K) + " per token");
  }
  if (static_cast<int>(w.layers.size()) < s.n_layer) p.fail("the device weights hold fewer blocks than the model");
  if (!p.problem.empty()) return p;

  const RopeScaling& rs = c.rope_scaling;
  if (rs.type == RopeScalingType::linear) {
    s.freq_scale = 1.0f / rs.factor;
  } else if (rs.type == RopeScalingType::yarn && rs.factor != 1.0f) {
    s.freq_scale = 1.0f / rs.factor;
    s.ext_factor = 1.0f;
    const YarnCorrDims corr = yarn_corr_dims(s.R, static_cast<int>(rs.original_context_length), c.rope_freq_base,
                                             rs.yarn_beta_fast, rs.yarn_beta_slow);
    s.corr_low = corr.low;
    s.corr_high = corr.high;
  }
  for (int i = 0; i < s.R / 2; ++i) s.inv_freq[i] = std::pow(static_cast<double>(c.rope_freq_base), -2.0 * i / s.R);

  const int qk = s.P + s.R;
  p.layers.resize(static_cast<size_t>(s.n_layer));
  for (int il = 0; il < s.n_layer; ++il) {
    const DeviceLayer& d = w.layers[static_cast<size_t>(il)];
    step::Layer& l = p.layers[static_cast<size_t>(il)];
    const std::string at = "block " + std::to_string(il) + " ";
    l.attn_norm = d.attn_norm, l.q_a_norm = d.q_a_norm, l.kv_a_norm = d.kv_a_norm, l.ffn_norm = d.ffn_norm;
    l.exp_probs_b = d.exp_probs_b;
    if (!l.attn_norm || !l.kv_a_norm || !l.ffn_norm || (s.Lq > 0 && !l.q_a_norm)) p.fail(at + "norm weights missing");
    for (const float* norm : {l.attn_norm, l.q_a_norm, l.ffn_norm}) {  // (read 4 values per load)
      if (reinterpret_cast<uintptr_t>(norm) % 16 != 0) p.fail(at + "norm weights not 16-byte aligned");
    }
    if (d.attn_input) {
      l.attn_input[0] = p.matrix(d.attn_input, at + "attention input", s.H, s.proj_width);
      l.n_attn_input = 1;
    } else {
      l.attn_input[0] = p.matrix(d.attn_query, at + "query", s.H, s.query_width);
      l.attn_input[1] = p.matrix(d.attn_kv_a, at + "kv_a", s.H, s.L + s.R);
      l.n_attn_input = 2;
    }
    for (int i = 0; i < l.n_attn_input; ++i) {
      p.unit_fits(at + "attention input", l.attn_input[i].row_bytes, 1);
      p.input(s.H, {&l.attn_input[i]}, true);
    }
    if (s.Lq > 0) {
      l.q_b = p.matrix(d.attn_q_b, at + "attn_q_b", s.Lq, int64_t{s.N} * qk);
      p.unit_fits(at + "attn_q_b", l.q_b.row_bytes, 1);
      p.input(s.Lq, {&l.q_b}, true);
    }
    l.k_b = p.matrix(d.k_b, at + "attn_k_b", s.P, s.L, s.L);
    l.v_b = p.matrix(d.v_b, at + "attn_v_b", s.L, s.V, s.V);
    l.attn_output = p.matrix(d.attn_output, at + "attn_output", int64_t{s.N} * s.V, s.H);
    p.unit_fits(at + "attn_k_b", l.k_b.row_bytes, 1);
    p.unit_fits(at + "attn_v_b", l.v_b.row_bytes, 1);
    p.unit_fits(at + "attn_output", l.attn_output.row_bytes, 1);
    p.input(heads_per_block(int64_t{s.N} * s.L, s.L, grid) * s.P, {&l.k_b}, false);
    p.input(heads_per_block(int64_t{s.N} * s.V, s.V, grid) * s.L, {&l.v_b}, false);
    p.input(int64_t{s.N} * s.V, {&l.attn_output}, false);
    l.moe = c.is_moe_layer(il) ? 1 : 0;
    if (!l.moe) {
      l.gate = p.matrix(d.dense.gate, at + "ffn_gate", s.H, s.F_dense);
      l.up = p.matrix(d.dense.up, at + "ffn_up", s.H, s.F_dense);
      l.down = p.matrix(d.dense.down, at + "ffn_down", s.F_dense, s.H);
      p.unit_fits(at + "ffn_gate/up", l.gate.row_bytes + l.up.row_bytes, 2);
      p.unit_fits(at + "ffn_down", l.down.row_bytes, 1);
      p.input(s.H, {&l.gate, &l.up}, true);
      p.input(s.F_dense, {&l.down}, false);
      continue;
    }
    l.router = p.matrix(d.router, at + "ffn_gate_inp", s.H, s.E);
    const DeviceExperts& x = d.experts;
    l.exp_gate = p.matrix(x.gate, at + "ffn_gate_exps", s.H, s.F, x.gate_up_stride_rows);
    l.exp_up = p.matrix(x.up, at + "ffn_up_exps", s.H, s.F, x.gate_up_stride_rows);
    l.exp_down = p.matrix(x.down, at + "ffn_down_exps", s.F, s.H, s.H);
    p.unit_fits(at + "ffn_gate_inp", l.router.row_bytes, 1);
    p.unit_fits(at + "ffn_gate/up_exps", l.exp_gate.row_bytes + l.exp_up.row_bytes, 2);
    int64_t down_bytes = int64_t{s.K} * l.exp_down.row_bytes;
    int down_sources = s.K;
    if (d.shared) {
      l.gate = p.matrix(d.shared.gate, at + "ffn_gate_shexp", s.H, s.F_shared);
      l.up = p.matrix(d.shared.up, at + "ffn_up_shexp", s.H, s.F_shared);
      l.down = p.matrix(d.shared.down, at + "ffn_down_shexp", s.F_shared, s.H);
      p.unit_fits(at + "shared gate/up", l.gate.row_bytes + l.up.row_bytes, 2);
      down_bytes += l.down.row_bytes;
      ++down_sources;
      p.input(s.H, {&l.router, &l.gate, &l.up}, true);
      p.input(int64_t{s.K} * s.F + s.F_shared, {&l.exp_down, &l.down}, false);
    } else {
      p.input(s.H, {&l.router}, true);
      p.input(int64_t{s.K} * s.F, {&l.exp_down}, false);
    }
    p.unit_fits(at + "expert downs of one output row", down_bytes, down_sources);
    p.input(s.H, {&l.exp_gate, &l.exp_up}, true);
  }
  p.token_embd = p.matrix(w.token_embd, "token_embd", s.H, s.vocab);
  p.output = p.matrix(w.output, "output", s.H, s.vocab);
  p.output_norm = w.output_norm;
  if (!p.output_norm) p.fail("output_norm is missing");
  if (reinterpret_cast<uintptr_t>(p.output_norm) % 16 != 0) p.fail("output_norm not 16-byte aligned");
  p.unit_fits("output", p.output.row_bytes, 1);
  p.input(s.H, {&p.output}, true);
  if (!p.problem.empty()) return p;

  // shared memory: [stages][x area][misc]; LATTE_STEP_STAGE_KB asks for larger stages (more rows per
  // chunk, fewer chunks in the ring), to compare
  if (const int kb = latte::detail::env_int("LATTE_STEP_STAGE_KB", 0); kb > 0) {
    p.stage_bytes = std::max(p.stage_bytes, int64_t{kb} / 16 * 16 * 1024);
  }
  p.xq_cap = (p.xq_cap + 7) / 8 * 8;
  p.xf_cap = (p.xf_cap + 31) / 32 * 32;
  const int q_rows = step::kHeadGroup * step::kCacheRowElems * 4;  // attention's query rows overlay the x area
  p.x_area = std::max(p.xq_cap * kSplitInt8UnitBytes + p.xf_cap * 4, q_rows);
  p.x_area = (p.x_area + 127) / 128 * 128;
  // then this block's rows of the residual stream (it owns the same rows in every phase that adds to x)
  p.own_cap = (s.H + grid - 1) / grid + 1;
  p.own_cap = (p.own_cap + 31) / 32 * 32;
  const int misc = decode_step_misc_bytes() + p.own_cap * 4;
  const int room = smem_optin - p.x_area - misc;
  p.n_stages = std::min<int>(32, static_cast<int>(room / p.stage_bytes));
  // LATTE_STEP_STAGES caps the ring (fewer bytes in flight per SM: the prefetch queues less in front of
  // the phases' own L2 loads), to compare
  p.n_stages = std::min(p.n_stages, latte::detail::env_int("LATTE_STEP_STAGES", 32));
  if (p.n_stages < 3) {
    p.fail("the x area (" + std::to_string(p.x_area) + " bytes) and stages of " + std::to_string(p.stage_bytes) +
           " bytes leave fewer than 3 stages of shared memory");
    return p;
  }
  p.smem = static_cast<int>(p.n_stages * p.stage_bytes) + p.x_area + misc;
  const int n_groups = (s.N + step::kHeadGroup - 1) / step::kHeadGroup;
  p.max_tasks = n_groups * (grid / n_groups + 2);
  return p;
}

int current_grid(int* smem_optin) {
  int device = 0;
  LATTE_CUDA_CHECK(cudaGetDevice(&device));
  const DeviceCaps& caps = device_caps(device);
  *smem_optin = caps.smem_per_block_optin;
  return caps.sm_count;
}

}  // namespace

std::string DecodeStep::unsupported_reason(const ModelConfig& config, const DeviceWeights& weights, int grid,
                                           int smem_per_block) {
  return make_plan(config, weights, grid, smem_per_block).problem;
}

DecodeStep::DecodeStep(const ModelConfig& config, std::shared_ptr<const DeviceWeights> weights, int grid)
    : weights_(std::move(weights)) {
  if (!weights_) throw Error(ErrorCode::internal, "fused decode step: no device weights");
  int smem_optin = 0;
  grid_ = current_grid(&smem_optin);
  if (grid > 0) grid_ = std::min(grid_, grid);
  Plan plan = make_plan(config, *weights_, grid_, smem_optin);
  if (!plan.problem.empty()) throw Error(ErrorCode::unsupported, "fused decode step: " + plan.problem);
  if (decode_step_blocks_per_sm(plan.smem) < 1) {
    throw Error(ErrorCode::unsupported, "fused decode step: a block of " + std::to_string(plan.smem) +
                                            " bytes of shared memory does not fit an SM");
  }
  n_layer_ = plan.s.n_layer;
  layers_ = DeviceBuffer<step::Layer>(plan.layers.size(), "fused step layer tables");
  LATTE_CUDA_CHECK(
      cudaMemcpy(layers_.data(), plan.layers.data(), plan.layers.size() * sizeof(step::Layer), cudaMemcpyHostToDevice));
  inputs_ = DeviceBuffer<step::Inputs>(1, "fused step inputs");
  inputs_host_ = PinnedBuffer<step::Inputs>(1);
  *inputs_host_.data() = step::Inputs{};

  const step::Shape& s = plan.s;
  const int qk = s.P + s.R;
  const int64_t hidden = std::max<int64_t>(int64_t{s.K} * s.F + s.F_shared, s.F_dense);
  const int64_t sizes[] = {s.H,
                           s.proj_width,
                           s.Lq > 0 ? int64_t{s.N} * qk : 0,
                           int64_t{s.N} * s.L,
                           int64_t{s.N} * s.R,
                           int64_t{plan.max_tasks} * step::kHeadGroup * s.L,
                           int64_t{plan.max_tasks} * step::kHeadGroup * 2,
                           int64_t{s.N} * s.V,
                           std::max(s.E, 1),
                           std::max<int64_t>(hidden, 1)};
  int64_t total = 0;
  for (int64_t n : sizes) total += (n + 3) / 4 * 4;  // 16-byte aligned pieces
  scratch_ = DeviceBuffer<float>(static_cast<size_t>(total), "fused step scratch");
  float* at = scratch_.data();
  float* piece[std::size(sizes)];
  for (size_t i = 0; i < std::size(sizes); ++i) {
    piece[i] = at;
    at += (sizes[i] + 3) / 4 * 4;
  }
  barrier_ = DeviceBuffer<unsigned>(1, "fused step barrier");

  step::Params& p = params_;
  p.s = s;
  p.layers = layers_.data();
  p.token_embd = plan.token_embd;
  p.output_norm = plan.output_norm;
  p.output = plan.output;
  p.inputs = inputs_.data();
  p.scratch = {.x = piece[0],
               .proj = piece[1],
               .q = piece[2],
               .q_lat = piece[3],
               .q_pe = piece[4],
               .partial_o = piece[5],
               .partial_ml = piece[6],
               .attn = piece[7],
               .router = piece[8],
               .hidden = piece[9],
               .barrier = barrier_.data(),
               .layer_out = nullptr,
               .embed_out = nullptr,
               .expert_ids = nullptr,
               .expert_weights = nullptr,
               .timing = nullptr};
  p.max_tasks = plan.max_tasks;
  p.n_stages = plan.n_stages;
  p.stage_bytes = static_cast<int>(plan.stage_bytes);
  p.xq_cap = plan.xq_cap;
  p.xf_cap = plan.xf_cap;
  p.x_area_bytes = plan.x_area;
  p.own_cap = plan.own_cap;
  p.smem_bytes = plan.smem;
  if (latte::detail::env_flag("LATTE_STEP_TIMING", false)) set_timing(true);
}

void DecodeStep::set_timing(bool on) {
  if (!on) {
    params_.scratch.timing = nullptr;
    return;
  }
  if (!timing_.data()) {
    timing_ = DeviceBuffer<long long>(static_cast<size_t>(grid_) * step::kMaxTimedSyncs * step::kTimingFields,
                                      "fused step timing");
    int device = 0, khz = 0;
    LATTE_CUDA_CHECK(cudaGetDevice(&device));
    LATTE_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device));
    clock_ghz_ = khz > 0 ? khz / 1e6 : 1.0;
    LATTE_CUDA_CHECK(cudaMemset(timing_.data(), 0xff, timing_.bytes()));  // phase -1: unwritten
  }
  params_.scratch.timing = timing_.data();
  timing_sum_.assign(step::kPhaseCount + 1, {});  // the last entry: the whole step
  timing_steps_ = 0;
}

void DecodeStep::collect_timing(cudaStream_t stream) {
  if (!timing_on()) return;
  LATTE_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<long long> t(timing_.size());
  LATTE_CUDA_CHECK(cudaMemcpy(t.data(), timing_.data(), timing_.bytes(), cudaMemcpyDeviceToHost));
  const size_t per_block = static_cast<size_t>(step::kMaxTimedSyncs) * step::kTimingFields;
  auto slot = [&](int b, int k) { return t.data() + b * per_block + static_cast<size_t>(k) * step::kTimingFields; };
  int n = 1;  // slots used: the start, every barrier, the head's end
  while (n < step::kMaxTimedSyncs && slot(0, n)[0] >= 0 && slot(0, n)[0] < step::kPhaseCount) {
    const bool last = slot(0, n)[0] == step::kPhaseHead;
    ++n;
    if (last) break;
  }
  const double us = 1.0 / (clock_ghz_ * 1e3);
  double step_us = 0.0;
  for (int k = 1; k < n; ++k) {
    const int phase = static_cast<int>(slot(0, k)[0]);
    double slowest = 0.0, mean = 0.0, wait = 0.0, prep = 0.0, data_wait = 0.0;
    for (int b = 0; b < grid_; ++b) {
      const double work = static_cast<double>(slot(b, k)[1] - slot(b, k - 1)[2]) * us;
      slowest = std::max(slowest, work);
      mean += work / grid_;
      wait += static_cast<double>(slot(b, k)[2] - slot(b, k)[1]) * us / grid_;
      prep += static_cast<double>(slot(b, k)[3]) * us / grid_;
      data_wait += static_cast<double>(slot(b, k)[4]) * us / grid_;
    }
    step::Phase kind = static_cast<step::Phase>(std::clamp(phase, 0, step::kPhaseCount - 1));
    PhaseTime& pt = timing_sum_[kind];
    pt.phase = kind;
    pt.count += 1;
    pt.slowest_work_us += slowest;
    pt.mean_work_us += mean;
    pt.wait_us += wait;
    pt.prep_us += prep;
    pt.data_wait_us += data_wait;
  }
  for (int b = 0; b < grid_; ++b)
    step_us = std::max(step_us, static_cast<double>(slot(b, n - 1)[2] - slot(b, 0)[2]) * us);
  timing_sum_.back().slowest_work_us += step_us;
  ++timing_steps_;
  LATTE_CUDA_CHECK(cudaMemset(timing_.data(), 0xff, timing_.bytes()));  // phase -1: unwritten
}

std::string DecodeStep::timing_table() const {
  static const char* names[] = {
      "attention input", "q_b",        "W_UK + append",           "attention",      "W_UV",  "attn_output",
      "dense gate|up",   "dense down", "router + shared gate|up", "routed gate|up", "downs", "output head"};
  static_assert(std::size(names) == step::kPhaseCount);
  if (timing_steps_ == 0) return "fused step timing: no steps collected\n";
  const double n = timing_steps_;
  char line[256];
  std::string out = "fused step phases (us per step, " + std::to_string(timing_steps_) + " steps; SM clock " +
                    std::to_string(clock_ghz_).substr(0, 4) + " GHz):\n";
  std::snprintf(line, sizeof line, "  %-24s %9s %14s %12s %12s %12s %12s\n", "phase", "barriers", "slowest block",
                "mean block", "x prepare", "chunk wait", "barrier wait");
  out += line;
  double total = 0.0;
  for (int k = 0; k < step::kPhaseCount; ++k) {
    const PhaseTime& pt = timing_sum_[static_cast<size_t>(k)];
    if (pt.count == 0) continue;
    std::snprintf(line, sizeof line, "  %-24s %9.0f %14.1f %12.1f %12.1f %12.1f %12.1f\n", names[k], pt.count / n,
                  pt.slowest_work_us / n, pt.mean_work_us / n, pt.prep_us / n, pt.data_wait_us / n, pt.wait_us / n);
    out += line;
    total += (pt.mean_work_us + pt.wait_us) / n;
  }
  std::snprintf(line, sizeof line, "  step (first block start to last release): %.1f us; mean work + wait %.1f us\n",
                timing_sum_.back().slowest_work_us / n, total);
  out += line;
  return out;
}

void DecodeStep::stage(const StepInput& in) {
  if (static_cast<int>(in.cache.size()) < n_layer_) {
    throw Error(ErrorCode::internal, "fused decode step: " + std::to_string(in.cache.size()) + " cache rows for " +
                                         std::to_string(n_layer_) + " blocks");
  }
  step::Inputs& h = *inputs_host_.data();
  h.token = in.token;
  h.position = in.position;
  for (int il = 0; il < n_layer_; ++il) {
    h.cache[il] = reinterpret_cast<uint8_t*>(const_cast<std::byte*>(in.cache[static_cast<size_t>(il)]));
  }
}

void DecodeStep::enqueue(float* logits, cudaStream_t stream, const Observed& observed) {
  LATTE_CUDA_CHECK(
      cudaMemcpyAsync(inputs_.data(), inputs_host_.data(), sizeof(step::Inputs), cudaMemcpyHostToDevice, stream));
  LATTE_CUDA_CHECK(cudaMemsetAsync(barrier_.data(), 0, sizeof(unsigned), stream));
  step::Params p = params_;
  p.logits = logits;
  p.scratch.layer_out = observed.layer_out;
  p.scratch.embed_out = observed.embed;
  p.scratch.expert_ids = observed.expert_ids;
  p.scratch.expert_weights = observed.expert_weights;
  launch_decode_step(p, grid_, stream);
}

}  // namespace latte::cuda
