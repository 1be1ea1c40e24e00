// Diagnostics: activation taps (every named intermediate of the forward pass, observable without
// changing the computation), tap recording and comparison, a .npy dump format, and the GPU self-test.
//
//   latte::diagnostics::TapRecorder rec;
//   session.set_tap_observer(rec.observer());  session.eval(tokens);  // rec.taps() in forward order
//
// Tap names (stable; `N` is the block index, T the step's tokens, H hidden, E experts, K used experts,
// Nh heads, P/R/V/L as in the model config):
//   token_embd             [T, H]        the embedded tokens
//   blk.N.attn_norm        [T, H]        RMSNorm(x) entering attention
//   blk.N.q                [T, Nh, P+R]  the query (q_b(RMSNorm(q_a(x))) or q(x)) before RoPE
//   blk.N.q_pe             [T, Nh, R]    the query's rope part after RoPE
//   blk.N.kv_latent        [T, L]        the normalised latent c
//   blk.N.k_pe             [T, R]        the shared rope key after RoPE
//   blk.N.index_selection  [T, top_k]    glm-dsa steps with sparse attention only: the positions the
//                                        indexer selected (as floats), ascending per row, -1 padded
//   blk.N.attn_heads       [T, Nh, V]    attention output of every head, before attn_output
//   blk.N.attn_out         [T, H]        attention output after attn_output (the residual update,
//                                        computed as x_after - x_before in fp32)
//   blk.N.ffn_norm         [T, H]        RMSNorm(x) entering the FFN
//   blk.N.router_logits    [T, E]        MoE blocks only: the router's logits
//   blk.N.expert_ids       [T, K]        MoE blocks only: chosen experts (as floats), ascending per row
//   blk.N.expert_weights   [T, K]        MoE blocks only: their weights, in the order of expert_ids
//   blk.N.ffn_out          [T, H]        the FFN's residual update (dense, or routed + shared experts),
//                                        computed as x_after - x_before in fp32
//   blk.N.residual         [T, H]        the residual stream after the block
//   output_norm            [n_out, H]    final RMSNorm of the rows whose logits are computed
//   logits                 [n_out, n_vocab]
// A forward step emits them in this order (blocks in index order). A prompt longer than one step
// (Session evaluates prompts in chunks) emits every tap once per step; rows are that step's tokens.
#pragma once

#include <latte/device.hpp>
#include <latte/token.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace latte {

class Model;
struct SessionParams;

/// One observed intermediate. The views are valid only during the callback (copy what you keep).
struct Tap {
  std::string_view name{};           ///< e.g. "blk.3.attn_out"
  int layer = -1;                    ///< block index, -1 for token_embd, output_norm and logits
  std::span<const int64_t> shape{};  ///< row-major dimensions, the first one rows (tokens)
  std::span<const float> data{};     ///< host fp32 values, product(shape) of them, C order
};

/// Receives taps. `wants` (optional; empty = every tap) lets a forward pass skip the copies of taps
/// nobody reads; `on_tap` is called for each wanted tap, on the thread that runs eval().
struct TapObserver {
  std::function<bool(std::string_view name)> wants{};
  std::function<void(const Tap& tap)> on_tap{};
};

namespace diagnostics {

/// Documented relative-error bounds of a comparison (‖a−b‖/‖b‖ per tap).
/// fp32 against fp32 (CPU backends, CPU runs vs an fp32 dump): summation order only.
inline constexpr double kFp32Bound = 1e-4;
/// Anything computed in bf16 (CUDA paths, a bf16 transformers run).
inline constexpr double kBf16Bound = 2e-2;

/// A tap kept in memory; steps of a multi-step eval concatenated along the first dimension.
struct TapRecord {
  std::string name;
  int layer = -1;
  std::vector<int64_t> shape;
  std::vector<float> data;
};

/// Records every tap an observed session emits, in first-emission order.
///
///   TapRecorder rec; session.set_tap_observer(rec.observer()); session.eval(ids);
class TapRecorder {
 public:
  /// An observer appending to this recorder (which must outlive its use).
  [[nodiscard]] TapObserver observer();
  /// The recorded taps, in forward order.
  [[nodiscard]] const std::vector<TapRecord>& taps() const noexcept { return taps_; }
  /// Forgets everything recorded.
  void clear() noexcept { taps_.clear(); }

 private:
  std::vector<TapRecord> taps_;
};

/// Runs `tokens` through a fresh session of `model` with `params` (logits_all forced on, n_ctx at
/// least the token count) and returns its taps.
std::vector<TapRecord> record_taps(const Model& model, const SessionParams& params, std::span<const Token> tokens);

/// One row of a comparison.
struct TapComparison {
  std::string name;
  double rel_error = 0;  ///< ‖a−b‖/‖b‖ (expert_ids, index_selection: the fraction of differing entries); inf for NaN/Inf
  double cosine = 1;     ///< cosine similarity of a and b (1 when both are zero)
  bool agrees = true;    ///< rel_error <= bound, shapes equal, both present
  std::string note;      ///< why it disagrees beyond the error ("missing in B", "shape [2,3] vs [2,4]")
};

/// The comparison of two tap sets, in the order of `a`.
struct ComparisonReport {
  double bound = kFp32Bound;
  std::vector<TapComparison> taps;
  std::optional<size_t> first_divergence;  ///< index into taps of the first disagreeing tap
  /// "first divergence: blk.0.attn_out, rel err 0.87 (bound 0.02); upstream taps agree", or
  /// "all N taps agree (bound 1e-04)".
  [[nodiscard]] std::string summary() const;
};

/// Compares `a` (the run under test) with `b` (the reference) tap by tap, by name. Taps present
/// only in `b` are ignored (a reference may record more); taps of `a` missing in `b` are listed
/// but do not count as a divergence.
ComparisonReport compare_taps(std::span<const TapRecord> a, std::span<const TapRecord> b, double bound);

/// Writes `values` (C order, `shape`) as a NumPy .npy file (format 1.0, little-endian '<f4').
/// Throws Error(io) naming the path.
void write_npy(const std::string& path, std::span<const int64_t> shape, std::span<const float> values);
/// Reads a .npy file of '<f4' (or '<f8', converted), C order. Throws Error(invalid_file) naming the
/// path and the fault for any other layout.
TapRecord read_npy(const std::string& path);

/// Writes every tap as DIR/<name>.npy plus DIR/index.json ({"taps": [{"name", "layer", "shape",
/// "file"}, ...]} in forward order, "tokens": [...]). Creates DIR. Throws Error(io).
void write_tap_dump(const std::string& dir, std::span<const TapRecord> taps, std::span<const Token> tokens);
/// A dump written by write_tap_dump or tools/oracle/dump_taps.py, in its index order; `tokens`
/// receives the index's token ids when not null. Throws Error(not_found / invalid_file).
std::vector<TapRecord> read_tap_dump(const std::string& dir, std::vector<Token>* tokens = nullptr);

/// The bound for comparing with a dump: kFp32Bound when its index says "precision": "float32"
/// (latte dumps and fp32 transformers runs), else kBf16Bound. Throws like read_tap_dump.
double tap_dump_bound(const std::string& dir);

/// Result of the GPU self-test.
struct SelftestResult {
  bool ran = false;     ///< false: no GPU, or a build without CUDA (`reason` says which)
  bool passed = false;  ///< every case within its bound
  std::string reason;   ///< why it did not run
  std::string table;    ///< one line per case: name, shape, rel err, bound, verdict
};

/// Runs every GPU kernel family (weight dequantization, GEMV and GEMM for each weight type, RMSNorm,
/// RoPE/YaRN, the MoE router and expert dispatch, SiLU-gate, embedding, MLA and standard decode,
/// flash prefill, the DSA indexer, KV append) against a float64 CPU reference on fresh random data at
/// the shapes of the built-in presets (deepseek-v2-lite, deepseek-v3, glm-5), on `device`. Never
/// throws for a missing GPU: returns ran = false. The table ends with "N checks, M mismatched, S s".
SelftestResult run_selftest(Device device);
/// The same at the shapes of `model` (its config, its weight types, its rope, router and indexer
/// parameters); the model may be loaded anywhere (only its config and file are read).
SelftestResult run_selftest(Device device, const Model& model);
/// The cases run_selftest would run (for `model`, or the presets when null), one per line with their
/// kernel family, shape and bound, then what is not covered. Needs no GPU.
std::string selftest_case_list(const Model* model);

/// The first-run self-test: for a CUDA `device`, runs run_selftest once per GPU architecture and
/// driver pair, caching the verdict in $XDG_CACHE_HOME/latte/selftest-<arch>-<driver>.json (or
/// ~/.cache/latte/...); does nothing for the CPU, when LATTE_NO_SELFTEST=1, or when a cached pass
/// exists. Throws Error(unsupported) naming the failing cases when the test fails (and caches the
/// failure, so it throws again without re-running). Model::load must call it for a CUDA device
/// before the first forward pass.
void ensure_selftest(Device device);

}  // namespace diagnostics
}  // namespace latte
