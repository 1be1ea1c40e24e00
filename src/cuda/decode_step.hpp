// The fused decode step: one token of one sequence through every block and the output head in ONE
// persistent kernel (decode_step_kernel.cu), for the `mla` backend. A decode step of the layered path
// is ~20 launches per block, each with its own ramp, drain and dependency wait, and GEMVs that pay their
// DRAM latency after the wait; here one block per SM walks the same math phase by phase with a grid
// barrier between phases, and a producer warp per block streams every weight row the block will read
// (and the latent cache tiles of the attention) into a ring of shared-memory stages with the copy engine
// -- across phase boundaries, so the next phase's weights are already arriving while the barrier waits.
// Routed experts are streamed as soon as the router's barrier has passed. Per MoE block, phases:
//   1  x_n = RMSNorm(x);  proj = [q | kv_a] x_n                   (q_lora: then q = q_b RMSNorm(q_a x_n))
//   2  q_lat[h] = W_UK_h^T q_nope[h];  one block: c = RMSNorm(kv), k_pe, q_pe rotated, c|k_pe appended
//   3  attention over the latent cache: (16-head group, position split) tasks, partial softmax sums
//   4  o[h] = W_UV_h (the splits of head h combined)
//   5  x += W_o o
//   6  x_n = RMSNorm(x);  router logits;  shared experts' silu(gate) * up
//   7  each block routes (the same top-k everywhere);  routed experts' silu(gate) * up
//   8  x += sum_k w_k down_k h_k + down_shared h_shared            (one output row per unit: no atomics)
// Dense blocks replace 6-8 by gate|up and down. Then logits = output RMSNorm(x). GEMVs multiply against x
// quantized to two int8 planes (split_int8_dot.cuh: ~1.6e-5 of each 32-value unit's largest value).
//
//   DecodeStep step(config, weights);                  // throws Error(unsupported) naming what it lacks
//   step.stage({.token = t, .position = pos, .cache = layer_rows});  step.enqueue(logits, stream);
#pragma once

#include "cuda/device_buffer.hpp"
#include "cuda/device_weights.hpp"

#include <latte/model.hpp>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace latte::cuda {

namespace step {

/// Warps that compute. With the producer warp a block is 16 warps, 4 per scheduler, which leaves each
/// thread 128 registers (17 warps: 96, and the inlined walk spills).
inline constexpr int kConsumerWarps = 15;
inline constexpr int kConsumerThreads = 32 * kConsumerWarps;  ///< 480
inline constexpr int kThreads = kConsumerThreads + 32;        ///< + the producer warp: 512
inline constexpr int kStageBytes = 16 * 1024;                 ///< one ring stage (at least)
inline constexpr int kMaxSources = 9;                         ///< rows summed into one output: 8 experts + shared
inline constexpr int kMaxExpertsUsed = 8;
inline constexpr int kHeadGroup = 16;                                      ///< heads per attention task
inline constexpr int kCacheRowElems = 576;                                 ///< L + R bf16 values per cached position
inline constexpr int kTilePositions = kStageBytes / (2 * kCacheRowElems);  ///< 14 positions per attention tile
inline constexpr int kMaxRopePairs = 64;
inline constexpr int kMaxLayers = 128;
inline constexpr int kMaxTimedSyncs = 1024;  ///< timing slots per block (Scratch::timing)
inline constexpr int kTimingFields = 5;      ///< long longs per timing slot

/// What each grid barrier of the step ends (timing records).
enum Phase : int {
  kPhaseAttnInput = 0,  ///< 1: RMSNorm, [q | kv_a]
  kPhaseQb,             ///< q_lora: RMSNorm, q_b
  kPhaseAbsorb,         ///< 2: W_UK, latent append, rope
  kPhaseAttention,      ///< 3: attention over the cache
  kPhaseWuv,            ///< 4: W_UV
  kPhaseOutput,         ///< 5: attn_output
  kPhaseDenseGateUp,    ///< dense gate | up
  kPhaseDenseDown,      ///< dense down
  kPhaseRouter,         ///< 6: router, shared gate | up
  kPhaseExperts,        ///< 7: routed gate | up
  kPhaseDown,           ///< 8: routed and shared downs
  kPhaseHead,           ///< the output head
  kPhaseCount
};

/// One weight matrix (or a stack of equally shaped ones: experts, heads) as the step reads it.
struct Matrix {
  const uint8_t* data = nullptr;  ///< matrix 0, row 0
  int64_t row_bytes = 0;
  int64_t stride = 0;  ///< bytes between stacked matrices
  int32_t rows = 0;    ///< rows of one matrix
  int32_t k = 0;       ///< values per row (a multiple of 32)
  int32_t type = 0;    ///< GgmlType
};

/// One block's weights.
struct Layer {
  const float* attn_norm = nullptr;  ///< [H]
  const float* q_a_norm = nullptr;   ///< [Lq]
  const float* kv_a_norm = nullptr;  ///< [L]
  const float* ffn_norm = nullptr;   ///< [H]
  const float* exp_probs_b = nullptr;
  Matrix attn_input[2];  ///< [query | kv_a] rows of proj: one fused matrix, or query then kv_a
  int n_attn_input = 1;
  Matrix q_b;          ///< q_lora models: {Lq, N(P+R)}
  Matrix k_b;          ///< {P, L, N}: stride = one head's L rows
  Matrix v_b;          ///< {L, V, N}: stride = one head's V rows
  Matrix attn_output;  ///< {N V, H}
  int moe = 0;
  Matrix gate, up, down;              ///< dense FFN, or the shared experts of a MoE block (down.data null: none)
  Matrix router;                      ///< {H, E}
  Matrix exp_gate, exp_up, exp_down;  ///< stacks of E matrices
};

/// The model's shapes and rules, as the kernel needs them.
struct Shape {
  int H = 0, N = 0, P = 0, R = 0, L = 0, V = 0, Lq = 0;
  int E = 0, K = 0, F = 0, F_shared = 0, F_dense = 0;
  int n_groups = 1, groups_used = 1;
  int sigmoid = 0, normalize = 0;
  float expert_scale = 1.0f;
  float eps = 1e-6f;
  float attn_scale = 1.0f;  ///< softmax scale (YaRN mscale included)
  int n_layer = 0;
  int vocab = 0;
  int proj_width = 0;   ///< floats per proj row: query part then kv_a (L + R)
  int query_width = 0;  ///< Lq or N (P + R)
  // rope
  float freq_scale = 1.0f, ext_factor = 0.0f, corr_low = 0.0f, corr_high = 0.0f;
  double inv_freq[kMaxRopePairs] = {};
};

/// What changes every step (device memory, uploaded per step).
struct Inputs {
  int32_t token = 0;
  int32_t position = 0;             ///< of the token; the cache holds positions 0 .. position - 1
  uint8_t* cache[kMaxLayers] = {};  ///< per layer: the sequence's bf16 rows of L + R values
};

/// Device scratch of one step (fp32 unless noted).
struct Scratch {
  float* x = nullptr;           ///< [H] residual stream
  float* proj = nullptr;        ///< [proj_width]
  float* q = nullptr;           ///< [N (P + R)] q_lora models: q_b output
  float* q_lat = nullptr;       ///< [N, L]
  float* q_pe = nullptr;        ///< [N, R] rotated
  float* partial_o = nullptr;   ///< [tasks, 16, L] attention partials (unnormalised)
  float* partial_ml = nullptr;  ///< [tasks, 16, 2] their running max (log2 domain) and sum
  float* attn = nullptr;        ///< [N V]
  float* router = nullptr;      ///< [E]
  float* hidden = nullptr;      ///< [K F + F_shared] routed then shared activations; dense: [F_dense]
  unsigned* barrier = nullptr;  ///< grid barrier counter (zeroed before every launch)
  // diagnostics (optional, written by block 0): the taps the fused step can emit
  float* layer_out = nullptr;       ///< [n_layer, H]: x after each block
  float* embed_out = nullptr;       ///< [H]: the token's embedding row
  int32_t* expert_ids = nullptr;    ///< [n_layer, K]: each MoE block's chosen experts, best first
  float* expert_weights = nullptr;  ///< [n_layer, K]: their weights
  /// optional [grid, kMaxTimedSyncs, kTimingFields]: per block and barrier {phase, clock at arrival,
  /// clock at release, thread 0's cycles in the phase's x preparation, and waiting for chunks} (SM
  /// clock cycles; slot 0 = the block's start, the last = the head's end)
  long long* timing = nullptr;
};

/// Everything the kernel reads.
struct Params {
  Shape s;
  const Layer* layers = nullptr;  ///< device [n_layer]
  Matrix token_embd;
  const float* output_norm = nullptr;
  Matrix output;
  const Inputs* inputs = nullptr;  ///< device
  Scratch scratch;
  float* logits = nullptr;  ///< [vocab]
  int max_tasks = 0;        ///< attention tasks the partial buffers hold
  // dynamic shared memory layout (bytes)
  int n_stages = 0;
  int stage_bytes = 0;  ///< a multiple of kStageBytes: the largest unit of rows fits one stage
  int xq_cap = 0;       ///< split-int8 units the x area holds
  int xf_cap = 0;       ///< fp32 values the x area holds
  int x_area_bytes = 0;
  int own_cap = 0;  ///< floats after the fixed region: the block's rows of x (ceil(H / grid) + 1)
  int smem_bytes = 0;
};

/// Device buffers for a step's observable values (each optional; see Scratch).
struct Observed {
  float* layer_out = nullptr;       ///< [n_layer, H]
  float* embed = nullptr;           ///< [H]
  int32_t* expert_ids = nullptr;    ///< [n_layer, K]
  float* expert_weights = nullptr;  ///< [n_layer, K]
};

}  // namespace step

/// Host side of the fused decode step: the device tables, the scratch and the launch.
class DecodeStep {
 public:
  /// Builds the tables for `weights` on the current device, for a grid of one block per SM (or `grid`
  /// blocks when > 0, at most one per SM). Throws Error(unsupported) with the reason when the model has
  /// a shape or a tensor type the fused step does not handle (see unsupported_reason).
  DecodeStep(const ModelConfig& config, std::shared_ptr<const DeviceWeights> weights, int grid = 0);

  /// Why `config` with `weights` cannot run fused on a grid of `grid` blocks with `smem_per_block`
  /// bytes of shared memory each, or "" when it can.
  static std::string unsupported_reason(const ModelConfig& config, const DeviceWeights& weights, int grid,
                                        int smem_per_block);

  struct StepInput {
    int32_t token = 0;
    int32_t position = 0;                     ///< the cache holds positions 0 .. position - 1
    std::span<const std::byte* const> cache;  ///< per layer, the sequence's cache rows (device)
  };
  /// Writes the step's inputs into the pinned staging buffer (host; the previous step's upload must
  /// have run: the caller synchronises its stream before).
  void stage(const StepInput& in);
  using Observed = step::Observed;
  /// Enqueues the upload of the staged inputs, the barrier reset and the kernel: the logits land in
  /// `logits` (device, [vocab] fp32), the observed values in `observed`'s buffers when given.
  /// Graph-capturable: the upload reads the staging buffer when it runs.
  void enqueue(float* logits, cudaStream_t stream, const Observed& observed = {});

  /// Per-phase time of the steps since timing was switched on (set_timing, or LATTE_STEP_TIMING=1 in
  /// the CUDA forward pass), per phase kind over blocks and layers. A block's work (previous release to
  /// arrival) holds thread 0's x preparation and its waits for chunks (the data not there yet).
  struct PhaseTime {
    int phase = 0;
    double count = 0;            ///< barriers of this kind per step
    double slowest_work_us = 0;  ///< per step: the slowest block's work (arrival - previous release), summed
    double mean_work_us = 0;     ///< per step: the blocks' mean work, summed
    double wait_us = 0;          ///< per step: release - arrival averaged over blocks, summed
    double prep_us = 0;          ///< per step: thread 0's x preparation, averaged over blocks, summed
    double data_wait_us = 0;     ///< per step: thread 0's waits for chunks, averaged over blocks, summed
  };
  void set_timing(bool on);
  [[nodiscard]] bool timing_on() const noexcept { return params_.scratch.timing != nullptr; }
  /// Adds the last step's records (synchronises `stream`) to the running totals.
  void collect_timing(cudaStream_t stream);
  /// A table of the totals per step, averaged over the collected steps.
  [[nodiscard]] std::string timing_table() const;

  [[nodiscard]] int grid() const noexcept { return grid_; }
  [[nodiscard]] const step::Params& params() const noexcept { return params_; }

 private:
  std::shared_ptr<const DeviceWeights> weights_;
  step::Params params_{};
  int grid_ = 0;
  int n_layer_ = 0;
  DeviceBuffer<step::Layer> layers_;
  DeviceBuffer<step::Inputs> inputs_;
  PinnedBuffer<step::Inputs> inputs_host_;
  DeviceBuffer<float> scratch_;
  DeviceBuffer<unsigned> barrier_;
  DeviceBuffer<long long> timing_;
  std::vector<PhaseTime> timing_sum_;
  int timing_steps_ = 0;
  double clock_ghz_ = 1.0;
};

/// Launches the kernel (decode_step_kernel.cu) with `grid` blocks, one per SM, as a cooperative launch
/// (every block resident: the grid barriers need it). Throws latte::Error when the launch fails.
void launch_decode_step(const step::Params& p, int grid, cudaStream_t stream);
/// Bytes of the kernel's fixed shared-memory region after the x area.
int decode_step_misc_bytes() noexcept;
/// Blocks of the kernel that fit one SM with `smem_bytes` of dynamic shared memory (current device).
int decode_step_blocks_per_sm(int smem_bytes);

}  // namespace latte::cuda
