#include "cuda/moe_experts.hpp"

#include "core/environment.hpp"

#include <latte/error.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "cuda/activations.hpp"
#include "cuda/check.hpp"
#include "cuda/moe_dispatch.hpp"
#include "cuda/x_int8.hpp"

namespace latte::cuda {
namespace {

size_t slots_of(const MoeWorkspaceShape& s) { return static_cast<size_t>(s.max_tokens) * static_cast<size_t>(s.k); }

void check_call(const MoeExpertWeights& w, const MoeWorkspace& ws, const MoeExpertsCall& c, const char* fn) {
  const auto& s = ws.shape();
  auto fail = [&](const std::string& what) { throw Error(ErrorCode::invalid_argument, std::string(fn) + ": " + what); };
  if (!c.ids || !c.weights || !c.out) fail("ids, weights and out must be set");
  if (c.n_tokens < 0 || c.n_tokens > s.max_tokens) {
    fail("n_tokens = " + std::to_string(c.n_tokens) + " exceeds the workspace (" + std::to_string(s.max_tokens) + ")");
  }
  if (c.k != s.k || w.n_experts != s.n_experts || w.hidden != s.hidden || w.ffn != s.ffn) {
    fail("weights / call do not match the workspace shape");
  }
  if (!w.gate.data || !w.up.data || !w.down.data) fail("expert stacks must be set");
}

// moe_sort's inputs and tables; the caller adds the GEMV groups (decode) or the GEMM tiles (prefill).
MoeSortParams sort_params(const MoeExpertWeights& w, MoeWorkspace& ws, const MoeExpertsCall& c) {
  return {.ids = c.ids,
          .n_tokens = c.n_tokens,
          .k = c.k,
          .n_experts = w.n_experts,
          .held_first = c.held_first,
          .expert_offsets = ws.expert_offsets.data(),
          .slot_of_pair = ws.slot_of_pair.data(),
          .token_of_slot = ws.token_of_slot.data()};
}

// `p` (GemvParams or QuantGemmParams) reading the expert matrices of `stack`.
template <class Params>
Params on_stack(Params p, const ExpertStack& stack) {
  p.type = stack.type;
  p.weight = stack.data;
  p.weight_bytes = stack.bytes;
  p.matrix_stride_bytes = stack.matrix_stride_bytes;
  return p;
}

// The decode's expert GEMVs as far as every mode shares them: gate (| up) from the call's x (and its records)
// into gate_out; down from gate_out, a slot's activations at its own row (x_row_is_y_row), into down_out.
GemvParams gate_gemv(const MoeExpertWeights& w, MoeWorkspace& ws, const MoeExpertsCall& c) {
  return on_stack(GemvParams{.n_rows = w.ffn,
                             .k = w.hidden,
                             .x = c.x,
                             .x_stride = c.x_stride,
                             .y = ws.gate_out.data(),
                             .y_stride = w.ffn,
                             .x_q = c.x_q,
                             .x_q_stride = c.x_q_stride},
                  w.gate);
}
GemvParams down_gemv(const MoeExpertWeights& w, MoeWorkspace& ws) {
  GemvParams d = on_stack(GemvParams{.n_rows = w.hidden,
                                     .k = w.ffn,
                                     .x = ws.gate_out.data(),
                                     .x_stride = w.ffn,
                                     .y = ws.down_out.data(),
                                     .y_stride = w.hidden},
                          w.down);
  d.x_row_is_y_row = true;
  return d;
}

// out[t] (+)= sum_j weights[t, j] * down_out[slot of pair (t, j)].
/// The combine waits for the call's addend (a shared expert on another stream) where it has one.
void wait_for_add(const MoeExpertsCall& c, cudaStream_t stream) {
  if (c.add_ready != nullptr) LATTE_CUDA_CHECK(cudaStreamWaitEvent(stream, c.add_ready, 0));
}

void combine_slots(const MoeExpertWeights& w, MoeWorkspace& ws, const MoeExpertsCall& c, cudaStream_t stream) {
  wait_for_add(c, stream);
  moe_combine({.expert_out = ws.down_out.data(),
               .ld = w.hidden,
               .slot_of_pair = ws.slot_of_pair.data(),
               .weights = c.weights,
               .n_tokens = c.n_tokens,
               .k = c.k,
               .hidden = w.hidden,
               .out = c.out,
               .out_stride = c.out_stride,
               .accumulate = c.accumulate,
               .add = c.add,
               .add_stride = c.add_stride,
               .then_norm = c.then_norm},
              stream);
}

// One token, every expert held, split-int8 GEMVs: choice j of the token goes through expert ids[j] into
// slot j, straight from the router's ids (no sort into groups), and the combine reads the slots in order.
void decode_one_token(const MoeExpertWeights& w, MoeWorkspace& ws, const MoeExpertsCall& c, cudaStream_t stream) {
  GemvParams g = gate_gemv(w, ws, c);
  g.max_groups = c.k;
  g.choice_ids = c.ids;
  g.weight_up = w.up.data;
  if (c.route != nullptr) g.route = *c.route;
  gemv_quant(g, stream);
  // down quantizes each slot's activations in its blocks (GemvParams::x_quantize): no records launch
  const bool records = !gemv_self_quantize();
  const int64_t stride = x_int8_record_bytes(w.ffn);
  if (records) {
    quantize_x_int8({.x = ws.gate_out.data(),
                     .x_stride = w.ffn,
                     .rows = c.k,
                     .k = w.ffn,
                     .out = ws.act_q.data(),
                     .out_stride = stride},
                    stream);
  }
  GemvParams d = down_gemv(w, ws);
  d.max_groups = c.k;
  d.x_q = records ? ws.act_q.data() : nullptr;
  d.x_q_stride = records ? stride : 0;
  d.choice_ids = c.ids;
  d.x_quantize = !records;
  gemv_quant(d, stream);
  wait_for_add(c, stream);
  moe_combine({.expert_out = ws.down_out.data(),
               .ld = w.hidden,
               .slot_of_pair = ws.choice_slots.data(),
               .weights = c.weights,
               .n_tokens = 1,
               .k = c.k,
               .hidden = w.hidden,
               .out = c.out,
               .out_stride = c.out_stride,
               .accumulate = c.accumulate,
               .add = c.add,
               .add_stride = c.add_stride,
               .then_norm = c.then_norm},
              stream);
}

}  // namespace

int moe_group_tokens(int pairs, int n_experts, int n_tokens, bool wide) {
  static const int fixed = latte::detail::env_int("LATTE_MOE_GROUP_TOKENS", 0);
  const int cap = std::min(wide ? gemv_group_max_tokens : gemv_max_tokens, std::max(1, n_tokens));
  if (fixed > 0) return std::min(fixed, cap);
  const int64_t p = pairs, e = n_experts;
  int g = 2 * p <= e ? 1 : 8 * p <= 13 * e ? 2 : gemv_max_tokens;
  if (g == gemv_max_tokens && cap > gemv_max_tokens && p > gemv_max_tokens * e) g = cap;
  return std::min(g, cap);
}

MoeWorkspace::MoeWorkspace(const MoeWorkspaceShape& shape) : shape_(shape) {
  if (shape.max_tokens <= 0 || shape.k <= 0 || shape.n_experts <= 0 || shape.hidden <= 0 || shape.ffn <= 0) {
    throw Error(ErrorCode::invalid_argument, "MoeWorkspace: every capacity must be positive");
  }
  const size_t slots = slots_of(shape);
  const int pairs = static_cast<int>(slots);
  expert_offsets = DeviceBuffer<int32_t>(static_cast<size_t>(shape.n_experts) + 1, "MoE expert offsets");
  slot_of_pair = DeviceBuffer<int32_t>(slots, "MoE slot table");
  token_of_slot = DeviceBuffer<int32_t>(slots, "MoE token table");
  tiles = DeviceBuffer<GemmTile>(static_cast<size_t>(moe_max_tiles(pairs, shape.n_experts)), "MoE GEMM tiles");
  const int decode_tokens = std::min(shape.max_tokens, moe_gemv_max_tokens);
  // at most one GEMV group per pair (groups of a single token)
  groups = DeviceBuffer<GemvGroup>(static_cast<size_t>(decode_tokens * shape.k), "MoE GEMV groups");
  counts = DeviceBuffer<int32_t>(2, "MoE counts");
  gate_out = DeviceBuffer<float>(slots * static_cast<size_t>(shape.ffn), "MoE gate output");
  up_out = DeviceBuffer<float>(slots * static_cast<size_t>(shape.ffn), "MoE up output");
  act_bf16 = DeviceBuffer<__nv_bfloat16>(slots * static_cast<size_t>(shape.ffn), "MoE activations (bf16)");
  down_out = DeviceBuffer<float>(slots * static_cast<size_t>(shape.hidden), "MoE down output");
  std::vector<int32_t> identity(static_cast<size_t>(shape.k));
  for (int j = 0; j < shape.k; ++j) identity[static_cast<size_t>(j)] = j;
  choice_slots = DeviceBuffer<int32_t>(identity.size(), "MoE choice slots");
  LATTE_CUDA_CHECK(
      cudaMemcpy(choice_slots.data(), identity.data(), identity.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  if (shape.ffn % 32 == 0) {
    act_q = DeviceBuffer<uint8_t>(
        static_cast<size_t>(decode_tokens * shape.k) * static_cast<size_t>(x_int8_record_bytes(shape.ffn)),
        "MoE activations (int8)");
  }
}

int moe_down_quantize_tokens() {
  static const int n = latte::detail::env_int("LATTE_MOE_DOWN_QUANTIZE", 0);
  return n;
}

bool moe_routes_in_sort(int pairs) {
  static const bool on = latte::detail::env_flag("LATTE_MOE_ROUTE_IN_SORT", true);
  return on && pairs >= 1 && pairs <= moe_sort_route_max_pairs;
}

void moe_experts_decode(const MoeExpertWeights& w, MoeWorkspace& ws, const MoeExpertsCall& c, cudaStream_t stream) {
  check_call(w, ws, c, "moe_experts_decode");
  if (c.n_tokens > moe_gemv_max_tokens) {
    throw Error(ErrorCode::invalid_argument,
                "moe_experts_decode: n_tokens > " + std::to_string(moe_gemv_max_tokens) + ", use moe_experts_prefill");
  }
  if (!c.x) throw Error(ErrorCode::invalid_argument, "moe_experts_decode: x (fp32) must be set");
  if (c.route != nullptr && (c.route->ids != c.ids || c.route->weights != c.weights ||
                             c.route->n_tokens != c.n_tokens || c.route->k != c.k)) {
    throw Error(ErrorCode::invalid_argument,
                "moe_experts_decode: the router call must produce the call's ids and weights");
  }
  if (c.n_tokens == 0) return;
  const int pairs = c.n_tokens * c.k;
  if (c.n_tokens == 1 && c.held_first < 0 && c.x_q != nullptr && ws.act_q.size() > 0 && w.gate.type == w.up.type &&
      w.gate.matrix_stride_bytes == w.up.matrix_stride_bytes && gemv_reads_x_int8(w.gate.type, w.hidden) &&
      gemv_reads_x_int8(w.down.type, w.ffn)) {
    decode_one_token(w, ws, c, stream);
    return;
  }
  const bool route_in_sort = c.route != nullptr && moe_routes_in_sort(pairs);
  if (c.route != nullptr && !route_in_sort) moe_route(*c.route, stream);
  const bool fused =
      w.gate.type == w.up.type && w.gate.matrix_stride_bytes == w.up.matrix_stride_bytes && w.gate.bytes == w.up.bytes;
  GemvParams g = gate_gemv(w, ws, c);
  if (fused) g.weight_up = w.up.data;  // y = silu(gate x) * (up x), both read in one pass
  // down: group i's x rows are its slots (the gated activations), y rows the same slots
  GemvParams d = down_gemv(w, ws);
  g.groups = d.groups = ws.groups.data();
  g.n_groups = d.n_groups = ws.counts.data() + 1;
  const int64_t act_stride = x_int8_record_bytes(w.ffn);
  const bool act_records =
      c.x_q != nullptr && ws.act_q.size() >= static_cast<size_t>(pairs) * static_cast<size_t>(act_stride);
  // Groups of 9-16 tokens where every expert launch takes them (the tensor-core GEMV's 16-token build, on
  // records: the down's are made below).
  bool wide = act_records;
  if (wide) {
    GemvParams gw = g, dw = d;
    gw.max_groups = dw.max_groups = 1;
    gw.max_tokens_per_group = dw.max_tokens_per_group = gemv_group_max_tokens;
    dw.x_q = ws.act_q.data();
    dw.x_q_stride = act_stride;
    wide = gemv_takes_wide_groups(gw) && gemv_takes_wide_groups(dw) &&
           (fused || gemv_takes_wide_groups(on_stack(gw, w.up)));
  }
  // Tokens per group: the GEMV is compiled for 1, 2, 4, 8 (and 16) of them, and a block pays for its build's
  // count (registers, staged records) whatever its group holds; groups of 1, 2 or 8 (16) by the mean tokens per
  // expert (moe_group_tokens), an expert with more split in several.
  const int group_tokens = moe_group_tokens(pairs, w.n_experts, c.n_tokens, wide);
  const int max_groups = moe_max_groups(pairs, w.n_experts, group_tokens);
  MoeSortParams sort = sort_params(w, ws, c);
  sort.groups = ws.groups.data();
  sort.n_groups = ws.counts.data() + 1;
  sort.group_tokens = group_tokens;
  if (route_in_sort) sort.route = *c.route;
  moe_sort(sort, stream);
  g.max_groups = d.max_groups = max_groups;
  g.max_tokens_per_group = d.max_tokens_per_group = group_tokens;
  gemv_quant(g, stream);
  if (!fused) {  // up in a launch of its own, then silu(gate) * up
    GemvParams u = on_stack(g, w.up);
    u.y = ws.up_out.data();
    gemv_quant(u, stream);
    silu_gate({.gate = ws.gate_out.data(),
               .gate_stride = w.ffn,
               .up = ws.up_out.data(),
               .up_stride = w.ffn,
               .out = ws.gate_out.data(),
               .out_stride = w.ffn,
               .rows = pairs,
               .cols = w.ffn},
              stream);
  }
  const bool down_on_records =
      act_records && (group_tokens > gemv_max_tokens || gemv_reads_x_int8(w.down.type, w.ffn, group_tokens));
  if (down_on_records && group_tokens <= moe_down_quantize_tokens()) {
    // the down's blocks quantize their groups' slots themselves (the same records): no records launch
    d.x_quantize = true;
  } else if (down_on_records) {
    // the tokens' slots of activations as records, for the split-int8 down GEMV
    quantize_x_int8({.x = ws.gate_out.data(),
                     .x_stride = w.ffn,
                     .rows = pairs,
                     .k = w.ffn,
                     .out = ws.act_q.data(),
                     .out_stride = act_stride},
                    stream);
    d.x_q = ws.act_q.data();
    d.x_q_stride = act_stride;
  }
  gemv_quant(d, stream);
  combine_slots(w, ws, c, stream);
}

void moe_experts_prefill(const MoeExpertWeights& w, MoeWorkspace& ws, const MoeExpertsCall& c, cudaStream_t stream) {
  check_call(w, ws, c, "moe_experts_prefill");
  if (c.add != nullptr || c.add_ready != nullptr) {
    throw Error(ErrorCode::invalid_argument, "moe_experts_prefill: an addend is for the decode path");
  }
  if (!c.x_bf16) throw Error(ErrorCode::invalid_argument, "moe_experts_prefill: x_bf16 must be set");
  for (const ExpertStack* s : {&w.gate, &w.up, &w.down}) {
    if (!gemm_quant_supports(s->type)) {
      throw Error(ErrorCode::unsupported,
                  "moe_experts_prefill: no fused GEMM for expert type " + std::string(type_traits(s->type).name));
    }
  }
  if (c.n_tokens == 0) return;
  const int pairs = c.n_tokens * c.k;
  const int max_tiles = moe_max_tiles(pairs, w.n_experts);
  MoeSortParams sort = sort_params(w, ws, c);
  sort.tiles = ws.tiles.data();
  sort.n_tiles = ws.counts.data();
  moe_sort(sort, stream);
  const QuantGemmParams g = on_stack(QuantGemmParams{.n_rows = w.ffn,
                                                     .k = w.hidden,
                                                     .a = c.x_bf16,
                                                     .lda = c.x_stride,
                                                     .a_rows = ws.token_of_slot.data(),
                                                     .c = ws.gate_out.data(),
                                                     .ldc = w.ffn,
                                                     .tiles = ws.tiles.data(),
                                                     .n_tiles = ws.counts.data(),
                                                     .max_tiles = max_tiles},
                                     w.gate);
  gemm_quant(g, stream);
  QuantGemmParams u = on_stack(g, w.up);
  u.c = ws.up_out.data();
  gemm_quant(u, stream);
  silu_gate({.gate = ws.gate_out.data(),
             .gate_stride = w.ffn,
             .up = ws.up_out.data(),
             .up_stride = w.ffn,
             .out = ws.act_bf16.data(),
             .out_stride = w.ffn,
             .out_type = ActOut::bf16,
             .rows = pairs,
             .cols = w.ffn},
            stream);
  gemm_quant(on_stack(QuantGemmParams{.n_rows = w.hidden,
                                      .k = w.ffn,
                                      .a = ws.act_bf16.data(),
                                      .lda = w.ffn,
                                      .c = ws.down_out.data(),
                                      .ldc = w.hidden,
                                      .tiles = ws.tiles.data(),
                                      .n_tiles = ws.counts.data(),
                                      .max_tiles = max_tiles},
                      w.down),
             stream);
  combine_slots(w, ws, c, stream);
}

}  // namespace latte::cuda
