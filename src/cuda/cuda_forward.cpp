// The CUDA forward pass (see cuda_forward.hpp). Per block, on T rows (x = residual stream):
//   xn = RMSNorm(x);  proj = xn [query ; kv_a]^T                 one product over the stacked weights
//   c = RMSNorm(proj[L part]);  k_pe = proj[R part];  q = q_b(RMSNorm(q_a)) or the query part
//   RoPE(q_pe of every head, k_pe)                              interleaved, YaRN frequencies
//   [glm-dsa] indexer keys into the cache; top-k positions per row when a sequence exceeds top_k
//   attn = backend(q, c, k_pe)                                   [T, N V]
//   x += attn attn_output^T                                      residual fused into the product
//   xn = RMSNorm(x);  x += dense FFN | routed experts + shared experts
// then logits = RMSNorm(x) output^T for the requested rows, copied into pinned host memory.
//
// Activation taps (ForwardBatch::taps): the same names, shapes and order as the CPU pass. A wanted
// tap synchronises the stream and copies its device rows to the host as fp32; a step with an
// observer runs eagerly (never as a captured graph). Without an observer nothing changes.
#include "cuda/cuda_forward.hpp"

#include "core/environment.hpp"
#include "core/row_scatter.hpp"
#include "core/task_pool.hpp"
#include "cuda/activations.hpp"
#include "cuda/check.hpp"
#include "cuda/cuda_attention.hpp"
#include "cuda/decode_step.hpp"
#include "cuda/device_buffer.hpp"
#include "cuda/device_kv_storage.hpp"
#include "cuda/device_weights.hpp"
#include "cuda/dsa_indexer.hpp"
#include "cuda/embedding.hpp"
#include "cuda/gemm_quant.hpp"
#include "cuda/kv_cache_append.hpp"
#include "cuda/linear.hpp"
#include "cuda/logits_transfer.hpp"
#include "cuda/moe_dispatch.hpp"
#include "cuda/moe_experts.hpp"
#include "cuda/moe_router.hpp"
#include "cuda/norms.hpp"
#include "cuda/rope_yarn.hpp"
#include "cuda/x_int8.hpp"
#include "model/deepseek2.hpp"
#include "parallel/communicator.hpp"

#include <latte/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace latte::cuda {

namespace {

class CudaForward;

/// Decode steps (one token per sequence) as CUDA graphs, keyed by CudaForward::graph_key: the first
/// step of a key runs eagerly (it sizes every buffer), the second is captured, later ones replay.
/// Capture failures fall back to eager launches for that key. LATTE_CUDA_GRAPHS=0 turns graphs off.
class DecodeGraphs {
 public:
  DecodeGraphs();
  ~DecodeGraphs();
  DecodeGraphs(const DecodeGraphs&) = delete;
  DecodeGraphs& operator=(const DecodeGraphs&) = delete;
  /// Runs the step as a graph and returns true, or returns false: the caller enqueues it eagerly.
  bool run(CudaForward& pass, const detail::ForwardBatch& batch);

 private:
  struct Entry {
    int seen = 0;
    cudaGraphExec_t exec = nullptr;
    bool failed = false;
  };
  void clear() noexcept;
  bool enabled_ = true;
  std::map<std::vector<uint64_t>, Entry> entries_;
};

class CudaForward final : public CudaRankForward {
 public:
  /// `rank`: one rank of a tensor-parallel group (config and weights are its shard), or nullptr.
  CudaForward(const ModelConfig& config, std::shared_ptr<const DeviceWeights> weights, CudaAttentionBackend& backend,
              const CudaRankSetup* rank)
      : c_(config), weights_(std::move(weights)), backend_(backend), layout_(detail::attention_input_layout(config)) {
    if (!weights_) throw Error(ErrorCode::internal, "cuda forward: the model has no device weights");
    if (rank) {
      communicator_ = rank->communicator;
      if (!communicator_) throw Error(ErrorCode::internal, "cuda forward: a tensor-parallel rank needs a communicator");
      if (rank->split_output) {
        if (c_.n_vocab % communicator_->world_size() != 0) {
          throw Error(ErrorCode::internal, "cuda forward: the vocabulary does not split evenly over the ranks");
        }
        vocab_slice_ = c_.n_vocab / communicator_->world_size();
      }
      logits_everywhere_ = rank->logits_on_every_rank;
      if (rank->expert_count > 0 && rank->expert_count < c_.n_expert) {
        held_first_ = rank->expert_first;  // expert-parallel: this rank's experts only
        n_held_ = rank->expert_count;
      }
    }
    if (n_held_ == 0) n_held_ = c_.n_expert;
    backend_.bind(weights_);
    linear_.use_copies(weights_.get());
    side_linear_.use_copies(weights_.get());
    const RopeScaling& rs = c_.rope_scaling;
    rope_ = {.freq_base = c_.rope_freq_base};
    if (rs.type == RopeScalingType::linear) {
      rope_.freq_scale = 1.0f / rs.factor;
    } else if (rs.type == RopeScalingType::yarn && rs.factor != 1.0f) {
      rope_.freq_scale = 1.0f / rs.factor;
      rope_.ext_factor = 1.0f;
      rope_.corr = yarn_corr_dims(c_.qk_rope_head_dim, static_cast<int>(rs.original_context_length), c_.rope_freq_base,
                                  rs.yarn_beta_fast, rs.yarn_beta_slow);
    }
    if (c_.has_indexer() && (c_.indexer.n_head > kDsaIndexHeads || c_.indexer.head_dim != kDsaIndexHeadDim)) {
      throw Error(ErrorCode::unsupported,
                  "cuda forward: the DSA indexer kernels need at most " + std::to_string(kDsaIndexHeads) +
                      " heads of " + std::to_string(kDsaIndexHeadDim) + " dims (model: " +
                      std::to_string(c_.indexer.n_head) + " x " + std::to_string(c_.indexer.head_dim) + ")");
    }
    if (c_.n_expert > moe_max_experts || c_.n_expert_used > moe_max_k || c_.n_expert_group > moe_max_expert_groups) {
      throw Error(ErrorCode::unsupported, "cuda forward: the MoE router handles at most " +
                                              std::to_string(moe_max_experts) + " experts, " +
                                              std::to_string(moe_max_k) + " per token and " +
                                              std::to_string(moe_max_expert_groups) + " groups");
    }
    make_fused_step(rank);
  }

  ~CudaForward() override {
    if (fused_ && fused_->timing_on()) std::fputs(fused_->timing_table().c_str(), stderr);
  }

  void prepare(const detail::ForwardBatch& batch) override {
    use_device(weights_->ordinal);
    const int T = static_cast<int>(batch.tokens.size());
    if (T == 0) return;
    if (batch.forced != nullptr) {
      throw Error(ErrorCode::unsupported,
                  "forced decisions are a CPU forward pass feature; the CUDA pass takes its own");
    }
    stream_.synchronize();  // the previous step no longer reads the pinned staging buffers
    prepare_caches(batch);
    ensure_capacity(T, static_cast<int>(batch.logit_rows.size()));
    stage_tokens(batch);
    stage_step(batch);
    if (fused(batch)) {
      fused_->stage({.token = tokens_host_.data()[0],
                     .position = batch.sequences[0].cache->n_tokens(),
                     .cache = std::span<const std::byte* const>(rows_.data(), static_cast<size_t>(c_.n_layer_main()))});
    }
  }

  void execute(const detail::ForwardBatch& batch) override {
    use_device(weights_->ordinal);
    if (batch.tokens.empty()) return;
    // With taps the step runs eagerly: a tap synchronises and copies mid-step. A tensor-parallel rank
    // holds a share of the heads and FFN columns, so it emits none (the CPU ranks do the same).
    taps_ = communicator_ ? nullptr : batch.taps;
    chunked_logits_ = logits_in_chunks(batch);  // before a capture: the captured step leaves the copies out
    if (taps_ != nullptr || !graphs_.run(*this, batch)) enqueue(batch);
    if (chunked_logits_) copy_logits_chunks(static_cast<int>(batch.logit_rows.size()));
    if (taps_ != nullptr && fused(batch)) emit_fused_taps();
    if (fused_ && fused_->timing_on() && fused(batch)) fused_->collect_timing(stream());
    finish_logits(batch);
    for (const detail::BatchSequence& s : batch.sequences) s.cache->set_n_tokens(s.cache->n_tokens() + s.n_tokens);
  }

  [[nodiscard]] void* stream_handle() const noexcept override { return stream_.get(); }
  [[nodiscard]] bool writes_logit_rows() const noexcept override { return communicator_ == nullptr; }

  /// Everything a step runs on the stream, from the staged inputs to the logits in pinned memory.
  void enqueue(const detail::ForwardBatch& batch) {
    if (fused(batch)) {  // one kernel for the whole step (decode_step.hpp)
      fused_->enqueue(act_.logits.data(), stream(), taps_ ? fused_observed() : DecodeStep::Observed{});
      copy_logits_to_host(act_.logits.data(), 1, c_.n_vocab, c_.n_vocab, logits_host_, stream());
      return;
    }
    const int T = static_cast<int>(batch.tokens.size());
    keep_dense_copies(T);
    LATTE_CUDA_CHECK(cudaMemcpyAsync(tokens_.data(), tokens_host_.data(), static_cast<size_t>(T) * sizeof(int32_t),
                                     cudaMemcpyHostToDevice, stream()));
    tables_.upload(stream());
    embedding_lookup({.type = weights_->token_embd.type,
                      .table = weights_->token_embd.data,
                      .table_bytes = weights_->token_embd.bytes(),
                      .vocab = static_cast<int>(weights_->token_embd.rows),
                      .hidden = c_.n_embd,
                      .ids = tokens_.data(),
                      .n_tokens = T,
                      .out = act_.x.data(),
                      .out_stride = c_.n_embd},
                     stream());
    std::string tap;
    if (tapping(-1, "token_embd", tap)) emit_device(tap, -1, {T, c_.n_embd}, act_.x.data(), T, c_.n_embd, c_.n_embd);
    prenormed_ = false;
    for (int il = 0; il < c_.n_layer_main(); ++il) {
      attention_block(il, batch);
      feed_forward_block(il);
      if (tapping(il, "residual", tap)) emit_device(tap, il, {T, c_.n_embd}, act_.x.data(), T, c_.n_embd, c_.n_embd);
    }
    output_logits(batch);
  }

  /// What a captured decode graph depends on besides the staged inputs: the shape, every host-side
  /// branch, and every device address the launches bake in.
  [[nodiscard]] std::vector<uint64_t> graph_key(const detail::ForwardBatch& batch) const {
    std::vector<uint64_t> key{static_cast<uint64_t>(batch.tokens.size()),
                              static_cast<uint64_t>(step_.max_kv_len),
                              any_sparse(batch) ? 1u : 0u,
                              scratch_generation(),
                              reinterpret_cast<uintptr_t>(logits_host_.data()),
                              fused(batch) ? 1u : 0u};
    for (int r : batch.logit_rows) key.push_back(static_cast<uint64_t>(r));
    for (int il = 0; il < step_.n_layer; ++il) {
      key.push_back(reinterpret_cast<uintptr_t>(step_.attn_base[il]));
      if (step_.index_base) key.push_back(reinterpret_cast<uintptr_t>(step_.index_base[il]));
    }
    return key;
  }

 private:
  /// Device activations of one step, T rows; widths in floats. Named so that per-layer values can be
  /// copied out between launches.
  struct Activations {
    DeviceBuffer<float> x;                // [T, H] residual stream
    DeviceBuffer<float> xn;               // [T, H] normalised input of the current sub-block
    DeviceBuffer<uint8_t> xq;             // single-row steps: xn's (or out_rows') split-int8 record
    DeviceBuffer<uint8_t> hq;             // single-row steps: hidden's split-int8 record
    DeviceBuffer<float> proj;             // [T, layout.width] fused q_a|kv_a (or q|kv_a) output
    DeviceBuffer<float> qa;               // [T, Lq] normalised q_a (q_lora models)
    DeviceBuffer<float> q;                // [T, N(P+R)] per head [nope | rope]
    DeviceBuffer<float> latent;           // [T, L] normalised c
    DeviceBuffer<float> k_rope;           // [T, R]
    DeviceBuffer<float> attn;             // [T, N V] attention output before attn_output
    DeviceBuffer<float> hidden;           // [T, F] gated FFN activations
    DeviceBuffer<float> shared_out;       // [min(T, 64), H] the shared expert's output beside the routed ones
    DeviceBuffer<float> gate_up;          // [T, 2F] gate|up products (beyond 8 rows)
    DeviceBuffer<float> router;           // [T, E] router logits
    DeviceBuffer<int32_t> ids;            // [T, K] chosen experts
    DeviceBuffer<float> weights;          // [T, K] their weights
    DeviceBuffer<__nv_bfloat16> xn_bf16;  // [T, H] MoE prefill input
    DeviceBuffer<float> index_keys;       // [T, dI] indexer keys
    DeviceBuffer<float> index_q;          // [T, 32, dI] indexer queries (heads past nI stay zero)
    DeviceBuffer<__nv_bfloat16> index_q_bf16;
    DeviceBuffer<float> index_w;       // [T, 32] indexer head weights (zero past nI)
    DeviceBuffer<float> index_scores;  // [T, max_kv_len]
    DeviceBuffer<int32_t> selection;   // [T, top_k]
    DeviceBuffer<float> out_rows;      // [n_out, H] normalised rows whose logits are wanted
    DeviceBuffer<float> logits;        // [n_out, vocab]; split output head: [ranks, n_out, vocab / ranks]
    DeviceBuffer<float> logits_slice;  // split output head: [n_out, vocab / ranks] this rank's columns
  };

  friend class DecodeGraphs;
  cudaStream_t stream() const noexcept { return stream_.get(); }

  // ---- the fused decode step ----------------------------------------------------------------------

  /// The fused step for single-sequence decode with the mla backend when LATTE_FUSED_DECODE=1 (off by
  /// default until it is measured faster than the layered path: BENCHMARKS.md), unless the pass is a
  /// tensor-parallel rank or the model has something the fused kernel does not handle (then
  /// fused_reason_ says what, and every step takes the layered path).
  void make_fused_step(const CudaRankSetup* rank) {
    if (!latte::detail::env_flag("LATTE_FUSED_DECODE", false)) {
      fused_reason_ = "off (LATTE_FUSED_DECODE=1 turns it on)";
    } else if (rank) {
      fused_reason_ = "tensor-parallel ranks take the layered path";
    } else if (backend_.name() != "mla") {
      fused_reason_ = "the fused step is the mla backend's";
    } else {
      try {
        fused_ = std::make_unique<DecodeStep>(c_, weights_);
      } catch (const Error& e) {
        fused_reason_ = e.what();
      }
    }
  }

  /// Whether this step runs as the fused kernel: one token of one sequence, its logits wanted, and no
  /// observer of a tap the fused kernel does not produce.
  [[nodiscard]] bool fused(const detail::ForwardBatch& batch) const {
    return fused_ && batch.tokens.size() == 1 && batch.sequences.size() == 1 && batch.logit_rows.size() == 1 &&
           batch.logit_rows[0] == 0 && (batch.taps == nullptr || fused_serves(*batch.taps));
  }

  /// The fused step emits token_embd, each block's expert_ids, expert_weights and residual, and the
  /// logits; an observer of any other tap (the layered path's intermediate tensors) gets the layered path.
  [[nodiscard]] bool fused_serves(const detail::TapSink& taps) const {
    static constexpr std::string_view kLayeredOnly[] = {
        "attn_norm",  "q",        "kv_latent", "q_pe",          "k_pe",   "index_selection",
        "attn_heads", "attn_out", "ffn_norm",  "router_logits", "ffn_out"};
    if (taps.wants("output_norm")) return false;
    for (int il = 0; il < c_.n_layer_main(); ++il) {
      for (std::string_view t : kLayeredOnly) {
        if (taps.wants(detail::TapSink::block_name(il, t))) return false;
      }
    }
    return true;
  }

  /// Device buffers for the fused step's observed values, grown on first use.
  DecodeStep::Observed fused_observed() {
    const size_t per_layer = static_cast<size_t>(c_.n_layer_main());
    const size_t k = static_cast<size_t>(std::max(1, c_.n_expert_used));
    if (!fused_layer_out_.data()) {
      fused_layer_out_ = DeviceBuffer<float>(per_layer * c_.n_embd, "fused step taps");
      fused_embed_ = DeviceBuffer<float>(static_cast<size_t>(c_.n_embd), "fused step taps");
      fused_ids_ = DeviceBuffer<int32_t>(per_layer * k, "fused step taps");
      fused_weights_ = DeviceBuffer<float>(per_layer * k, "fused step taps");
    }
    return {.layer_out = fused_layer_out_.data(),
            .embed = fused_embed_.data(),
            .expert_ids = fused_ids_.data(),
            .expert_weights = fused_weights_.data()};
  }

  /// After an observed fused step: its taps, in the layered path's order.
  void emit_fused_taps() {
    const int H = c_.n_embd, K = c_.n_expert_used, n_layer = c_.n_layer_main();
    std::string tap;
    if (tapping(-1, "token_embd", tap)) {
      copy_to_host(tap_host_, fused_embed_.data(), 1, H, H);
      taps_->emit(tap, -1, {1, H}, tap_host_.data());
    }
    std::vector<float> out;
    copy_to_host(out, fused_layer_out_.data(), n_layer, H, H);
    for (int il = 0; il < n_layer; ++il) {
      if (c_.is_moe_layer(il) && K > 0) {
        std::string ids_name, weights_name;
        const bool want_ids = tapping(il, "expert_ids", ids_name);
        const bool want_weights = tapping(il, "expert_weights", weights_name);
        if (want_ids || want_weights) {
          copy_to_host(tap_ids_, fused_ids_.data() + static_cast<size_t>(il) * K, 1, K, K);
          copy_to_host(tap_host_, fused_weights_.data() + static_cast<size_t>(il) * K, 1, K, K);
          std::vector<std::pair<int32_t, float>> row(static_cast<size_t>(K));
          for (int j = 0; j < K; ++j) row[static_cast<size_t>(j)] = {tap_ids_[j], tap_host_[j]};
          std::sort(row.begin(), row.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
          std::vector<float> ids(static_cast<size_t>(K)), weights(static_cast<size_t>(K));
          for (int j = 0; j < K; ++j) {
            ids[static_cast<size_t>(j)] = static_cast<float>(row[static_cast<size_t>(j)].first);
            weights[static_cast<size_t>(j)] = row[static_cast<size_t>(j)].second;
          }
          if (want_ids) taps_->emit(ids_name, il, {1, K}, ids.data());
          if (want_weights) taps_->emit(weights_name, il, {1, K}, weights.data());
        }
      }
      if (tapping(il, "residual", tap)) taps_->emit(tap, il, {1, H}, out.data() + static_cast<size_t>(il) * H);
    }
  }

  // ---- tensor parallelism -----------------------------------------------------------------------
  // At the two reduction points of a block every rank adds its share (its heads' attn_output
  // columns, its FFN columns or experts) into x; rank 0 on top of the residual stream, the others on
  // zeros, so that the in-place fp32 all-reduce of x leaves x + sum of the shares on every rank.

  /// Before a block's share is added into x: the ranks other than 0 start from zeros.
  void begin_share() {
    if (communicator_ && communicator_->rank() > 0) {
      LATTE_CUDA_CHECK(
          cudaMemsetAsync(act_.x.data(), 0, static_cast<size_t>(step_.n_rows) * c_.n_embd * sizeof(float), stream()));
    }
  }
  /// After it: x = sum over ranks (NCCL on the step's stream, captured with it in a decode graph).
  void reduce_shares() {
    if (communicator_) {
      communicator_->all_reduce_sum(act_.x.data(), static_cast<size_t>(step_.n_rows) * c_.n_embd,
                                    detail::CollectiveType::f32);
    }
  }

  void prepare_caches(const detail::ForwardBatch& batch) {
    const KvLayout layout = backend_.kv_layout();
    const size_t index_row = c_.has_indexer() ? static_cast<size_t>(c_.indexer.head_dim) * 2 : 0;
    bool synced = false;
    for (const detail::BatchSequence& s : batch.sequences) {
      detail::KvCache& cache = *s.cache;
      if (cache.layout().values_per_token != layout.values_per_token ||
          cache.layout().element_type != layout.element_type) {
        throw Error(ErrorCode::invalid_argument,
                    "cuda forward: a sequence's cache was made for another backend than '" +
                        std::string(backend_.name()) + "'");
      }
      if (!cache.row_storage()) {
        cache.attach_row_storage(
            std::make_unique<DeviceKvStorage>(c_.n_layer_main(), layout.bytes_per_token(), index_row));
      }
      if (cache.capacity() < cache.n_tokens() + s.n_tokens) {
        if (!synced) stream_.synchronize();  // growing copies rows the stream may still be writing
        synced = true;
        cache.reserve(cache.n_tokens() + s.n_tokens);
      }
    }
  }

  void ensure_capacity(int T, int n_out) {
    if (static_cast<size_t>(n_out) * c_.n_vocab > logits_host_.size()) {
      logits_host_ = PinnedBuffer<float>(static_cast<size_t>(std::max(n_out, 1)) * c_.n_vocab);
      act_.logits = DeviceBuffer<float>(static_cast<size_t>(std::max(n_out, 1)) * c_.n_vocab, "logits");
      if (vocab_slice_ > 0) {
        act_.logits_slice = DeviceBuffer<float>(static_cast<size_t>(std::max(n_out, 1)) * vocab_slice_, "logits slice");
      }
      bump_scratch_generation();
    }
    if (T <= capacity_) return;
    bump_scratch_generation();
    tokens_host_ = PinnedBuffer<int32_t>(static_cast<size_t>(T));
    tokens_ = DeviceBuffer<int32_t>(static_cast<size_t>(T), "token ids");
    const size_t t = static_cast<size_t>(T);
    const int H = c_.n_embd, N = c_.n_head, qk = c_.qk_head_dim();
    const int F = std::max({c_.n_ff, c_.n_ff_expert * std::max(1, c_.n_expert_shared), 1});
    Activations& a = act_;
    a.x = DeviceBuffer<float>(t * H, "residual stream");
    a.xn = DeviceBuffer<float>(t * H, "normalised activations");
    // split-int8 records of up to record_rows() rows (the GEMVs' inputs), or of a MoE decode chunk's rows
    const size_t record_rows = static_cast<size_t>(std::min(T, std::max(gemv_max_dense_rows, moe_gemv_max_tokens)));
    a.xq = DeviceBuffer<uint8_t>(
        record_rows * static_cast<size_t>(x_int8_record_bytes(std::max(H, N * c_.v_head_dim) / 32 * 32)) + 16,
        "int8 activations");
    a.proj = DeviceBuffer<float>(t * layout_.width, "attention input projection");
    a.qa = DeviceBuffer<float>(t * std::max(1, c_.q_lora_rank), "query latent");
    a.q = DeviceBuffer<float>(t * N * qk, "queries");
    a.latent = DeviceBuffer<float>(t * c_.kv_lora_rank, "latent");
    a.k_rope = DeviceBuffer<float>(t * c_.qk_rope_head_dim, "k_pe");
    a.attn = DeviceBuffer<float>(t * N * c_.v_head_dim, "attention output");
    a.hidden = DeviceBuffer<float>(t * F, "FFN activations");
    a.hq = DeviceBuffer<uint8_t>(record_rows * static_cast<size_t>(x_int8_record_bytes(F / 32 * 32)) + 16,
                                 "int8 FFN activations");
    a.gate_up = DeviceBuffer<float>(t * 2 * F, "FFN gate|up");
    if (c_.n_expert > 0) {
      a.router = DeviceBuffer<float>(t * c_.n_expert, "router logits");
      a.shared_out = DeviceBuffer<float>(std::min<size_t>(t, kConcurrentSharedRows) * H, "shared expert output");
      a.ids = DeviceBuffer<int32_t>(t * c_.n_expert_used, "expert ids");
      a.weights = DeviceBuffer<float>(t * c_.n_expert_used, "expert weights");
      a.xn_bf16 = DeviceBuffer<__nv_bfloat16>(t * H, "bf16 activations");
      if (c_.n_dense_lead < c_.n_layer_main()) {
        moe_ = std::make_unique<MoeWorkspace>(MoeWorkspaceShape{
            .max_tokens = T, .k = c_.n_expert_used, .n_experts = n_held_, .hidden = H, .ffn = c_.n_ff_expert});
      }
    }
    if (c_.has_indexer()) {
      const int dI = c_.indexer.head_dim;
      a.index_keys = DeviceBuffer<float>(t * dI, "indexer keys");
      a.index_q = DeviceBuffer<float>(t * kDsaIndexHeads * dI, "indexer queries");
      a.index_q_bf16 = DeviceBuffer<__nv_bfloat16>(t * kDsaIndexHeads * dI, "indexer queries bf16");
      a.index_w = DeviceBuffer<float>(t * kDsaIndexHeads, "indexer head weights");
      a.selection = DeviceBuffer<int32_t>(t * c_.indexer.top_k, "selected positions");
      // Heads past nI are never written: zero once, so they add nothing to the index scores.
      LATTE_CUDA_CHECK(cudaMemsetAsync(a.index_q.data(), 0, a.index_q.bytes(), stream()));
      LATTE_CUDA_CHECK(cudaMemsetAsync(a.index_w.data(), 0, a.index_w.bytes(), stream()));
    }
    a.out_rows = DeviceBuffer<float>(t * H, "output rows");
    capacity_ = T;
  }

  void stage_tokens(const detail::ForwardBatch& batch) {
    const size_t T = batch.tokens.size();
    for (size_t i = 0; i < T; ++i) tokens_host_.data()[i] = static_cast<int32_t>(batch.tokens[i]);
    validate_token_ids(std::span<const int32_t>(tokens_host_.data(), T), weights_->token_embd.rows);
  }

  [[nodiscard]] bool any_sparse(const detail::ForwardBatch& batch) const {
    if (!c_.has_indexer()) return false;
    for (const detail::BatchSequence& s : batch.sequences) {
      if (s.cache->n_tokens() + s.n_tokens > c_.indexer.top_k) return true;
    }
    return false;
  }

  void stage_step(const detail::ForwardBatch& batch) {
    const int n_layer = c_.n_layer_main();
    rows_.assign(batch.sequences.size() * static_cast<size_t>(n_layer), nullptr);
    index_rows_.assign(batch.sequences.size() * static_cast<size_t>(n_layer), nullptr);
    std::vector<DeviceStepTables::Sequence> seqs;
    attention_sequences_.clear();
    for (size_t i = 0; i < batch.sequences.size(); ++i) {
      const detail::BatchSequence& s = batch.sequences[i];
      detail::KvRowStorage* storage = s.cache->row_storage();
      for (int il = 0; il < n_layer; ++il) {
        rows_[i * n_layer + il] = storage->attention_rows(il);
        if (c_.has_indexer()) index_rows_[i * n_layer + il] = storage->indexer_keys(il);
      }
      seqs.push_back({.first_row = s.first_row,
                      .n_tokens = s.n_tokens,
                      .n_past = s.cache->n_tokens(),
                      .attn_rows = rows_.data() + i * n_layer,
                      .index_rows = c_.has_indexer() ? index_rows_.data() + i * n_layer : nullptr});
      attention_sequences_.push_back(
          {.cache = nullptr, .n_past = s.cache->n_tokens(), .first_row = s.first_row, .n_tokens = s.n_tokens});
    }
    step_ = tables_.stage(seqs, static_cast<int>(batch.tokens.size()), n_layer);
  }

  /// (x_bf16: x's rows also as bf16, x_stride apart: LinearCall::x_bf16)
  void linear(const DeviceMatrix& w, const float* x, int64_t x_stride, int rows, float* y, int64_t y_stride,
              const float* residual = nullptr, const uint8_t* x_q = nullptr, const __nv_bfloat16* w_bf16 = nullptr,
              const __nv_bfloat16* x_bf16 = nullptr) {
    linear_(w,
            {.x = x,
             .x_stride = x_stride,
             .rows = rows,
             .y = y,
             .y_stride = y_stride,
             .residual = residual,
             .x_q = x_q,
             .x_q_stride = x_int8_record_bytes(x_stride),
             .w_bf16 = w_bf16,
             .x_bf16 = x_bf16,
             .x_bf16_stride = x_stride},
            stream());
  }

  /// out = rms_norm(x) * weight (+ out_q, its records); with `router`, also router_out = out router^T.
  void rms(const float* x, int64_t x_stride, const float* weight, int n, int rows, float* out, int64_t out_stride,
           uint8_t* out_q = nullptr, const DeviceMatrix* router = nullptr, float* router_out = nullptr,
           __nv_bfloat16* out_bf16 = nullptr) {
    rms_norm({.x = x,
              .x_stride = x_stride,
              .weight = weight,
              .n = n,
              .rows = rows,
              .eps = c_.rms_norm_eps,
              .out = out,
              .out_stride = out_stride,
              .out_q = out_q,
              .out_q_stride = x_int8_record_bytes(n),
              .out_bf16 = out_bf16,
              .out_bf16_stride = out_bf16 ? out_stride : 0,
              .router = router ? reinterpret_cast<const float*>(router->data) : nullptr,
              .router_rows = router ? static_cast<int>(router->rows) : 0,
              .router_out = router_out,
              .router_out_stride = router ? router->rows : 0},
             stream());
  }

  /// Whether a step whose attention projection multiplies a bf16 copy has the attention norm write its rows as bf16
  /// (by default, with the heads kernel and routing in the sort +2.2% at 8 rows on an H100, BENCHMARKS.md;
  /// LATTE_NORM_BF16=0: fp32 rows that the projection converts).
  static bool norm_writes_bf16() {
    static const bool on = latte::detail::env_flag("LATTE_NORM_BF16", true);
    return on;
  }

  /// Whether the FFN norm of a MoE layer's step of T rows also computes the router logits (rms_norm's
  /// router product: a launch fewer on a decode step's serial path) instead of a router GEMV after it: steps of
  /// LATTE_NORM_ROUTER rows up to kNormRouterRows (default 2: at 8 rows +3-4% on an H100 and an H200; at one row
  /// 4% slower on an H200 and even on an H100, BENCHMARKS.md; 1: from one row; 0: never), an fp32 router.
  bool norm_computes_router(const DeviceLayer& w, int T) const {
    static const int min_rows = [] {
      const int n = latte::detail::env_int("LATTE_NORM_ROUTER", 2);
      return n == 0 ? kNormRouterRows + 1 : n;
    }();
    return T >= min_rows && T <= kNormRouterRows && w.router && w.router.type == GgmlType::f32 &&
           w.router.k == c_.n_embd && w.router.row_bytes == c_.n_embd * 4 && c_.n_embd % 4 == 0 && c_.n_embd <= 12288 &&
           reinterpret_cast<uintptr_t>(w.router.data) % 16 == 0;
  }
  static constexpr int kNormRouterRows = 8;
  bool prenormed_ = false;  ///< the next attention block's input norm is done (next_attention_norm)
  bool xn_bf16_fresh_ = false;  ///< within an FFN block: xn_bf16 holds xn's rows (ffn_norm_writes_bf16)

  /// Where a normalisation of `rows` rows of the hidden width also writes its split-int8 records (the
  /// GEMVs of the projections and the MoE decode path read them): up to record_rows() rows, else nowhere.
  uint8_t* hidden_record(int rows) {
    return rows >= 1 && rows <= record_rows() && c_.n_embd % 32 == 0 ? act_.xq.data() : nullptr;
  }
  /// (the dense projections read records up to gemv_dense_rows() rows, on the tensor-core GEMV; beyond, the
  /// bf16 GEMMs take fp32 rows)
  static int record_rows() { return gemv_dense_rows(); }

  /// Most tokens whose routed experts run as GEMVs over expert groups (moe_experts_decode) rather than
  /// the grouped GEMM: LATTE_MOE_GEMV_TOKENS (8-128, default 128). With the tensor-core GEMV for groups of
  /// 3-8 tokens (gemv_mma_kernel.cuh) a 64-token step's experts take ~0.4 of the grouped GEMM's time; a
  /// 128-row step in one pass rather than two of 64 (each reading every expert it routes to) was 8% faster
  /// at 128 sequences (BENCHMARKS.md).
  static int moe_gemv_tokens() {
    static_assert(gemv_max_tokens == 8 && moe_gemv_max_tokens == 128,
                  "LATTE_MOE_GEMV_TOKENS's range in core/environment.cpp");
    static const int n = latte::detail::env_int("LATTE_MOE_GEMV_TOKENS", moe_gemv_max_tokens);
    return n;
  }

  /// Most rows of a step whose routed experts run as GEMVs, in chunks of moe_gemv_tokens rows (each chunk
  /// reads the experts it routes to again) rather than the grouped GEMM: LATTE_MOE_GEMV_ROWS (default 128;
  /// below moe_gemv_tokens() it is moe_gemv_tokens()).
  static int moe_gemv_rows() {
    static const int n = std::max(latte::detail::env_int("LATTE_MOE_GEMV_ROWS", 128), moe_gemv_tokens());
    return n;
  }

  /// The rotation of n_heads heads of `data` in place over T tokens (the caller adds an out-of-place source,
  /// a second target, ... to the returned parameters, then runs rope_yarn).
  RopeYarnParams rope_params(float* data, int64_t token_stride, int n_heads, int64_t head_stride, int rot_offset,
                             int T) const {
    RopeYarnParams p = rope_;
    p.data = data;
    p.token_stride = token_stride;
    p.n_heads = n_heads;
    p.head_stride = head_stride;
    p.rot_offset = rot_offset;
    p.n_rot = c_.qk_rope_head_dim;
    p.positions = step_.positions;
    p.n_tokens = T;
    return p;
  }

  // ---- activation taps ------------------------------------------------------------------------

  /// Whether tap `tap` of block `il` (-1: not a block tap) is observed; its full name into `name`.
  bool tapping(int il, std::string_view tap, std::string& name) const {
    if (taps_ == nullptr) return false;
    name = il < 0 ? std::string(tap) : detail::TapSink::block_name(il, tap);
    return taps_->wants(name);
  }

  /// Waits for the stream and copies `rows` rows of `width` values found every `stride` values from
  /// `src` (device memory) into `dst` (contiguous, resized).
  template <class T>
  void copy_to_host(std::vector<T>& dst, const T* src, int64_t rows, int64_t width, int64_t stride) {
    dst.resize(static_cast<size_t>(rows * width));
    if (dst.empty()) return;
    LATTE_CUDA_CHECK(cudaMemcpy2DAsync(dst.data(), static_cast<size_t>(width) * sizeof(T), src,
                                       static_cast<size_t>(stride) * sizeof(T), static_cast<size_t>(width) * sizeof(T),
                                       static_cast<size_t>(rows), cudaMemcpyDeviceToHost, stream()));
    stream_.synchronize();
  }

  /// Emits a device tensor of `shape` stored as `rows` rows of `width` floats every `stride` floats.
  void emit_device(const std::string& name, int il, std::initializer_list<int64_t> shape, const float* src,
                   int64_t rows, int64_t width, int64_t stride) {
    copy_to_host(tap_host_, src, rows, width, stride);
    taps_->emit(name, il, shape, tap_host_.data());
  }

  /// attn_out / ffn_out: the residual stream before the update, kept until emit_update.
  void keep_residual() {
    const int T = step_.n_rows;
    copy_to_host(tap_before_, act_.x.data(), T, c_.n_embd, c_.n_embd);
  }

  /// Emits x_after - x_before in fp32 (as the CPU pass does).
  void emit_update(const std::string& name, int il) {
    const int T = step_.n_rows, H = c_.n_embd;
    copy_to_host(tap_host_, act_.x.data(), T, H, H);
    for (size_t i = 0; i < tap_host_.size(); ++i) tap_host_[i] -= tap_before_[i];
    taps_->emit(name, il, {T, H}, tap_host_.data());
  }

  /// expert_ids / expert_weights: per row ascending expert id, the weights in that order.
  void emit_experts(int il) {
    std::string ids_name, weights_name;
    const bool want_ids = tapping(il, "expert_ids", ids_name);
    const bool want_weights = tapping(il, "expert_weights", weights_name);
    if (!want_ids && !want_weights) return;
    const int T = step_.n_rows, K = c_.n_expert_used;
    copy_to_host(tap_ids_, act_.ids.data(), T, K, K);
    copy_to_host(tap_host_, act_.weights.data(), T, K, K);
    std::vector<std::pair<int32_t, float>> row(static_cast<size_t>(K));
    std::vector<float> ids(static_cast<size_t>(T) * K);
    for (int t = 0; t < T; ++t) {
      const size_t base = static_cast<size_t>(t) * K;
      for (int k = 0; k < K; ++k) row[static_cast<size_t>(k)] = {tap_ids_[base + k], tap_host_[base + k]};
      std::sort(row.begin(), row.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      for (int k = 0; k < K; ++k) {
        ids[base + k] = static_cast<float>(row[static_cast<size_t>(k)].first);
        tap_host_[base + k] = row[static_cast<size_t>(k)].second;
      }
    }
    if (want_ids) taps_->emit(ids_name, il, {T, K}, ids.data());
    if (want_weights) taps_->emit(weights_name, il, {T, K}, tap_host_.data());
  }

  void attention_block(int il, const detail::ForwardBatch& batch) {
    const DeviceLayer& w = weights_->layers[static_cast<size_t>(il)];
    const int T = static_cast<int>(batch.tokens.size()), H = c_.n_embd, N = c_.n_head, L = c_.kv_lora_rank;
    const int R = c_.qk_rope_head_dim, P = c_.qk_nope_head_dim, qk = P + R, width = layout_.width;
    Activations& a = act_;

    uint8_t* xq = hidden_record(T);
    std::string tap;
    const bool tap_norm = tapping(il, "attn_norm", tap);
    // the combine that finished the residual rows normalised them already (next_attention_norm)
    const bool prenormed = std::exchange(prenormed_, false);
    if (!prenormed && T == 1 && w.attn_input && !tap_norm && !c_.has_indexer() && linear_normalises(w.attn_input)) {
      // one token: the projection's GEMV normalises the residual row itself (one launch less; the
      // glm-dsa indexer reads the normalised row too)
      linear_(w.attn_input,
              {.x = a.x.data(),
               .x_stride = H,
               .rows = 1,
               .y = a.proj.data(),
               .y_stride = width,
               .x_norm_weight = w.attn_norm,
               .x_norm_eps = c_.rms_norm_eps},
              stream());
    } else if (norm_writes_bf16() && !prenormed && !tap_norm && w.attn_input && !c_.has_indexer() && H % 8 == 0 &&
               linear_.copy_of(w.attn_input, T) != nullptr && a.xn_bf16.size() >= static_cast<size_t>(T) * H) {
      // the projection multiplies a bf16 copy: the norm writes its rows as bf16 for cuBLAS (the values a conversion
      // of the fp32 rows would give), one launch fewer; nothing in this block reads the fp32 rows
      rms_norm({.x = a.x.data(),
                .x_stride = H,
                .weight = w.attn_norm,
                .n = H,
                .rows = T,
                .eps = c_.rms_norm_eps,
                .out = a.xn_bf16.data(),
                .out_stride = H,
                .out_type = ActOut::bf16},
               stream());
      linear(w.attn_input, a.xn.data(), H, T, a.proj.data(), width, nullptr, nullptr, nullptr, a.xn_bf16.data());
    } else {
      if (!prenormed) rms(a.x.data(), H, w.attn_norm, H, T, a.xn.data(), H, xq);
      if (tap_norm) emit_device(tap, il, {T, H}, a.xn.data(), T, H, H);
      if (w.attn_input) {
        linear(w.attn_input, a.xn.data(), H, T, a.proj.data(), width, nullptr, xq);
      } else {
        linear(w.attn_query, a.xn.data(), H, T, a.proj.data() + layout_.query_offset, width, nullptr, xq);
        linear(w.attn_kv_a, a.xn.data(), H, T, a.proj.data() + layout_.latent_offset, width, nullptr, xq);
      }
    }
    // q before rotation comes from q_b (q_lora_rank > 0) or straight from the projection row (q_src),
    // which the rope launch copies into a.q while rotating it, k_pe into k_rope too: one launch
    const int64_t q_row = static_cast<int64_t>(N) * qk;
    const float* q_src = nullptr;
    if (c_.q_lora_rank > 0) {
      rms(a.proj.data() + layout_.query_offset, width, w.q_a_norm, c_.q_lora_rank, T, a.qa.data(), c_.q_lora_rank);
      linear(w.attn_q_b, a.qa.data(), c_.q_lora_rank, T, a.q.data(), q_row);
    } else {
      q_src = a.proj.data() + layout_.query_offset;
    }
    if (tapping(il, "q", tap)) {
      emit_device(tap, il, {T, N, qk}, q_src ? q_src : a.q.data(), T, q_row, q_src ? width : q_row);
    }
    // one launch: q rotated (copied out of the projection row when q_src is set), k_pe rotated into
    // k_rope, the latent normalised (kv_a_norm), and what the attention backend wants made of q
    RopeYarnParams rp = rope_params(a.q.data(), q_row, N, qk, P, T);
    rp.src = q_src;
    rp.src_token_stride = width;
    rp.pair_src = a.proj.data() + layout_.latent_offset + L;
    rp.pair_src_stride = width;
    rp.pair_dst = a.k_rope.data();
    rp.pair_dst_stride = R;
    rp.norm_src = a.proj.data() + layout_.latent_offset;
    rp.norm_src_stride = width;
    rp.norm_weight = w.kv_a_norm;
    rp.norm_dst = a.latent.data();
    rp.norm_dst_stride = L;
    rp.norm_n = L;
    rp.norm_eps = c_.rms_norm_eps;
    // the backend may start what needs only the un-rotated q beside the rope launch (mla: W_UK)
    backend_.start_query(il, T, q_src ? q_src : a.q.data(), q_src ? width : q_row, stream());
    const CudaAttentionBackend::QueryTargets targets = backend_.query_targets(il, T, step_);
    rp.nope_q = targets.nope_records;  // rope_yarn checks P against the records' units of 32
    rp.nope_q_stride = targets.records_stride;
    rp.rot_bf16 = targets.rope_bf16;
    rp.nope_bf16 = targets.nope_bf16;
    rp.cache = targets.cache;
    rp.cache_batch = targets.cache_batch;
    rp.cache_norm_offset = 0;
    rp.cache_pair_offset = L;
    rope_yarn(rp, stream());
    if (tapping(il, "kv_latent", tap)) emit_device(tap, il, {T, L}, a.latent.data(), T, L, L);
    if (tapping(il, "q_pe", tap)) emit_device(tap, il, {T, N, R}, a.q.data() + P, static_cast<int64_t>(T) * N, R, qk);
    if (tapping(il, "k_pe", tap)) emit_device(tap, il, {T, R}, a.k_rope.data(), T, R, R);

    const int selection_width = c_.has_indexer() ? select_positions(il, batch) : 0;
    if (selection_width > 0 && tapping(il, "index_selection", tap)) {
      copy_to_host(tap_ids_, a.selection.data(), T, selection_width, selection_width);
      const std::vector<float> selected(tap_ids_.begin(), tap_ids_.end());
      taps_->emit(tap, il, {T, selection_width}, selected.data());
    }
    for (size_t i = 0; i < attention_sequences_.size(); ++i) {
      attention_sequences_[i].cache = const_cast<std::byte*>(rows_[i * static_cast<size_t>(c_.n_layer_main()) + il]);
    }

    // the attention output also as bf16 from the launch that makes it, where the output projection multiplies a bf16
    // copy (no conversion launch before its cuBLAS product)
    const int64_t nv = static_cast<int64_t>(N) * c_.v_head_dim;
    __nv_bfloat16* attn_bf16 = nullptr;
    if (nv % 8 == 0 && linear_.copy_of(w.attn_output, T) != nullptr && backend_.writes_output_bf16(il, T)) {
      attn_bf16 = grow_scratch(attn_bf16_, static_cast<size_t>(T) * static_cast<size_t>(nv), "attention output bf16");
      // the output projection reads only the bf16 rows (over its copy, no records); the heads tap the fp32 ones
      std::string heads_tap;
      backend_.set_output_bf16(attn_bf16, tapping(il, "attn_heads", heads_tap));
    }
    backend_.forward_device({.layer = il,
                             .n_rows = T,
                             .q = a.q.data(),
                             .latent = a.latent.data(),
                             .k_rope = a.k_rope.data(),
                             .sequences = attention_sequences_,
                             .selection = selection_width > 0 ? a.selection.data() : nullptr,
                             .selection_width = selection_width,
                             .scale = c_.attention_scale(),
                             .out = a.attn.data(),
                             .stream = stream()},
                            step_);
    if (tapping(il, "attn_heads", tap)) emit_device(tap, il, {T, N, c_.v_head_dim}, a.attn.data(), T, nv, nv);
    const bool tap_out = tapping(il, "attn_out", tap);
    if (tap_out) keep_residual();
    begin_share();
    // 2-8 tokens, or up to Linear::kPassRows as GEMV passes: the heads' outputs as records for the
    // split-int8 GEMV (one token: the GEMV quantizes them itself, Linear)
    uint8_t* attn_q = nullptr;
    if (T >= 2 && nv % 32 == 0 && a.xq.size() >= static_cast<size_t>(T * x_int8_record_bytes(nv)) &&
        Linear::reads_records(w.attn_output, T) && linear_.copy_of(w.attn_output, T) == nullptr) {
      attn_q = a.xq.data();
      quantize_x_int8({.x = a.attn.data(),
                       .x_stride = nv,
                       .rows = T,
                       .k = static_cast<int>(nv),
                       .out = attn_q,
                       .out_stride = x_int8_record_bytes(nv)},
                      stream());
    }
    linear(w.attn_output, a.attn.data(), nv, T, a.x.data(), H, a.x.data(), attn_q, nullptr, attn_bf16);
    reduce_shares();
    if (tap_out) emit_update(tap, il);
  }

  /// glm-dsa: appends the indexer keys; returns top_k with a.selection filled, or 0 for dense attention.
  int select_positions(int il, const detail::ForwardBatch& batch) {
    const DeviceLayer& w = weights_->layers[static_cast<size_t>(il)];
    const int T = static_cast<int>(batch.tokens.size()), H = c_.n_embd, dI = c_.indexer.head_dim;
    const int nI = c_.indexer.n_head, top_k = c_.indexer.top_k;
    Activations& a = act_;

    linear(w.indexer_k, a.xn.data(), H, T, a.index_keys.data(), dI);
    layer_norm({.x = a.index_keys.data(),
                .x_stride = dI,
                .weight = w.indexer_k_norm,
                .bias = w.indexer_k_norm_b,
                .n = dI,
                .rows = T,
                .eps = c_.indexer.norm_eps,
                .out = a.index_keys.data(),
                .out_stride = dI},
               stream());
    rope_yarn(rope_params(a.index_keys.data(), dI, 1, dI, 0, T), stream());
    const size_t table = static_cast<size_t>(il) * static_cast<size_t>(T);
    PagedRows<__nv_bfloat16> keys{
        .data = reinterpret_cast<__nv_bfloat16*>(const_cast<std::byte*>(step_.index_base[il])),
        .page_table = step_.index_pages + table,
        .page_stride = kDeviceRowUnit / 2,
        .token_stride = dI,
        .page_size = kRowPageSize,
        .page_table_stride = 1};
    run_kv_cache_append({.src = a.index_keys.data(),
                         .src_token_stride = dI,
                         .n_tokens = T,
                         .dim = dI,
                         .dst = keys,
                         .batch_index = step_.rows,
                         .positions = step_.positions},
                        stream());
    if (!any_sparse(batch)) return 0;

    const int64_t q_stride = static_cast<int64_t>(kDsaIndexHeads) * dI;
    linear(w.indexer_q_b, a.qa.data(), c_.q_lora_rank, T, a.index_q.data(), q_stride);
    rope_yarn(rope_params(a.index_q.data(), q_stride, nI, dI, 0, T), stream());
    convert_to_bf16(a.index_q.data(), q_stride, a.index_q_bf16.data(), q_stride, T, static_cast<int>(q_stride),
                    stream());
    linear(w.indexer_proj, a.xn.data(), H, T, a.index_w.data(), kDsaIndexHeads);
    const int64_t scores_stride = (step_.max_kv_len + 7) / 8 * 8;
    float* scores = grow_scratch(a.index_scores, static_cast<size_t>(T) * scores_stride, "indexer scores");

    keys.page_stride = kDeviceRowUnit / 2;
    run_dsa_index_scores({.q = a.index_q_bf16.data(),
                          .q_token_stride = q_stride,
                          .q_head_stride = dI,
                          .weights = a.index_w.data(),
                          .weights_token_stride = kDsaIndexHeads,
                          .k_cache = {.data = keys.data,
                                      .page_table = keys.page_table,
                                      .page_stride = keys.page_stride,
                                      .token_stride = keys.token_stride,
                                      .page_size = keys.page_size,
                                      .page_table_stride = 1},
                          .kv_lens = step_.kv_lens,
                          .batch = T,
                          .q_len = 1,
                          .max_kv_len = step_.max_kv_len,
                          // sum_h w_h ReLU(s q.k) = sum_h (s w_h) ReLU(q.k): both scales of the reference
                          .scale = 1.0f / std::sqrt(static_cast<float>(nI)) / std::sqrt(static_cast<float>(dI)),
                          .scores = scores,
                          .scores_stride = scores_stride},
                         stream());
    run_dsa_top_k({.scores = scores,
                   .scores_stride = scores_stride,
                   .kv_lens = step_.kv_lens,
                   .batch = T,
                   .q_len = 1,
                   .top_k = top_k,
                   .indices = a.selection.data(),
                   .index_stride = top_k},
                  stream());
    return top_k;
  }

  void feed_forward_block(int il) {
    const DeviceLayer& w = weights_->layers[static_cast<size_t>(il)];
    const int T = step_.n_rows, H = c_.n_embd;
    Activations& a = act_;
    const bool router_done = c_.is_moe_layer(il) && norm_computes_router(w, T);
    xn_bf16_fresh_ = ffn_norm_writes_bf16(il, w, T);
    rms(a.x.data(), H, w.ffn_norm, H, T, a.xn.data(), H, hidden_record(T), router_done ? &w.router : nullptr,
        a.router.data(), xn_bf16_fresh_ ? a.xn_bf16.data() : nullptr);
    std::string tap;
    if (tapping(il, "ffn_norm", tap)) emit_device(tap, il, {T, H}, a.xn.data(), T, H, H);
    const bool tap_out = tapping(il, "ffn_out", tap);
    if (tap_out) keep_residual();
    begin_share();
    if (!c_.is_moe_layer(il)) {
      gated_ffn(w.dense, T);
    } else if (w.shared && concurrent_shared(T)) {
      // decode: the shared expert on the side stream while the router and the routed experts run here,
      // its output added in their combine (the GPU is mostly idle during the router's small launches)
      fork_.record(stream());
      LATTE_CUDA_CHECK(cudaStreamWaitEvent(side_.get(), fork_.get(), 0));
      gated_ffn(w.shared, T, side_.get(), a.shared_out.data(), nullptr);
      join_.record(side_.get());
      routed_experts(il, w, T, router_done, next_attention_norm(il, T), a.shared_out.data(), join_.get());
    } else if (!w.shared) {
      routed_experts(il, w, T, router_done, next_attention_norm(il, T));
    } else {
      routed_experts(il, w, T, router_done, {});
      if (w.shared) gated_ffn(w.shared, T);
    }
    reduce_shares();
    xn_bf16_fresh_ = false;
    if (tap_out) emit_update(tap, il);
  }

  /// Whether layer il's FFN norm of a T-row step also writes its rows as bf16 (RmsNormParams::out_bf16) for the
  /// FFN's cuBLAS products, which would otherwise convert them in launches of their own: the dense FFN's or the
  /// shared expert's gate and up over bf16 copies, or the routed experts' grouped GEMM (Linear::direct_bf16, which
  /// also has silu write bf16 rows for a down over a copy, gated_ffn).
  bool ffn_norm_writes_bf16(int il, const DeviceLayer& w, int T) const {
    if (!Linear::direct_bf16() || c_.n_embd % 8 != 0 || act_.xn_bf16.size() < static_cast<size_t>(T) * c_.n_embd) {
      return false;
    }
    if (!c_.is_moe_layer(il)) return w.dense && linear_.gated_over_copies(w.dense, T);
    if (w.shared && (concurrent_shared(T) ? side_linear_ : linear_).gated_over_copies(w.shared, T)) return true;
    return routed_grouped_gemm(w, T);
  }
  /// Whether the routed experts of a T-row step run as the grouped GEMM over bf16 rows (moe_experts_prefill).
  bool routed_grouped_gemm(const DeviceLayer& w, int T) const {
    const DeviceExperts& x = w.experts;
    return T > moe_gemv_rows() && gemm_quant_supports(x.gate.type) && gemm_quant_supports(x.up.type) &&
           gemm_quant_supports(x.down.type);
  }

  /// Whether one-token MoE steps route inside the first expert GEMV (GemvParams::route) instead of a
  /// moe_route launch before it (LATTE_MOE_ROUTE_IN_GEMV=0: never).
  static bool route_in_gemv() {
    static const bool on = latte::detail::env_flag("LATTE_MOE_ROUTE_IN_GEMV", true);
    return on;
  }

  /// Whether a decode step of T rows runs the shared expert alongside the routed ones (T up to the MoE
  /// decode path's and at most kConcurrentSharedRows; side_linear_ and buffers of its own, nothing shared with
  /// the main stream but read-only inputs; LATTE_MOE_CONCURRENT_SHARED=0: no).
  bool concurrent_shared(int T) const {
    static const bool on = latte::detail::env_flag("LATTE_MOE_CONCURRENT_SHARED", true);
    return on && T <= std::min(moe_gemv_tokens(), kConcurrentSharedRows) &&
           act_.shared_out.size() >= static_cast<size_t>(T) * c_.n_embd;
  }
  /// At 128 rows the shared expert after the routed ones was 5% faster than beside them (H100, pp512+tg64
  /// x128: 6,243 against 5,920 t/s; BENCHMARKS.md): the routed experts' launches fill the GPU by themselves.
  static constexpr int kConcurrentSharedRows = 64;

  /// out = down(silu(gate xn) * up xn) + residual, on `on` (default: the step's stream, out = residual = x;
  /// else the side stream with side_linear_).
  void gated_ffn(const DeviceGatedFfn& f, int T, cudaStream_t on = nullptr, float* out = nullptr,
                 const float* residual = nullptr) {
    Activations& a = act_;
    Linear& lin = on == nullptr ? linear_ : side_linear_;
    if (on == nullptr) {
      on = stream();
      out = a.x.data();
      residual = a.x.data();
    }
    const int64_t F = f.gate.rows;
    // over copies: the FFN norm's bf16 rows for gate and up, and silu's output as bf16 rows for the down, in
    // hidden's memory (its fp32 rows are then never written)
    __nv_bfloat16* const hidden_bf16 = Linear::direct_bf16() && F % 8 == 0 && lin.copy_of(f.down, T) != nullptr
                                           ? reinterpret_cast<__nv_bfloat16*>(a.hidden.data())
                                           : nullptr;
    const bool down_bf16 = lin.gated(f, a.xn.data(), c_.n_embd, T, a.hidden.data(), F, a.gate_up.data(), on,
                                     hidden_record(T), xn_bf16_fresh_ ? a.xn_bf16.data() : nullptr, hidden_bf16);
    uint8_t* hq = nullptr;  // one token: the down GEMV quantizes the activations itself (Linear)
    if (!down_bf16 && (T >= 2 || !gemv_self_quantize()) &&
        a.hq.size() >= static_cast<size_t>(T * x_int8_record_bytes(F)) && Linear::reads_records(f.down, T) &&
        lin.copy_of(f.down, T) == nullptr) {
      hq = a.hq.data();  // the activations as records for the split-int8 down GEMV
      quantize_x_int8({.x = a.hidden.data(),
                       .x_stride = F,
                       .rows = T,
                       .k = static_cast<int>(F),
                       .out = hq,
                       .out_stride = x_int8_record_bytes(F)},
                      on);
    }
    lin(f.down,
        {.x = a.hidden.data(),
         .x_stride = F,
         .rows = T,
         .y = out,
         .y_stride = c_.n_embd,
         .residual = residual,
         .x_q = hq,
         .x_q_stride = x_int8_record_bytes(F),
         .x_bf16 = down_bf16 ? hidden_bf16 : nullptr,
         .x_bf16_stride = down_bf16 ? F : 0},
        on);
  }

  /// Where the combine that finishes layer il's residual rows (the last write to them in the layer) normalises
  /// them for layer il + 1's attention, as its rms_norm would (the same bits), which then skips it: a launch
  /// fewer per MoE layer. Nowhere (weight null) for the last layer, with tensor parallelism (the rows are
  /// finished by the all-reduce after the combine), or unless LATTE_COMBINE_NORM=1: measured on an H200 it
  /// was no faster (tg128 494.7 / 493.9 on, 495.9 / 493.9 off; x8 and x32 within a call's spread: one block
  /// per row combining and normalising takes about what the combine's four blocks and the norm launch
  /// overlapped by PDL take). Sets prenormed_ when used.
  RowNormTarget next_attention_norm(int il, int T) {
    static const bool on = latte::detail::env_flag("LATTE_COMBINE_NORM", false);
    if (!on || communicator_ || il + 1 >= c_.n_layer_main() || c_.n_embd % 32 != 0) return {};
    prenormed_ = true;
    uint8_t* records = hidden_record(T);
    return {.weight = weights_->layers[static_cast<size_t>(il) + 1].attn_norm,
            .eps = c_.rms_norm_eps,
            .out = act_.xn.data(),
            .out_stride = c_.n_embd,
            .out_q = records,
            .out_q_stride = records ? x_int8_record_bytes(c_.n_embd) : 0};
  }

  /// x += the routed experts of the step's rows (+ `add`, ready once `add_ready` is, in the decode combine).
  /// `logits_ready`: the FFN norm has computed the router logits already; `then_norm`: the combine also
  /// normalises the finished rows (next_attention_norm).
  void routed_experts(int il, const DeviceLayer& w, int T, bool logits_ready, const RowNormTarget& then_norm,
                      const float* add = nullptr, cudaEvent_t add_ready = nullptr) {
    Activations& a = act_;
    const int H = c_.n_embd, E = c_.n_expert, K = c_.n_expert_used, F = c_.n_ff_expert;
    if (!logits_ready) linear(w.router, a.xn.data(), H, T, a.router.data(), E);
    const MoeRouterParams route{
        .logits = a.router.data(),
        .logits_stride = E,
        .n_tokens = T,
        .n_experts = E,
        .selection_bias = w.exp_probs_b,
        .gating = c_.expert_gating == ExpertGating::sigmoid ? MoeGating::sigmoid : MoeGating::softmax,
        .k = K,
        .n_groups = c_.n_expert_group,
        .groups_used = c_.n_expert_group_used,
        .normalize = c_.expert_weights_norm,
        .scale = c_.expert_weights_scale,
        .ids = a.ids.data(),
        .weights = a.weights.data()};
    std::string tap;
    const bool tap_route = tapping(il, "expert_ids", tap) || tapping(il, "expert_weights", tap);
    // one token: the experts' first GEMV routes the token in its blocks (moe_experts_decode falls back
    // to moe_route where it takes another path); a few more: its sort launch routes them (one GEMV pass over
    // groups, moe_routes_in_sort); the expert taps read the choices before the experts run
    const bool route_in_experts =
        !tap_route && ((T == 1 && route_in_gemv()) ||
                       (T > 1 && T <= moe_gemv_rows() && T <= moe_gemv_tokens() && moe_routes_in_sort(T * K)));
    if (!route_in_experts) moe_route(route, stream());
    if (tapping(il, "router_logits", tap)) emit_device(tap, il, {T, E}, a.router.data(), T, E, E);
    emit_experts(il);
    const DeviceExperts& x = w.experts;
    auto stack = [&](const DeviceMatrix& m, int64_t stride_rows) {
      return ExpertStack{
          .type = m.type, .data = m.data, .bytes = m.bytes(), .matrix_stride_bytes = stride_rows * m.row_bytes};
    };
    const MoeExpertWeights experts{.gate = stack(x.gate, x.gate_up_stride_rows),
                                   .up = stack(x.up, x.gate_up_stride_rows),
                                   .down = stack(x.down, H),
                                   .n_experts = n_held_,
                                   .hidden = H,
                                   .ffn = F};
    if (routed_grouped_gemm(w, T)) {
      if (!xn_bf16_fresh_) convert_to_bf16(a.xn.data(), H, a.xn_bf16.data(), H, T, H, stream());
      moe_experts_prefill(experts, *moe_,
                          {.ids = a.ids.data(),
                           .weights = a.weights.data(),
                           .n_tokens = T,
                           .k = K,
                           .x_bf16 = a.xn_bf16.data(),
                           .x_stride = H,
                           .out = a.x.data(),
                           .out_stride = H,
                           .accumulate = true,
                           .held_first = held_first_,
                           .then_norm = then_norm},
                          stream());
      return;
    }
    const int chunk = moe_gemv_tokens();
    for (int t0 = 0; t0 < T; t0 += chunk) {
      const int n = std::min(chunk, T - t0);
      const size_t pair0 = static_cast<size_t>(t0) * K, row0 = static_cast<size_t>(t0) * H;
      // the chunk's rows of the normalisation's records; beyond record_rows() rows, the chunk's own
      uint8_t* records = hidden_record(T);
      if (records != nullptr) {
        records += static_cast<size_t>(t0) * static_cast<size_t>(x_int8_record_bytes(H));
      } else if (n <= moe_gemv_max_tokens && H % 32 == 0) {
        records = a.xq.data();
        quantize_x_int8({.x = a.xn.data() + row0,
                         .x_stride = H,
                         .rows = n,
                         .k = H,
                         .out = records,
                         .out_stride = x_int8_record_bytes(H)},
                        stream());
      }
      moe_experts_decode(experts, *moe_,
                         {.ids = a.ids.data() + pair0,
                          .weights = a.weights.data() + pair0,
                          .n_tokens = n,
                          .k = K,
                          .x = a.xn.data() + row0,
                          .x_stride = H,
                          .x_q = records,
                          .x_q_stride = x_int8_record_bytes(H),
                          .out = a.x.data() + row0,
                          .out_stride = H,
                          .accumulate = true,
                          .held_first = held_first_,
                          .add = add ? add + row0 : nullptr,
                          .add_stride = H,
                          .add_ready = t0 == 0 ? add_ready : nullptr,
                          .route = route_in_experts ? &route : nullptr,
                          .then_norm = chunk_rows(then_norm, t0)},
                         stream());
    }
  }

  /// `norm` from row t0 on.
  static RowNormTarget chunk_rows(RowNormTarget norm, int t0) {
    if (norm.weight == nullptr) return norm;
    norm.out += static_cast<size_t>(t0) * static_cast<size_t>(norm.out_stride);
    if (norm.out_q != nullptr) norm.out_q += static_cast<size_t>(t0) * static_cast<size_t>(norm.out_q_stride);
    return norm;
  }

  void output_logits(const detail::ForwardBatch& batch) {
    const int H = c_.n_embd, vocab = c_.n_vocab;
    const int n_out = static_cast<int>(batch.logit_rows.size());
    if (n_out == 0) return;
    Activations& a = act_;
    const __nv_bfloat16* const head_bf16 = output_copy(n_out);
    // Normalise the wanted rows into out_rows, one launch per run of consecutive rows.
    uint8_t* const records =
        head_bf16 ? nullptr : hidden_record(n_out);  // row i's record at i * x_int8_record_bytes(H)
    for (int i = 0; i < n_out;) {
      int j = i + 1;
      while (j < n_out && batch.logit_rows[j] == batch.logit_rows[j - 1] + 1) ++j;
      rms(a.x.data() + static_cast<size_t>(batch.logit_rows[i]) * H, H, weights_->output_norm, H, j - i,
          a.out_rows.data() + static_cast<size_t>(i) * H, H, records ? records + i * x_int8_record_bytes(H) : nullptr);
      i = j;
    }
    std::string tap;
    if (tapping(-1, "output_norm", tap)) emit_device(tap, -1, {n_out, H}, a.out_rows.data(), n_out, H, H);
    float* logits = a.logits.data();
    if (vocab_slice_ > 0) {
      // This rank's vocabulary rows, then every rank's slice gathered in rank order (rank 0 reorders
      // them per row on the host, in finish_logits).
      linear(weights_->output, a.out_rows.data(), H, n_out, a.logits_slice.data(), vocab_slice_, nullptr, records,
             head_bf16);
      communicator_->all_gather(a.logits_slice.data(), logits, static_cast<size_t>(n_out) * vocab_slice_,
                                detail::CollectiveType::f32);
      if (communicator_->rank() == 0 || logits_everywhere_) {
        copy_logits_to_host(logits, n_out, vocab, vocab, logits_host_, stream());
      }
      return;
    }
    if (logits_everywhere_) {
      // Rank 0 holds the whole head: its logits go to every rank.
      if (communicator_->rank() == 0) {
        linear(weights_->output, a.out_rows.data(), H, n_out, logits, vocab, nullptr, records, head_bf16);
      }
      communicator_->broadcast(logits, static_cast<size_t>(n_out) * vocab, detail::CollectiveType::f32, 0);
      copy_logits_to_host(logits, n_out, vocab, vocab, logits_host_, stream());
      return;
    }
    linear(weights_->output, a.out_rows.data(), H, n_out, logits, vocab, nullptr, records, head_bf16);
    if (!chunked_logits_) copy_logits_to_host(logits, n_out, vocab, vocab, logits_host_, stream());
  }

  /// Logit rows per chunk of a chunked copy (8.3 MB at DeepSeek's 129,280 entries).
  static constexpr int kLogitChunkRows = 16;

  /// Whether this step's logits leave the device in chunks of kLogitChunkRows rows after the step's kernels, each
  /// chunk scattered to its rows by finish_logits while the next ones copy, instead of in one copy that the scatter
  /// waits for (LATTE_LOGITS_CHUNKS=0: never): from two chunks on one device. A 128-row step's logits are 66 MB.
  /// Measured on an H100 (BENCHMARKS.md, thirty-first round): x128 +3.9%, x32 +1.1%.
  bool logits_in_chunks(const detail::ForwardBatch& batch) const {
    static const bool on = latte::detail::env_flag("LATTE_LOGITS_CHUNKS", true);
    return on && communicator_ == nullptr && !fused(batch) &&
           static_cast<int>(batch.logit_rows.size()) >= 2 * kLogitChunkRows;
  }

  /// The step's n_out logit rows into the pinned buffer, chunk c's completion recorded in logit_chunks_[c].
  void copy_logits_chunks(int n_out) {
    const int chunks = (n_out + kLogitChunkRows - 1) / kLogitChunkRows;
    const int64_t vocab = c_.n_vocab;
    if (logits_host_.size() < static_cast<size_t>(n_out) * static_cast<size_t>(vocab)) {
      throw Error(ErrorCode::internal, "cuda forward: the pinned logits buffer holds " +
                                           std::to_string(logits_host_.size()) + " floats, " + std::to_string(n_out) +
                                           " rows of " + std::to_string(vocab) + " needed");
    }
    while (static_cast<int>(logit_chunks_.size()) < chunks) logit_chunks_.emplace_back(cudaEventDisableTiming);
    for (int c = 0; c < chunks; ++c) {
      const int64_t r0 = static_cast<int64_t>(c) * kLogitChunkRows;
      const int64_t rows = std::min<int64_t>(kLogitChunkRows, n_out - r0);
      LATTE_CUDA_CHECK(cudaMemcpyAsync(logits_host_.data() + r0 * vocab, act_.logits.data() + r0 * vocab,
                                       static_cast<size_t>(rows * vocab) * sizeof(float), cudaMemcpyDeviceToHost,
                                       stream()));
      logit_chunks_[static_cast<size_t>(c)].record(stream());
    }
  }

  /// Has the model make bf16 copies of its dense matrices (DeviceWeights::make_dense_bf16, shared by its sessions)
  /// at the first step of Linear::copy_rows() rows or more (LATTE_DENSE_BF16_ROWS, default 5) outside a graph
  /// capture, before any launch of the step, where all of them take at most LATTE_DENSE_BF16_MB MB (default 4096;
  /// 0: never) and half the free device memory: DeepSeek-V2-Lite's Q4_K_M about 1.7 GiB. From then on Linear and the
  /// mla backend multiply the copies with cuBLAS in such steps, where they dequantized each matrix to a bf16 scratch in
  /// every step (from 65 rows) or decoded it once per 8 rows on a GEMV (5-64 rows). A captured step
  /// never changes path: its shape's first run, never captured, made or refused them.
  void keep_dense_copies(int T) {
    static const int64_t budget_mb = latte::detail::env_int("LATTE_DENSE_BF16_MB", 4096);
    if (budget_mb <= 0 || T < Linear::copy_rows() || weights_->dense_bf16_ready()) return;
    if (!stream_is_capturing(stream())) weights_->make_dense_bf16(budget_mb * 1024 * 1024, stream());
  }

  /// The bf16 copy of the output head for the logits of n_out rows (DeviceWeights::make_output_bf16, shared by the
  /// model's sessions), or null. From LATTE_OUTPUT_BF16_ROWS rows (default Linear::kCopyMinRows, 5: as the dense
  /// matrices' copies), where the copy takes at most LATTE_OUTPUT_BF16_MB MB (default 2048; 0: never) and half the
  /// free device memory: DeepSeek-V2-Lite's Q6_K head 505 MiB, DeepSeek-V3's 1.7 GiB. Below those rows the head's
  /// GEMV reads its split-int8 records; beyond them it took a tensor-core GEMV launch per 8 rows (x32: 583 us) or
  /// the fused GEMM (x128: 713 us), each decoding the whole head (H100, BENCHMARKS.md). Made at the
  /// first such step outside a graph capture (a step's first run of its shape is not captured), so a captured
  /// step never changes path.
  const __nv_bfloat16* output_copy(int n_out) {
    static const int64_t budget_mb = latte::detail::env_int("LATTE_OUTPUT_BF16_MB", 2048);
    static const int min_rows = latte::detail::env_int("LATTE_OUTPUT_BF16_ROWS", Linear::kCopyMinRows);
    if (budget_mb <= 0 || n_out < min_rows) return nullptr;
    if (const __nv_bfloat16* copy = weights_->output_bf16()) return copy;
    if (!stream_is_capturing(stream())) weights_->make_output_bf16(budget_mb * 1024 * 1024, stream());
    return weights_->output_bf16();
  }

  void finish_logits(const detail::ForwardBatch& batch) {
    const bool to_rows = !batch.logit_dest.empty();
    const size_t n_out = batch.logit_rows.size(), vocab = static_cast<size_t>(c_.n_vocab);
    if (to_rows && batch.logit_dest.size() != n_out) {
      stream_.synchronize();
      throw Error(ErrorCode::internal, "cuda forward: " + std::to_string(batch.logit_dest.size()) +
                                           " logit destinations for " + std::to_string(n_out) + " logit rows");
    }
    // where logit row i goes: its own destination, or row i of the contiguous output
    auto row = [&](size_t i) { return to_rows ? batch.logit_dest[i] : batch.logits + i * vocab; };
    if (chunked_logits_ && (batch.logits != nullptr || to_rows)) {
      // each chunk's rows as soon as it has landed, the later chunks still copying
      const size_t chunk = kLogitChunkRows;
      for (size_t c = 0; c * chunk < n_out; ++c) {
        const size_t r0 = c * chunk, rows = std::min(chunk, n_out - r0);
        LATTE_CUDA_CHECK(cudaEventSynchronize(logit_chunks_[c].get()));
        scatter_logits(
            rows, vocab, [&](size_t i) { return row(r0 + i); }, r0, n_out);
      }
      stream_.synchronize();
    } else {
      stream_.synchronize();
      if (batch.logits == nullptr && !to_rows) return;  // a tensor-parallel rank other than 0
      if (n_out && vocab_slice_ > 0) {
        // [ranks, n_out, slice] -> [n_out, ranks * slice]
        const size_t slice = static_cast<size_t>(vocab_slice_);
        const size_t ranks = vocab / slice;
        for (size_t r = 0; r < ranks; ++r) {
          for (size_t i = 0; i < n_out; ++i) {
            std::memcpy(row(i) + r * slice, logits_host_.data() + (r * n_out + i) * slice, slice * sizeof(float));
          }
        }
      } else {
        scatter_logits(n_out, vocab, row, 0, n_out);
      }
    }
    const size_t n = batch.logits != nullptr ? n_out * vocab : 0;  // the logits tap reads the contiguous output
    std::string tap;
    if (n && tapping(-1, "logits", tap)) {
      taps_->emit(tap, -1, {static_cast<int64_t>(batch.logit_rows.size()), c_.n_vocab}, batch.logits);
    }
  }

  /// Copies rows first .. first + n - 1 of the pinned staging buffer to row(0 .. n - 1): in a step of step_rows
  /// logit rows of kParallelScatterBytes or more, spread over a small pool of threads made on first use
  /// (LATTE_LOGITS_COPY_THREADS sets its size, 1 copies on the calling thread only; by default one per core, up to
  /// 16). One thread took several ms per 128-row step (66 MB) on the serial path; on an H100 host of 16 cores
  /// (BENCHMARKS.md, thirty-third round) x128 ran 6,531-6,684 t/s with 4 threads, 8,639-8,709 with 8 and 8,861-8,965
  /// with 16.
  void scatter_logits(size_t n, size_t vocab, const std::function<float*(size_t)>& row, size_t first,
                      size_t step_rows) {
    const unsigned threads = logits_copy_threads();
    const bool parallel = threads > 1 && step_rows * vocab * sizeof(float) >= kParallelScatterBytes;
    if (parallel && !copy_pool_) copy_pool_ = std::make_unique<TaskPool>(threads);
    latte::scatter_rows(logits_host_.data() + first * vocab, n, vocab, row, parallel ? copy_pool_.get() : nullptr, 0);
  }

  static unsigned logits_copy_threads() {
    static const unsigned n = [] {
      const int fallback = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 16u));
      return static_cast<unsigned>(latte::detail::env_int("LATTE_LOGITS_COPY_THREADS", fallback));
    }();
    return n;
  }

  const ModelConfig& c_;
  detail::Communicator* communicator_ = nullptr;  // tensor parallelism: sums the ranks' shares
  int held_first_ = -1;                           // expert parallelism: first routed expert held, or -1
  int n_held_ = 0;                                // routed experts held (all of them without expert parallelism)
  int vocab_slice_ = 0;                           // split output head: vocabulary rows of each rank, else 0
  bool logits_everywhere_ = false;                // every rank copies the step's logits to the host
  std::shared_ptr<const DeviceWeights> weights_;
  CudaAttentionBackend& backend_;
  detail::AttentionInputLayout layout_;
  RopeYarnParams rope_{};
  Stream stream_;
  Stream side_;  // decode: the shared expert beside the routed ones (fork_ / join_ order it)
  Event fork_{cudaEventDisableTiming}, join_{cudaEventDisableTiming};
  Linear linear_;
  Linear side_linear_;  // the side stream's products (its own bf16 staging and cuBLAS handle)
  Activations act_;
  DeviceBuffer<__nv_bfloat16>
      attn_bf16_;  // the attention output as bf16, where the backend writes it (writes_output_bf16)
  std::unique_ptr<MoeWorkspace> moe_;
  int capacity_ = 0;
  PinnedBuffer<int32_t> tokens_host_;
  DeviceBuffer<int32_t> tokens_;
  DecodeGraphs graphs_;
  std::unique_ptr<DecodeStep> fused_;                                  // single-sequence decode in one kernel, or null
  std::string fused_reason_;                                           // why fused_ is null
  DeviceBuffer<float> fused_layer_out_, fused_embed_, fused_weights_;  // its observed values (taps)
  DeviceBuffer<int32_t> fused_ids_;
  DeviceStepTables tables_;
  DeviceStep step_{};
  std::vector<const std::byte*> rows_, index_rows_;
  std::unique_ptr<TaskPool> copy_pool_;  // scatter_logits: made on the first large step
  std::vector<AttentionSequence> attention_sequences_;
  PinnedBuffer<float> logits_host_;
  bool chunked_logits_ = false;            // this step's logits copy in chunks (logits_in_chunks)
  std::vector<Event> logit_chunks_;        // chunk c of them has landed in logits_host_
  const detail::TapSink* taps_ = nullptr;  // this step's observer, or null
  std::vector<float> tap_host_, tap_before_;
  std::vector<int32_t> tap_ids_;
};

DecodeGraphs::DecodeGraphs() { enabled_ = latte::detail::env_flag("LATTE_CUDA_GRAPHS", true); }

DecodeGraphs::~DecodeGraphs() { clear(); }

void DecodeGraphs::clear() noexcept {
  for (auto& [key, e] : entries_) {
    if (e.exec) cudaGraphExecDestroy(e.exec);
  }
  entries_.clear();
}

bool DecodeGraphs::run(CudaForward& pass, const detail::ForwardBatch& batch) {
  if (!enabled_) return false;
  for (const detail::BatchSequence& s : batch.sequences) {
    if (s.n_tokens != 1) return false;  // prefill chunks run eagerly
  }
  std::vector<uint64_t> key = pass.graph_key(batch);
  if (entries_.size() >= 16 && !entries_.contains(key)) clear();
  Entry& e = entries_[key];
  const cudaStream_t stream = pass.stream();
  if (e.failed) return false;
  if (e.exec) {
    LATTE_CUDA_CHECK(cudaGraphLaunch(e.exec, stream));
    return true;
  }
  if (e.seen++ == 0) return false;  // the first step of a key sizes the buffers eagerly

  auto give_up = [&](cudaGraph_t graph) {
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();  // clear the capture's error state
    e.failed = true;
    return false;
  };
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return give_up(nullptr);
  cudaGraph_t graph = nullptr;
  try {
    pass.enqueue(batch);
  } catch (const Error&) {
    cudaStreamEndCapture(stream, &graph);
    return give_up(graph);  // the caller runs the step eagerly (and reports a real error there)
  }
  if (cudaStreamEndCapture(stream, &graph) != cudaSuccess || graph == nullptr) return give_up(graph);
  cudaGraphExec_t exec = nullptr;
  if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) return give_up(graph);
  cudaGraphDestroy(graph);
  e.exec = exec;
  LATTE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  return true;
}

}  // namespace

std::unique_ptr<detail::ForwardPass> create_cuda_forward(const detail::ModelState& model, AttentionBackend& backend) {
  auto* cuda_backend = dynamic_cast<CudaAttentionBackend*>(&backend);
  if (!cuda_backend) {
    throw Error(ErrorCode::unsupported, "attention backend '" + std::string(backend.name()) +
                                            "' does not run on CUDA; choose a CUDA backend (mla, standard)");
  }
  use_device(model.device.index);
  return std::make_unique<CudaForward>(model.config, model.device_weights, *cuda_backend, nullptr);
}

std::unique_ptr<CudaRankForward> create_cuda_rank_forward(const CudaRankSetup& rank, AttentionBackend& backend) {
  auto* cuda_backend = dynamic_cast<CudaAttentionBackend*>(&backend);
  if (!cuda_backend) {
    throw Error(ErrorCode::unsupported, "attention backend '" + std::string(backend.name()) +
                                            "' does not run on CUDA; choose a CUDA backend (mla, standard)");
  }
  if (!rank.config || !rank.weights) throw Error(ErrorCode::internal, "cuda rank forward: no config or weights");
  use_device(rank.weights->ordinal);
  return std::make_unique<CudaForward>(*rank.config, rank.weights, *cuda_backend, &rank);
}

}  // namespace latte::cuda
