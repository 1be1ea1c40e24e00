// MoE: the router's selections must equal a CPU reference exactly (random logits without near-ties,
// plus hand-built ties), the sort must be a stable per-expert permutation, and the whole expert FFN
// (decode GEMV path and prefill GEMM path) must match a float64 reference.
#include <doctest/doctest.h>
#include <latte/error.hpp>

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <numeric>

#include "cuda/moe_dispatch.hpp"
#include "cuda/moe_experts.hpp"
#include "cuda/moe_router.hpp"
#include "cuda/norms.hpp"
#include "cuda/standalone_params.hpp"
#include "cuda/x_int8.hpp"
#include "gpu_test_support.hpp"

using namespace latte;
using namespace latte::test::gpu;
using cuda::DeviceBuffer;

namespace {

struct RouterCase {
  int n_experts, k, n_groups, groups_used;
  cuda::MoeGating gating;
  bool bias, normalize;
  float scale;
};

/// Random routed tokens for the expert FFN, on the host and the device: each of `tokens` tokens
/// chooses k distinct experts of E (a random subset in random order) with weights N(0, 0.5), and
/// has activations x N(0, 1) [tokens, H], also rounded to bf16 for the prefill path.
struct RoutedInputs {
  int tokens = 0, k = 0, hidden = 0;
  std::vector<int32_t> ids{};    ///< [tokens, k]
  std::vector<float> weights{};  ///< [tokens, k]
  std::vector<float> x{};        ///< [tokens, H]
  DeviceBuffer<int32_t> d_ids{};
  DeviceBuffer<float> d_weights{}, d_x{};
  DeviceBuffer<uint16_t> d_xb{};  ///< bf16 bits of x

  /// The expert FFN call on these tokens, writing (with `accumulate`, adding to) `out` [tokens, H].
  [[nodiscard]] cuda::MoeExpertsCall call(float* out, bool accumulate = false, int held_first = -1) const {
    return {.ids = d_ids.data(),
            .weights = d_weights.data(),
            .n_tokens = tokens,
            .k = k,
            .x = d_x.data(),
            .x_bf16 = reinterpret_cast<const __nv_bfloat16*>(d_xb.data()),
            .x_stride = hidden,
            .out = out,
            .out_stride = hidden,
            .accumulate = accumulate,
            .held_first = held_first};
  }
};

/// Draws RoutedInputs. `first_token_lowest`: token 0 chooses experts 0 .. k - 1 (the rest stay random).
RoutedInputs random_routed_inputs(int tokens, int n_experts, int k, int hidden, Rng& rng,
                                  bool first_token_lowest = false) {
  RoutedInputs in{.tokens = tokens, .k = k, .hidden = hidden};
  in.ids = cuda::random_expert_ids({.n_experts = n_experts, .k = k}, tokens, rng);
  if (first_token_lowest) std::iota(in.ids.begin(), in.ids.begin() + k, 0);
  in.weights = random_floats(static_cast<size_t>(tokens * k), rng, 0.5f);
  in.x = random_floats(static_cast<size_t>(tokens * hidden), rng);
  std::vector<uint16_t> xb(in.x.size());
  for (size_t i = 0; i < in.x.size(); ++i) xb[i] = fp32_to_bf16(in.x[i]);
  in.d_ids = upload(in.ids);
  in.d_weights = upload(in.weights);
  in.d_x = upload(in.x);
  in.d_xb = upload(xb);
  return in;
}

/// The router's math in float64, straight from DESIGN.md.
void reference_route(const RouterCase& rc, const float* logits, const std::vector<float>& bias, int32_t* ids,
                     double* weights) {
  const int E = rc.n_experts;
  std::vector<double> score(E), select(E);
  if (rc.gating == cuda::MoeGating::softmax) {
    const double mx = *std::max_element(logits, logits + E);
    double sum = 0;
    for (int e = 0; e < E; ++e) sum += score[e] = std::exp(logits[e] - mx);
    for (auto& s : score) s /= sum;
  } else {
    for (int e = 0; e < E; ++e) score[e] = 1.0 / (1.0 + std::exp(-static_cast<double>(logits[e])));
  }
  for (int e = 0; e < E; ++e) select[e] = score[e] + (rc.bias ? bias[e] : 0.0);
  std::vector<bool> allowed(E, true);
  if (rc.n_groups > 1) {
    const int gs = E / rc.n_groups;
    std::vector<std::pair<double, int>> groups;
    for (int g = 0; g < rc.n_groups; ++g) {
      std::vector<double> v(select.begin() + g * gs, select.begin() + (g + 1) * gs);
      std::sort(v.rbegin(), v.rend());
      groups.push_back({-(v[0] + (gs > 1 ? v[1] : 0.0)), g});
    }
    std::sort(groups.begin(), groups.end());  // larger score first, then lower index
    std::fill(allowed.begin(), allowed.end(), false);
    for (int r = 0; r < rc.groups_used; ++r)
      for (int e = groups[r].second * gs; e < (groups[r].second + 1) * gs; ++e) allowed[e] = true;
  }
  std::vector<std::pair<double, int>> order;
  for (int e = 0; e < E; ++e)
    if (allowed[e]) order.push_back({-select[e], e});
  std::sort(order.begin(), order.end());
  double sum = 0;
  for (int j = 0; j < rc.k; ++j) ids[j] = order[j].second, sum += score[order[j].second];
  for (int j = 0; j < rc.k; ++j) weights[j] = score[ids[j]] / (rc.normalize ? sum : 1.0) * rc.scale;
}

void run_router_case(const RouterCase& rc, const std::vector<float>& logits, const std::vector<float>& bias, int tokens,
                     const std::string& label) {
  trace("moe_route " + label);
  const auto dl = upload(logits);
  const auto db = upload(bias.empty() ? std::vector<float>(1) : bias);
  DeviceBuffer<int32_t> ids(static_cast<size_t>(tokens * rc.k));
  DeviceBuffer<float> w(static_cast<size_t>(tokens * rc.k));
  poison(ids.data(), ids.bytes());
  poison(w.data(), w.bytes());
  cuda::moe_route({.logits = dl.data(),
                   .logits_stride = rc.n_experts,
                   .n_tokens = tokens,
                   .n_experts = rc.n_experts,
                   .selection_bias = rc.bias ? db.data() : nullptr,
                   .gating = rc.gating,
                   .k = rc.k,
                   .n_groups = rc.n_groups,
                   .groups_used = rc.groups_used,
                   .normalize = rc.normalize,
                   .scale = rc.scale,
                   .ids = ids.data(),
                   .weights = w.data()},
                  nullptr);
  const auto got_ids = download(ids.data(), ids.size());
  const auto got_w = download(w.data(), w.size());
  std::vector<int32_t> want_ids(got_ids.size());
  std::vector<double> want_w(got_w.size());
  int mismatches = 0;
  for (int t = 0; t < tokens; ++t) {
    reference_route(rc, logits.data() + t * rc.n_experts, bias, want_ids.data() + t * rc.k, want_w.data() + t * rc.k);
    for (int j = 0; j < rc.k; ++j) {
      if (got_ids[t * rc.k + j] != want_ids[t * rc.k + j] && mismatches++ < 3) {
        FAIL_CHECK(label << ": token " << t << " choice " << j << " got expert " << got_ids[t * rc.k + j] << ", want "
                         << want_ids[t * rc.k + j]);
      }
    }
  }
  CHECK_MESSAGE(mismatches == 0, label << ": " << mismatches << " id mismatches");
  check_close("moe_route weights", label, compare(got_w, want_w), 1e-5);
}

}  // namespace

TEST_CASE("moe_route selects exactly the CPU reference's experts (softmax, sigmoid+bias, group-limited)") {
  auto rng = make_rng("moe_route");
  const std::vector<RouterCase> cases = {
      {64, 6, 1, 1, cuda::MoeGating::softmax, false, false, 1.0f},    // DeepSeek-V2-Lite
      {160, 6, 8, 3, cuda::MoeGating::softmax, false, false, 16.0f},  // DeepSeek-V2
      {256, 8, 8, 4, cuda::MoeGating::sigmoid, true, true, 2.5f},     // DeepSeek-V3
      {64, 4, 1, 1, cuda::MoeGating::sigmoid, true, true, 1.8f},      // GLM-4.7-Flash-like
      {32, 8, 4, 2, cuda::MoeGating::softmax, false, true, 1.0f},
  };
  const int tokens = 130;
  for (const auto& rc : cases) {
    // distinct logits: a random permutation of a grid with spacing 0.02 plus tiny jitter
    std::vector<float> logits(static_cast<size_t>(tokens * rc.n_experts));
    std::vector<int> perm(rc.n_experts);
    for (int t = 0; t < tokens; ++t) {
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      for (int e = 0; e < rc.n_experts; ++e) logits[t * rc.n_experts + e] = -2.0f + 0.02f * static_cast<float>(perm[e]);
    }
    std::vector<float> bias;
    if (rc.bias) {
      // whole-unit bias classes: the biased order is by class, then by score, never a near-tie
      for (int e = 0; e < rc.n_experts; ++e) bias.push_back(static_cast<float>((e * 7) % 3));
    }
    run_router_case(rc, logits, bias, tokens,
                    "E=" + std::to_string(rc.n_experts) + " k=" + std::to_string(rc.k) +
                        " groups=" + std::to_string(rc.n_groups) + "/" + std::to_string(rc.groups_used));
  }
}

TEST_CASE("moe_route breaks ties toward the lower expert and group index") {
  // all logits equal: experts 0..k-1 in order; groups all tie: groups 0..used-1
  const RouterCase flat{64, 6, 1, 1, cuda::MoeGating::softmax, false, true, 1.0f};
  run_router_case(flat, std::vector<float>(64 * 3, 0.25f), {}, 3, "all equal");
  const RouterCase grouped{64, 4, 8, 2, cuda::MoeGating::sigmoid, false, false, 1.0f};
  std::vector<float> logits(64, 0.0f);
  logits[63] = 0.5f;  // group 7 wins outright, then groups 0..6 tie: group 0 must be taken
  run_router_case(grouped, logits, {}, 1, "group tie");
}

TEST_CASE("moe_sort is a stable per-expert permutation and moe_combine sums each token's choices") {
  auto rng = make_rng("moe_sort");
  const int tokens = 37, k = 6, E = 64, hidden = 128;
  // each token picks k distinct experts among the first 12: many tokens per expert, most experts empty
  const std::vector<int32_t> ids = cuda::random_expert_ids({.n_experts = 12, .k = k}, tokens, rng);
  const auto d_ids = upload(ids);
  DeviceBuffer<int32_t> offsets(E + 1), slot_of_pair(tokens * k), token_of_slot(tokens * k), counts(1);
  DeviceBuffer<cuda::GemmTile> tiles(cuda::moe_max_tiles(tokens * k, E));
  cuda::moe_sort({.ids = d_ids.data(),
                  .n_tokens = tokens,
                  .k = k,
                  .n_experts = E,
                  .expert_offsets = offsets.data(),
                  .slot_of_pair = slot_of_pair.data(),
                  .token_of_slot = token_of_slot.data(),
                  .tiles = tiles.data(),
                  .n_tiles = counts.data()},
                 nullptr);
  const auto off = download(offsets.data(), offsets.size());
  const auto sop = download(slot_of_pair.data(), slot_of_pair.size());
  const auto tos = download(token_of_slot.data(), token_of_slot.size());
  // expected: slots ordered by (expert, pair index)
  std::vector<int> pairs(tokens * k);
  std::iota(pairs.begin(), pairs.end(), 0);
  std::stable_sort(pairs.begin(), pairs.end(), [&](int a, int b) { return ids[a] < ids[b]; });
  int bad = 0;
  for (int s = 0; s < tokens * k; ++s) {
    bad += sop[pairs[s]] != s || tos[s] != pairs[s] / k;
  }
  CHECK_MESSAGE(bad == 0, "moe_sort: " << bad << " slots differ from the stable order");
  for (int e = 0; e <= E; ++e) {
    const int want = static_cast<int>(std::count_if(ids.begin(), ids.end(), [&](int x) { return x < e; }));
    CHECK_MESSAGE(off[e] == want, "expert_offsets[" << e << "] = " << off[e] << ", want " << want);
  }
  const auto n_tiles = download(counts.data(), 1)[0];
  const auto tl = download(tiles.data(), static_cast<size_t>(n_tiles));
  int covered = 0;
  for (const auto& t : tl) {
    CHECK(t.row_end - t.row_begin <= cuda::gemm_tile_rows);
    CHECK((t.row_begin >= off[t.group] && t.row_end <= off[t.group + 1]));
    covered += t.row_end - t.row_begin;
  }
  CHECK(covered == tokens * k);

  const auto expert_out = random_floats(static_cast<size_t>(tokens * k * hidden), rng);
  const auto weights = random_floats(static_cast<size_t>(tokens * k), rng);
  const auto base = random_floats(static_cast<size_t>(tokens * hidden), rng);
  const auto d_eo = upload(expert_out);
  const auto d_w = upload(weights);
  auto d_out = upload(base);
  cuda::moe_combine({.expert_out = d_eo.data(),
                     .ld = hidden,
                     .slot_of_pair = slot_of_pair.data(),
                     .weights = d_w.data(),
                     .n_tokens = tokens,
                     .k = k,
                     .hidden = hidden,
                     .out = d_out.data(),
                     .out_stride = hidden,
                     .accumulate = true},
                    nullptr);
  std::vector<double> want(base.begin(), base.end());
  for (int t = 0; t < tokens; ++t)
    for (int j = 0; j < k; ++j)
      for (int c = 0; c < hidden; ++c)
        want[t * hidden + c] += static_cast<double>(weights[t * k + j]) * expert_out[sop[t * k + j] * hidden + c];
  check_close("moe_combine", "37 tokens k 6", compare(download(d_out.data(), d_out.size()), want), 1e-6);

  // with an addend (a shared expert's output, rows of a wider buffer) and without accumulating
  const int add_stride = hidden + 8;
  const auto addend = random_floats(static_cast<size_t>(tokens * add_stride), rng);
  const auto d_add = upload(addend);
  poison(d_out.data(), d_out.bytes());
  cuda::moe_combine({.expert_out = d_eo.data(),
                     .ld = hidden,
                     .slot_of_pair = slot_of_pair.data(),
                     .weights = d_w.data(),
                     .n_tokens = tokens,
                     .k = k,
                     .hidden = hidden,
                     .out = d_out.data(),
                     .out_stride = hidden,
                     .add = d_add.data(),
                     .add_stride = add_stride},
                    nullptr);
  for (int t = 0; t < tokens; ++t)
    for (int c = 0; c < hidden; ++c)
      want[t * hidden + c] +=
          addend[static_cast<size_t>(t * add_stride + c)] - base[static_cast<size_t>(t * hidden + c)];
  check_close("moe_combine", "37 tokens k 6 + addend", compare(download(d_out.data(), d_out.size()), want), 1e-6);
}

TEST_CASE("moe_combine then normalising: the rows as without it, the normalised rows as rms_norm makes them") {
  auto rng = make_rng("moe_combine norm");
  const int tokens = 5, k = 6;
  for (const int hidden : {128, 2560, 7168}) {
    CAPTURE(hidden);
    // the pairs' slots a random permutation, one pair of another rank's expert (-1)
    std::vector<int32_t> slots(static_cast<size_t>(tokens * k));
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), rng);
    slots[7] = -1;
    const auto d_slots = upload(slots);
    const auto d_eo = upload(random_floats(static_cast<size_t>(tokens * k * hidden), rng));
    const auto d_w = upload(random_floats(static_cast<size_t>(tokens * k), rng));
    const auto d_add = upload(random_floats(static_cast<size_t>(tokens * hidden), rng));
    const auto base = random_floats(static_cast<size_t>(tokens * hidden), rng, 3.0f);
    const auto d_norm_w = upload(random_floats(static_cast<size_t>(hidden), rng));
    const int64_t q_stride = cuda::x_int8_record_bytes(hidden);
    auto plain = upload(base), fused = upload(base);
    DeviceBuffer<float> normed(static_cast<size_t>(tokens * hidden)), normed_ref(normed.size());
    DeviceBuffer<uint8_t> q(static_cast<size_t>(tokens * q_stride)), q_ref(q.size());
    for (void* p : {static_cast<void*>(normed.data()), static_cast<void*>(normed_ref.data())}) {
      poison(p, normed.bytes());
    }
    poison(q.data(), q.bytes());
    poison(q_ref.data(), q_ref.bytes());
    cuda::MoeCombineParams params{.expert_out = d_eo.data(),
                                  .ld = hidden,
                                  .slot_of_pair = d_slots.data(),
                                  .weights = d_w.data(),
                                  .n_tokens = tokens,
                                  .k = k,
                                  .hidden = hidden,
                                  .out = plain.data(),
                                  .out_stride = hidden,
                                  .accumulate = true,
                                  .add = d_add.data(),
                                  .add_stride = hidden};
    cuda::moe_combine(params, nullptr);
    params.out = fused.data();
    params.then_norm = {.weight = d_norm_w.data(),
                        .eps = 1e-6f,
                        .out = normed.data(),
                        .out_stride = hidden,
                        .out_q = q.data(),
                        .out_q_stride = q_stride};
    cuda::moe_combine(params, nullptr);
    cuda::rms_norm({.x = plain.data(),
                    .x_stride = hidden,
                    .weight = d_norm_w.data(),
                    .n = hidden,
                    .rows = tokens,
                    .eps = 1e-6f,
                    .out = normed_ref.data(),
                    .out_stride = hidden,
                    .out_q = q_ref.data(),
                    .out_q_stride = q_stride},
                   nullptr);
    CHECK(download(fused.data(), fused.size()) == download(plain.data(), plain.size()));
    const auto got = download(normed.data(), normed.size());
    CHECK(all_finite(got));
    CHECK(got == download(normed_ref.data(), normed_ref.size()));
    CHECK(download(q.data(), q.size()) == download(q_ref.data(), q_ref.size()));
  }
  // a normalisation the records cannot take is an error
  DeviceBuffer<float> buf(4 * 100);
  DeviceBuffer<int32_t> sl(4);
  cuda::MoeCombineParams bad{.expert_out = buf.data(),
                             .ld = 100,
                             .slot_of_pair = sl.data(),
                             .weights = buf.data(),
                             .n_tokens = 1,
                             .k = 1,
                             .hidden = 100,
                             .out = buf.data(),
                             .out_stride = 100};
  bad.then_norm = {.weight = buf.data(), .out = buf.data(), .out_stride = 100};
  CHECK_THROWS_AS(cuda::moe_combine(bad, nullptr), Error);  // hidden % 32 != 0
}

namespace {
// moe_experts_decode (tokens <= moe_gemv_max_tokens, fp32 x and split-int8 records) and moe_experts_prefill against a
// float64 expert FFN, E experts of H -> F -> H, k choices per token.
template <class Rng>
void check_moe_experts(int E, int H, int F, int k, std::initializer_list<int> token_counts, Rng& rng) {
  const auto gate_h = random_rows(GgmlType::q4_k, int64_t{E} * F, H, rng);
  const auto up_h = random_rows(GgmlType::q4_k, int64_t{E} * F, H, rng);
  const auto down_h = random_rows(GgmlType::q8_0, int64_t{E} * H, F, rng);
  const auto gate = dequantize_reference(GgmlType::q4_k, gate_h, int64_t{E} * F, H);
  const auto up = dequantize_reference(GgmlType::q4_k, up_h, int64_t{E} * F, H);
  const auto down = dequantize_reference(GgmlType::q8_0, down_h, int64_t{E} * H, F);
  const auto dg = upload(gate_h), du = upload(up_h), dd = upload(down_h);
  auto stack = [](const DeviceBuffer<uint8_t>& b, int64_t rows_per_expert, int64_t bytes_per_row) {
    return cuda::ExpertStack{.type = GgmlType::f32,
                             .data = b.data(),
                             .bytes = static_cast<int64_t>(b.size()),
                             .matrix_stride_bytes = rows_per_expert * bytes_per_row};
  };
  cuda::MoeExpertWeights w{.gate = stack(dg, F, row_bytes(GgmlType::q4_k, H)),
                           .up = stack(du, F, row_bytes(GgmlType::q4_k, H)),
                           .down = stack(dd, H, row_bytes(GgmlType::q8_0, F)),
                           .n_experts = E,
                           .hidden = H,
                           .ffn = F};
  w.gate.type = w.up.type = GgmlType::q4_k;
  w.down.type = GgmlType::q8_0;
  cuda::MoeWorkspace ws({.max_tokens = std::max(token_counts), .k = k, .n_experts = E, .hidden = H, .ffn = F});
  for (int tokens : token_counts) {
    const bool decode = tokens <= cuda::moe_gemv_max_tokens;
    trace("moe_experts " + std::to_string(tokens) + " tokens");
    const RoutedInputs in = random_routed_inputs(tokens, E, k, H, rng);
    const std::vector<int32_t>& ids = in.ids;
    const std::vector<float>&weights = in.weights, &x = in.x;
    DeviceBuffer<float> out(static_cast<size_t>(tokens * H));
    poison(out.data(), out.bytes());
    const cuda::MoeExpertsCall call = in.call(out.data());
    if (decode) {
      cuda::moe_experts_decode(w, ws, call, nullptr);
    } else {
      cuda::moe_experts_prefill(w, ws, call, nullptr);
    }
    // float64 reference; prefill rounds its GEMM operands (x, weights, activations) to bf16
    std::vector<double> want(static_cast<size_t>(tokens * H), 0.0);
    auto r = [&](float v) { return decode ? static_cast<double>(v) : static_cast<double>(round_bf16(v)); };
    for (int t = 0; t < tokens; ++t)
      for (int j = 0; j < k; ++j) {
        const int e = ids[t * k + j];
        std::vector<double> act(F);
        for (int f = 0; f < F; ++f) {
          double g = 0, u = 0;
          for (int h = 0; h < H; ++h) {
            g += r(gate[(int64_t{e} * F + f) * H + h]) * r(x[t * H + h]);
            u += r(up[(int64_t{e} * F + f) * H + h]) * r(x[t * H + h]);
          }
          act[f] = g / (1.0 + std::exp(-g)) * u;
          if (!decode) act[f] = round_bf16(static_cast<float>(act[f]));
        }
        for (int h = 0; h < H; ++h) {
          double s = 0;
          for (int f = 0; f < F; ++f) s += r(down[(int64_t{e} * H + h) * F + f]) * act[f];
          want[t * H + h] += weights[t * k + j] * s;
        }
      }
    check_close(decode ? "moe_experts_decode" : "moe_experts_prefill", std::to_string(tokens) + " tokens",
                compare(download(out.data(), out.size()), want), decode ? 1e-5 : 1e-3);
    if (decode) {
      // the same tokens on split-int8 records of x (and of the activations, made inside): the records'
      // rounding (each value within 1/64516 of its group's largest) bounds the difference
      const int64_t stride = cuda::x_int8_record_bytes(H);
      DeviceBuffer<uint8_t> records(static_cast<size_t>(tokens * stride));
      cuda::quantize_x_int8(
          {.x = in.d_x.data(), .x_stride = H, .rows = tokens, .k = H, .out = records.data(), .out_stride = stride},
          nullptr);
      cuda::MoeExpertsCall q = call;
      q.x_q = records.data();
      q.x_q_stride = stride;
      poison(out.data(), out.bytes());
      cuda::moe_experts_decode(w, ws, q, nullptr);
      check_close("moe_experts_decode, int8 records", std::to_string(tokens) + " tokens",
                  compare(download(out.data(), out.size()), want), 1e-4);
    }
  }
}
}  // namespace

TEST_CASE("moe_experts_decode and moe_experts_prefill match a float64 expert FFN") {
  auto rng = make_rng("moe_experts");
  // 8 experts, 3 choices: 29, 64 and 128 tokens make decode groups of at most 8 of an expert's tokens,
  // several per expert; 3 tokens groups of 2; 130 tokens take the prefill path
  check_moe_experts(8, 512, 160, 3, {1, 3, 8, 29, 64, 128, 130}, rng);
  // 64 experts, 6 choices: 2 tokens in groups of 1, 8 and 16 in groups of 2, 20 and 128 in groups of 8
  // (moe_group_tokens)
  check_moe_experts(64, 256, 64, 6, {2, 8, 16, 20, 128}, rng);
  // an FFN of 1024 (the Q8_0 down on the tensor cores): on records, 29, 64 and 128 tokens over 8 experts (11, 24
  // and 48 pairs each) make groups of 16 (the 16-token builds: a group of 11, groups of 16 and 8, three of 16)
  check_moe_experts(8, 512, 1024, 3, {29, 64, 128}, rng);
}

TEST_CASE("moe_route rejects invalid configurations with latte::Error") {
  DeviceBuffer<float> buf(1024);
  DeviceBuffer<int32_t> ids(64);
  const cuda::MoeRouterParams ok{.logits = buf.data(),
                                 .logits_stride = 64,
                                 .n_tokens = 1,
                                 .n_experts = 64,
                                 .k = 6,
                                 .ids = ids.data(),
                                 .weights = buf.data()};
  auto with = [&](auto change) {
    cuda::MoeRouterParams p = ok;
    change(p);
    return p;
  };
  CHECK_THROWS_AS(cuda::moe_route(with([](auto& p) { p.k = 9; }), nullptr), Error);
  CHECK_THROWS_AS(cuda::moe_route(with([](auto& p) { p.n_experts = 300; }), nullptr), Error);
  CHECK_THROWS_AS(cuda::moe_route(with([](auto& p) { p.n_groups = 7; }), nullptr), Error);
  CHECK_THROWS_AS(cuda::moe_route(with([](auto& p) { p.n_groups = 8, p.groups_used = 0; }), nullptr), Error);
  CHECK_THROWS_AS(cuda::moe_route(with([](auto& p) { p.n_groups = 8, p.groups_used = 1, p.k = 9; }), nullptr), Error);
}

TEST_CASE("expert-parallel: two ranks' held halves of moe_experts add up to the run over all experts") {
  // Rank 0 holds experts [0, 4), rank 1 [4, 8); the ids stay the model's. A rank gives the pairs of
  // the other's experts no slot, so out = rank 0's sum, then += rank 1's, must equal one run over all
  // 8 (up to the fp32 order of the per-token sums).
  auto rng = make_rng("moe_experts_held");
  const int E = 8, held = E / 2, H = 512, F = 160, k = 3;
  const int64_t gate_rb = static_cast<int64_t>(row_bytes(GgmlType::q4_k, H));
  const int64_t down_rb = static_cast<int64_t>(row_bytes(GgmlType::q8_0, F));
  const auto gate_h = random_rows(GgmlType::q4_k, int64_t{E} * F, H, rng);
  const auto up_h = random_rows(GgmlType::q4_k, int64_t{E} * F, H, rng);
  const auto down_h = random_rows(GgmlType::q8_0, int64_t{E} * H, F, rng);
  auto part = [](const std::vector<uint8_t>& all, int64_t first_byte, int64_t bytes) {
    return std::vector<uint8_t>(all.begin() + first_byte, all.begin() + first_byte + bytes);
  };
  struct Stacks {
    DeviceBuffer<uint8_t> gate, up, down;
    cuda::MoeExpertWeights w;
  };
  auto make = [&](int first, int count) {
    Stacks s{upload(part(gate_h, first * F * gate_rb, count * F * gate_rb)),
             upload(part(up_h, first * F * gate_rb, count * F * gate_rb)),
             upload(part(down_h, first * H * down_rb, count * H * down_rb)),
             {}};
    s.w = {.gate = {GgmlType::q4_k, s.gate.data(), static_cast<int64_t>(s.gate.size()), F * gate_rb},
           .up = {GgmlType::q4_k, s.up.data(), static_cast<int64_t>(s.up.size()), F * gate_rb},
           .down = {GgmlType::q8_0, s.down.data(), static_cast<int64_t>(s.down.size()), H * down_rb},
           .n_experts = count,
           .hidden = H,
           .ffn = F};
    return s;
  };
  const Stacks all = make(0, E), rank0 = make(0, held), rank1 = make(held, held);
  cuda::MoeWorkspace ws_all({.max_tokens = 40, .k = k, .n_experts = E, .hidden = H, .ffn = F});
  cuda::MoeWorkspace ws_half({.max_tokens = 40, .k = k, .n_experts = held, .hidden = H, .ffn = F});
  for (int tokens : {1, 5, 40}) {
    const bool decode = tokens <= 8;
    trace("moe_experts held halves " + std::to_string(tokens) + " tokens");
    // Token 0 chooses only rank 0's experts: rank 1 has no pair of it.
    const RoutedInputs in = random_routed_inputs(tokens, E, k, H, rng, /*first_token_lowest=*/true);
    auto run = [&](const Stacks& s, cuda::MoeWorkspace& ws, int held_first, float* out, bool accumulate) {
      const cuda::MoeExpertsCall call = in.call(out, accumulate, held_first);
      if (decode) {
        cuda::moe_experts_decode(s.w, ws, call, nullptr);
      } else {
        cuda::moe_experts_prefill(s.w, ws, call, nullptr);
      }
    };
    DeviceBuffer<float> want(static_cast<size_t>(tokens * H)), got(static_cast<size_t>(tokens * H));
    poison(want.data(), want.bytes());
    poison(got.data(), got.bytes());
    run(all, ws_all, -1, want.data(), false);
    run(rank0, ws_half, 0, got.data(), false);
    run(rank1, ws_half, held, got.data(), true);
    const auto w_host = download(want.data(), want.size());
    check_close(decode ? "moe_experts_decode, held halves" : "moe_experts_prefill, held halves",
                std::to_string(tokens) + " tokens",
                compare(download(got.data(), got.size()), std::vector<double>(w_host.begin(), w_host.end())), 1e-5);
  }
}
