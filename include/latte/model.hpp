// ModelConfig (the hyper-parameters a GGUF file's metadata describes), WeightAudit (how the file's
// tensors map onto the architecture) and Model (a loaded model that sessions share).
//
//   auto model = latte::Model::load("DeepSeek-V2-Lite-Q4_K_M.gguf");
//   std::printf("%d layers, vocabulary %d\n", model.config().n_layer, model.config().n_vocab);
#pragma once

#include <latte/device.hpp>
#include <latte/tokenizer.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace latte {

namespace gguf {
class File;
class Writer;
}  // namespace gguf

/// The model families latte runs. Each has its own GGUF `general.architecture` name.
enum class Architecture {
  deepseek2,  ///< "deepseek2": DeepSeek-V2 / V2-Lite / V2.5 / V3 / R1, GLM-4.7-Flash
  glm_dsa,    ///< "glm-dsa": GLM-5 (MLA plus the DeepSeek Sparse Attention lightning indexer)
};

/// The GGUF name of an architecture ("deepseek2", "glm-dsa").
std::string_view architecture_name(Architecture arch) noexcept;
/// Every architecture this build supports.
std::span<const Architecture> supported_architectures() noexcept;
/// Parses a GGUF architecture name. Throws Error(unsupported) naming it and listing supported ones.
Architecture parse_architecture(std::string_view name);

/// How router logits become expert scores (`{arch}.expert_gating_func`; the values are the file's).
enum class ExpertGating : uint32_t {
  softmax = 1,  ///< DeepSeek-V2 / V2.5 (the default for deepseek2 files without the key)
  sigmoid = 2,  ///< DeepSeek-V3 / R1, GLM-4.7-Flash, GLM-5 (the default for glm-dsa files)
};

/// `{arch}.rope.scaling.type`.
enum class RopeScalingType {
  none,    ///< plain RoPE
  linear,  ///< positions divided by `factor`
  yarn,    ///< YaRN: per-frequency interpolation plus an attention-scale correction
};

/// RoPE frequency scaling. Defaults are llama.cpp's for keys absent from the file.
struct RopeScaling {
  RopeScalingType type = RopeScalingType::none;
  float factor = 1.0f;                   ///< rope.scaling.factor (context extension ratio)
  uint32_t original_context_length = 0;  ///< rope.scaling.original_context_length (tokens)
  float yarn_beta_fast = 32.0f;          ///< rope.scaling.yarn_beta_fast (rotations)
  float yarn_beta_slow = 1.0f;           ///< rope.scaling.yarn_beta_slow (rotations)
  float yarn_log_multiplier = 0.0f;      ///< rope.scaling.yarn_log_multiplier = 0.1 * mscale_all_dim
  friend bool operator==(const RopeScaling&, const RopeScaling&) = default;
};

/// The DeepSeek Sparse Attention lightning indexer of glm-dsa models. `n_head == 0` means none.
struct IndexerConfig {
  int n_head = 0;          ///< attention.indexer.head_count (GLM-5: 32)
  int head_dim = 0;        ///< attention.indexer.key_length (GLM-5: 128); RoPE covers its first R dims
  int top_k = 0;           ///< attention.indexer.top_k: cache positions each query attends (GLM-5: 2048)
  float norm_eps = 1e-6f;  ///< epsilon of the LayerNorm on the indexer key (not stored in GGUF files)
  friend bool operator==(const IndexerConfig&, const IndexerConfig&) = default;
};

/// Every hyper-parameter the forward pass needs, typed. Names follow DESIGN.md: H = n_embd,
/// N = n_head, Lq = q_lora_rank, L = kv_lora_rank, P = qk_nope_head_dim, R = qk_rope_head_dim,
/// V = v_head_dim. Defaults are those llama.cpp's loader applies when a key is absent.
struct ModelConfig {
  Architecture arch = Architecture::deepseek2;
  std::string name{};  ///< general.name (informational)

  int n_vocab = 0;                    ///< vocabulary size: token_embd's ne[1] (else {arch}.vocab_size, else tokenizer)
  int context_length = 0;             ///< {arch}.context_length: trained context (tokens)
  int n_embd = 0;                     ///< H, {arch}.embedding_length
  int n_layer = 0;                    ///< {arch}.block_count, including the trailing MTP (nextn) blocks
  int n_nextn_layer = 0;              ///< {arch}.nextn_predict_layers: trailing blocks skipped for inference
  int n_dense_lead = 0;               ///< {arch}.leading_dense_block_count: leading blocks with a dense FFN
  int n_ff = 0;                       ///< {arch}.feed_forward_length: dense FFN width
  int n_ff_expert = 0;                ///< {arch}.expert_feed_forward_length: routed and shared expert width
  int n_expert = 0;                   ///< {arch}.expert_count: routed experts per MoE block
  int n_expert_used = 0;              ///< {arch}.expert_used_count: experts chosen per token
  int n_expert_shared = 0;            ///< {arch}.expert_shared_count: always-on experts (fused into one *_shexp FFN)
  int n_expert_group = 1;             ///< {arch}.expert_group_count (1 = no group-limited routing)
  int n_expert_group_used = 1;        ///< {arch}.expert_group_used_count
  float expert_weights_scale = 1.0f;  ///< {arch}.expert_weights_scale (routed_scaling_factor)
  bool expert_weights_norm = false;   ///< {arch}.expert_weights_norm (norm_topk_prob)
  ExpertGating expert_gating = ExpertGating::softmax;  ///< {arch}.expert_gating_func

  int n_head = 0;                   ///< N, {arch}.attention.head_count
  int q_lora_rank = 0;              ///< Lq, {arch}.attention.q_lora_rank; 0 = no query compression (V2-Lite)
  int kv_lora_rank = 0;             ///< L, {arch}.attention.kv_lora_rank (512)
  int qk_nope_head_dim = 0;         ///< P (128; GLM-4.7-Flash and GLM-5: 192)
  int qk_rope_head_dim = 0;         ///< R, {arch}.rope.dimension_count (64)
  int v_head_dim = 0;               ///< V (128; GLM-4.7-Flash and GLM-5: 256)
  float rms_norm_eps = 1e-6f;       ///< {arch}.attention.layer_norm_rms_epsilon
  float rope_freq_base = 10000.0f;  ///< {arch}.rope.freq_base
  RopeScaling rope_scaling{};
  IndexerConfig indexer{};  ///< glm-dsa only

  /// Blocks that run during inference: n_layer - n_nextn_layer.
  [[nodiscard]] int n_layer_main() const noexcept { return n_layer - n_nextn_layer; }
  /// Whether block `il` has a MoE FFN (else a dense one).
  [[nodiscard]] bool is_moe_layer(int il) const noexcept { return il >= n_dense_lead; }
  /// P + R: the query/key head width of the decompressed attention.
  [[nodiscard]] int qk_head_dim() const noexcept { return qk_nope_head_dim + qk_rope_head_dim; }
  /// Whether the layers carry a DSA lightning indexer.
  [[nodiscard]] bool has_indexer() const noexcept { return indexer.n_head > 0; }
  /// YaRN's magnitude correction 1 + yarn_log_multiplier * ln(factor); 1 without YaRN.
  [[nodiscard]] float yarn_mscale() const noexcept;
  /// Softmax scale of the attention scores: mscale^2 / sqrt(P + R). Never 1/sqrt(L + R).
  [[nodiscard]] float attention_scale() const noexcept;

  /// Reads the configuration from a GGUF file's metadata (and token_embd's shape for n_vocab).
  /// Throws Error(unsupported) for an unknown architecture, Error(invalid_file) naming the key for a
  /// missing required key, a wrong type or an inconsistent value (validate() runs at the end).
  static ModelConfig from_gguf(const gguf::File& file);

  /// Which K/V metadata convention write_gguf_metadata uses.
  enum class KvMetadata {
    mla,     ///< key_length = L+R, value_length = L, key_length_mla = P+R, value_length_mla = V,
             ///< head_count_kv = 1 (files with split attn_k_b / attn_v_b, current llama.cpp)
    legacy,  ///< key_length = P+R, value_length = V, head_count_kv = N (files with fused attn_kv_b only)
  };
  /// Writes general.architecture, general.name (when set) and every `{arch}.` key above, so that
  /// from_gguf reads back an equal config and llama.cpp loads the file.
  void write_gguf_metadata(gguf::Writer& writer, KvMetadata kv = KvMetadata::mla) const;

  /// Checks internal consistency (positive sizes, expert_used <= expert_count, groups dividing
  /// expert_count, even rope dims, ...). Throws Error(invalid_file) listing every problem found.
  void validate() const;

  friend bool operator==(const ModelConfig&, const ModelConfig&) = default;
};

/// How the tensors of a file map onto an architecture. Everything is listed, nothing is fatal here:
/// Model::load throws when ok() is false, `latte inspect` prints it.
struct WeightAudit {
  /// One tensor and what is wrong with it (or, for `mapped`/`skipped`, what it is used as).
  struct Entry {
    std::string tensor{};  ///< GGUF tensor name, e.g. "blk.3.attn_kv_a_mqa.weight"
    std::string detail{};  ///< e.g. "shape [512, 576] expected [2048, 576]"
  };
  std::vector<Entry> mapped;       ///< used by the forward pass
  std::vector<Entry> skipped;      ///< recognised but unused (MTP / nextn blocks)
  std::vector<Entry> unexpected;   ///< present in the file, not part of the architecture
  std::vector<Entry> missing;      ///< required by the architecture, absent from the file
  std::vector<Entry> wrong_shape;  ///< present with a shape the config does not imply
  std::vector<Entry> bad_type;     ///< present with an element type latte cannot compute with

  /// True when nothing is unexpected, missing, mis-shaped or of an unusable type.
  [[nodiscard]] bool ok() const noexcept {
    return unexpected.empty() && missing.empty() && wrong_shape.empty() && bad_type.empty();
  }
  /// Every problem, one per line ("missing: blk.0.attn_norm.weight (...)"); empty when ok().
  [[nodiscard]] std::string problems() const;
  /// A short human-readable report: counts, then the problems.
  [[nodiscard]] std::string summary() const;
};

/// Maps every tensor of `file` against what `config` implies (shapes, the two K/V layouts, MTP
/// blocks, optional tensors). Never throws for problems with the tensors: they are listed.
WeightAudit audit_weights(const gguf::File& file, const ModelConfig& config);

/// How a tensor-parallel model divides its routed experts between ranks (docs/tensor-parallel.md).
enum class MoeSplit {
  expert_parallel,  ///< each rank holds E / tensor_parallel whole experts
  tensor_parallel,  ///< each rank holds F / tensor_parallel rows (gate, up) and columns (down) of every expert
};

/// How to load a model.
struct ModelParams {
  Device device = Device::cpu();  ///< where the weights live and the forward pass runs
  /// Ranks one model is split over (1 = none): attention by heads, FFNs by width, experts as
  /// `moe_split` says. On the CPU the ranks are threads; Model::load throws Error(unsupported) naming
  /// the tensor when the model cannot be split this many ways.
  int tensor_parallel = 1;
  MoeSplit moe_split = MoeSplit::expert_parallel;  ///< with tensor_parallel > 1
  /// Load only this process's rank of a model split over several processes, one GPU each, on one
  /// host or several (docs/tensor-parallel.md). The rank, the number of processes and the GPU come
  /// from the launch variables: LATTE_TP_RANK / LATTE_TP_WORLD / LATTE_TP_LOCAL_RANK (or those of
  /// Open MPI or PMI) and LATTE_TP_ID_FILE, through which rank 0 hands the NCCL id to the others.
  /// `device` must be CUDA; the process runs on cuda:(local rank) whatever its index. Leave
  /// tensor_parallel at 1 to take the degree from the launch, or give the launch's process count.
  /// Each process reads and uploads only its own shard. Sessions are then SPMD: every process
  /// must make the same Session calls with the same tokens, and every process gets the same logits
  /// bit for bit. Model::load throws Error(invalid_argument) without launch variables, for another
  /// degree or a CPU device, Error(unsupported) without NCCL in the build, Error(device) when the
  /// local rank has no GPU or rank 0's id does not appear in LATTE_TP_ID_FILE in time.
  bool tensor_parallel_from_launch = false;
  /// Called with the fraction loaded (0..1); returning false cancels the load (Error(cancelled)).
  std::function<bool(float progress)> on_progress{};
};

namespace detail {
struct ModelState;
}

/// A loaded model: the memory-mapped GGUF file, its config and its weight map. Copies are cheap and
/// share one loaded model (shared ownership): a Session holds a copy, so the model stays alive as
/// long as any Session or Model copy uses it, whatever the order of destruction. Thread-safe for
/// concurrent reads (several sessions may run at once on one Model).
class Model {
 public:
  /// Maps `path`, reads its config and audits its tensors. Throws Error(io) when the file cannot be
  /// read, Error(invalid_file) listing every tensor problem at once, Error(unsupported) for an
  /// unknown architecture or a device this build lacks, Error(cancelled) from on_progress.
  static Model load(const std::string& path, ModelParams params = {});
  /// Same as load, for an already opened file (e.g. gguf::File::from_bytes in tests).
  static Model from_file(gguf::File file, ModelParams params = {});

  /// The model's hyper-parameters.
  [[nodiscard]] const ModelConfig& config() const noexcept;
  /// The underlying GGUF file (metadata, tokenizer keys, raw tensors).
  [[nodiscard]] const gguf::File& file() const noexcept;
  /// How the file's tensors were mapped (always ok() for a loaded model; lists skipped MTP tensors).
  [[nodiscard]] const WeightAudit& audit() const noexcept;
  /// Where the model runs.
  [[nodiscard]] Device device() const noexcept;
  /// A 64-bit hash of the file's metadata, tensor table and a sample of every tensor's bytes,
  /// computed once at load: the same for the same file, different for another model. Saved
  /// session states carry it so that they are never applied to the wrong model.
  [[nodiscard]] uint64_t fingerprint() const noexcept;
  /// The tokenizer built from the file's tokenizer.ggml.* keys. Throws Error(not_found) when the
  /// file has none, or the error that building it raised (e.g. Error(unsupported) for an unknown
  /// pre-tokenizer); the model itself loads either way.
  [[nodiscard]] const Tokenizer& tokenizer() const;

  /// Internal state shared with Session and the attention backends.
  [[nodiscard]] const detail::ModelState& state() const noexcept { return *state_; }

 private:
  explicit Model(std::shared_ptr<const detail::ModelState> state) : state_(std::move(state)) {}
  std::shared_ptr<const detail::ModelState> state_;
};

}  // namespace latte
