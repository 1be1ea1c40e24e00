// Pluggable attention backends. The model computes the common part of MLA attention (the query, the
// normalised latent c and the roped k_pe); a backend caches what it needs per token and returns the
// per-head attention output. Two first-class backends ship: `mla` (weight-absorbed, caches c|k_pe)
// and `standard` (decompressed, caches per-head K and V). Host applications may register their own.
//
//   for (const auto& b : latte::AttentionRegistry::instance().list()) std::puts(b.name.c_str());
//   latte::Session s(model, {.attention = "standard"});
#pragma once

#include <latte/device.hpp>
#include <latte/model.hpp>
#include <latte/quant.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace latte {

/// A read-only view of one weight tensor as the model stores it (possibly quantized). For CPU models
/// `data` points into the memory-mapped file; for CUDA models into device memory.
struct TensorView {
  std::string_view name{};                ///< GGUF tensor name
  GgmlType type = GgmlType::f32;          ///< element type
  std::array<int64_t, 4> ne{0, 1, 1, 1};  ///< shape, ne[0] contiguous (values per row)
  const std::byte* data = nullptr;        ///< first byte; nullptr for an absent tensor
  size_t row_bytes = 0;                   ///< bytes of one row of ne[0] values

  /// Whether the tensor is present.
  [[nodiscard]] explicit operator bool() const noexcept { return data != nullptr; }
  /// Rows of ne[0] values: ne[1] * ne[2] * ne[3].
  [[nodiscard]] int64_t n_rows() const noexcept { return ne[1] * ne[2] * ne[3]; }
  /// The view of `count` consecutive rows starting at row `first` (shape [ne[0], count]).
  [[nodiscard]] TensorView rows(int64_t first, int64_t count) const noexcept {
    TensorView v = *this;
    v.ne = {ne[0], count, 1, 1};
    v.data = data + static_cast<size_t>(first) * row_bytes;
    return v;
  }
};

/// The up-projections of one layer, in whichever layouts the file carries (at least one complete).
/// Per head h: W_UK_h is [P, L] (k_nope_h = W_UK_h c), W_UV_h is [V, L] (v_h = W_UV_h c).
struct AttentionLayerWeights {
  int layer = 0;
  TensorView k_b{};   ///< attn_k_b {P, L, N}: per head, L rows of P values (W_UK_h transposed); may be empty
  TensorView v_b{};   ///< attn_v_b {L, V, N}: per head, V rows of L values (W_UV_h); may be empty
  TensorView kv_b{};  ///< attn_kv_b {L, N(P+V)}: per head, P rows of W_UK_h then V rows of W_UV_h; may be empty
};

/// A backend's KV-cache layout: one row per token per layer, the same for every layer.
struct KvLayout {
  int values_per_token = 0;               ///< per layer, e.g. mla: L + R = 576
  GgmlType element_type = GgmlType::f32;  ///< element type of the cached values
  /// Bytes of one token's row in one layer.
  [[nodiscard]] size_t bytes_per_token() const;
};

/// One sequence of a batch: where its cache rows for the current layer are, and which batch rows
/// are its new tokens. The new tokens have positions n_past, n_past+1, ... and are contiguous.
struct AttentionSequence {
  std::byte* cache = nullptr;  ///< this layer's rows; rows [0, n_past) hold earlier tokens, room for n_past + n_tokens
  int n_past = 0;              ///< tokens cached before this step
  int first_row = 0;           ///< first batch row of this sequence
  int n_tokens = 0;            ///< its batch rows: [first_row, first_row + n_tokens)
};

/// Runs `n_tasks` independent tasks, possibly in parallel; body(task, worker) with worker < n_workers.
struct TaskRunner {
  int n_workers = 1;
  std::function<void(int n_tasks, const std::function<void(int task, int worker)>& body)> run{};
  /// Runs the tasks (serially when `run` is empty).
  void operator()(int n_tasks, const std::function<void(int task, int worker)>& body) const {
    if (run) {
      run(n_tasks, body);
    } else {
      for (int t = 0; t < n_tasks; ++t) body(t, 0);
    }
  }
};

/// Everything one layer's attention step receives. Row-major buffers, T = n_rows, N heads.
struct AttentionInput {
  int layer = 0;
  int n_rows = 0;                 ///< T: new tokens in the batch, all sequences together
  const float* q = nullptr;       ///< [T, N, P+R]: per head [q_nope P | q_pe R], RoPE applied
  const float* latent = nullptr;  ///< [T, L]: the normalised latent c of each new token
  const float* k_rope = nullptr;  ///< [T, R]: the roped k_pe of each new token (shared by all heads)
  std::span<const AttentionSequence> sequences{};
  /// Optional sparse selection (DSA): [T, selection_width] cache positions each query row attends,
  /// -1 for unused slots; never beyond the row's own position. nullptr: dense causal attention.
  const int32_t* selection = nullptr;
  int selection_width = 0;
  float scale = 0.0f;                  ///< softmax scale of the scores (ModelConfig::attention_scale())
  float* out = nullptr;                ///< [T, N, V]: the attention output before attn_output
  const TaskRunner* runner = nullptr;  ///< CPU thread pool (may be null: run serially)
  void* stream = nullptr;              ///< device stream for device backends (cudaStream_t), else null
};

/// An attention implementation. One instance serves one session; it is created for a config and
/// device, prepared once with the layers' weights, then called for every layer of every step.
class AttentionBackend {
 public:
  virtual ~AttentionBackend() = default;
  /// Registered name, e.g. "mla".
  [[nodiscard]] virtual std::string_view name() const noexcept = 0;
  /// The cache row layout (values per token per layer, element type).
  [[nodiscard]] virtual KvLayout kv_layout() const = 0;
  /// Builds per-layer state from the weights (e.g. dequantized W_UK / W_UV). Called once, before
  /// any forward, with one entry per inference layer in layer order.
  virtual void prepare(std::span<const AttentionLayerWeights> layers) = 0;
  /// Appends the new tokens' rows to every sequence's cache (rows n_past .. n_past + n_tokens - 1)
  /// and writes the attention output of every batch row to input.out.
  virtual void forward(const AttentionInput& input) = 0;
};

/// A backend factory as the registry holds it. The same name may be registered several times for
/// different devices: the most recent registration whose supports() accepts the model wins.
struct AttentionBackendInfo {
  std::string name{};         ///< e.g. "mla"
  std::string description{};  ///< one line, e.g. "weight-absorbed MLA, caches c|k_pe (CPU, fp32)"
  std::function<bool(const ModelConfig& config, Device device)> supports{};
  std::function<std::unique_ptr<AttentionBackend>(const ModelConfig& config, Device device)> create{};
};

/// The process-wide list of attention backends. Thread-safe.
class AttentionRegistry {
 public:
  /// The registry (the built-in CPU backends are registered on first use).
  static AttentionRegistry& instance();

  /// Registers a backend factory. Throws Error(invalid_argument) for an empty name or factory.
  void add(AttentionBackendInfo info);
  /// Removes every registration named `name`; returns how many were removed.
  int remove(std::string_view name);
  /// All registrations, most recent first.
  [[nodiscard]] std::vector<AttentionBackendInfo> list() const;
  /// Distinct registered names, sorted.
  [[nodiscard]] std::vector<std::string> names() const;
  /// Creates the backend `name` for a model. Throws Error(not_found) listing the available names
  /// when none is registered under it, Error(unsupported) when none supports the config and device.
  [[nodiscard]] std::unique_ptr<AttentionBackend> create(std::string_view name, const ModelConfig& config,
                                                         Device device) const;

 private:
  AttentionRegistry();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Chooses the backend name for a session. Precedence: `requested` unless empty or "auto"; then
/// LATTE_ATTENTION (mla | standard | any registered name) unless unset, empty or "auto"; then
/// LATTE_MLA_DISABLE=1 (any value but "" and "0") meaning "standard"; then auto. On the CPU, auto
/// is "mla" (both backends are exact in fp32; the absorbed one caches 576 values per token).
/// Throws Error(not_found) listing the available names when the chosen name is not registered.
std::string resolve_attention_backend(std::string_view requested, const ModelConfig& config, Device device);

}  // namespace latte
