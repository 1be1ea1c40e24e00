// The CUDA `mla` and `standard` attention backends (see cuda_attention.hpp).
#include "cuda/cuda_attention.hpp"

#include "core/environment.hpp"
#include "cuda/activations.hpp"
#include "cuda/check.hpp"
#include "cuda/dequantize.hpp"
#include "cuda/device_kv_storage.hpp"
#include "cuda/flash_prefill.hpp"
#include "cuda/gemm_bf16.hpp"
#include "cuda/gemm_quant.hpp"
#include "cuda/gemv_quant.hpp"
#include "cuda/heads_product.hpp"
#include "cuda/kv_cache_append.hpp"
#include "cuda/linear.hpp"
#include "cuda/mla_decode.hpp"
#include "cuda/standard_decode.hpp"
#include "cuda/x_int8.hpp"

#include <latte/error.hpp>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

namespace latte::cuda {

// ---- step tables -----------------------------------------------------------------------------

void DeviceStepTables::upload(cudaStream_t stream) {
  LATTE_CUDA_CHECK(cudaMemcpyAsync(device_.data(), staging_.data(), bytes_, cudaMemcpyHostToDevice, stream));
}

DeviceStep DeviceStepTables::stage(std::span<const Sequence> sequences, int n_rows, int n_layer) {
  const bool indexer = !sequences.empty() && sequences.front().index_rows != nullptr;
  attn_base_.assign(static_cast<size_t>(n_layer), nullptr);
  index_base_.assign(static_cast<size_t>(n_layer), nullptr);
  auto lowest = [](const std::byte*& base, const std::byte* rows, size_t seq, int il, const char* what) {
    if (rows == nullptr) {
      throw Error(ErrorCode::internal, "cuda attention: sequence " + std::to_string(seq) + " of the step has no " +
                                           what + " rows in layer " + std::to_string(il));
    }
    if (!base || rows < base) base = rows;
  };
  for (int il = 0; il < n_layer; ++il) {
    for (size_t i = 0; i < sequences.size(); ++i) {
      lowest(attn_base_[il], sequences[i].attn_rows[il], i, il, "cache");
      if (indexer) lowest(index_base_[il], sequences[i].index_rows[il], i, il, "indexer key");
    }
  }
  // Layout: attn pages [n_layer, T], index pages [n_layer, T] (int64); rows [T], positions [T],
  // kv_lens [T] (int32).
  const size_t T = static_cast<size_t>(n_rows);
  const size_t n_pages = (indexer ? 2 : 1) * static_cast<size_t>(n_layer) * T;
  bytes_ = n_pages * sizeof(int64_t) + 3 * T * sizeof(int32_t);
  if (staging_.size() < bytes_) {
    staging_ = PinnedBuffer<std::byte>(bytes_ * 2);
    device_ = DeviceBuffer<std::byte>(bytes_ * 2, "attention step tables");
    bump_scratch_generation();
  }
  auto* pages = reinterpret_cast<int64_t*>(staging_.data());
  auto* ints = reinterpret_cast<int32_t*>(pages + n_pages);
  std::fill(pages, pages + n_pages, int64_t{0});
  std::fill(ints, ints + 3 * T, 0);
  int max_kv_len = 0;
  auto page = [](const std::byte* rows, const std::byte* base) {
    const int64_t bytes = rows - base;  // >= 0: base is the lowest
    if (bytes % kDeviceRowUnit != 0) {
      throw Error(ErrorCode::internal, "cuda attention: cache rows " + std::to_string(bytes) +
                                           " bytes apart are not a multiple of the " + std::to_string(kDeviceRowUnit) +
                                           "-byte page-table unit");
    }
    return bytes / kDeviceRowUnit;
  };
  for (const Sequence& s : sequences) {
    for (int i = 0; i < s.n_tokens; ++i) {
      const size_t row = static_cast<size_t>(s.first_row + i);
      ints[row] = static_cast<int32_t>(row);
      ints[T + row] = s.n_past + i;
      ints[2 * T + row] = s.n_past + i + 1;
      max_kv_len = std::max(max_kv_len, s.n_past + i + 1);
      for (int il = 0; il < n_layer; ++il) {
        pages[static_cast<size_t>(il) * T + row] = page(s.attn_rows[il], attn_base_[il]);
        if (indexer) pages[(static_cast<size_t>(n_layer) + il) * T + row] = page(s.index_rows[il], index_base_[il]);
      }
    }
  }
  const auto* d_pages = reinterpret_cast<const int64_t*>(device_.data());
  const auto* d_ints = reinterpret_cast<const int32_t*>(d_pages + n_pages);
  return {.n_rows = n_rows,
          .n_layer = n_layer,
          // An upper bound in whole 256-position blocks: plans and grids then change once per block,
          // so a captured decode graph serves 256 steps.
          .max_kv_len = (max_kv_len + 255) / 256 * 256,
          .rows = d_ints,
          .positions = d_ints + T,
          .kv_lens = d_ints + 2 * T,
          .attn_pages = d_pages,
          .index_pages = indexer ? d_pages + static_cast<size_t>(n_layer) * T : nullptr,
          .attn_base = attn_base_.data(),
          .index_base = indexer ? index_base_.data() : nullptr};
}

// ---- shared backend plumbing -----------------------------------------------------------------

const DeviceLayer& CudaAttentionBackend::layer(int il) const {
  if (!weights_) {
    throw Error(ErrorCode::invalid_argument,
                std::string(name()) + " (CUDA): no device weights bound; run it through a CUDA model's session");
  }
  if (il < 0 || il >= static_cast<int>(weights_->layers.size())) {
    throw Error(ErrorCode::internal, std::string(name()) + " (CUDA): layer " + std::to_string(il) + " out of range");
  }
  return weights_->layers[static_cast<size_t>(il)];
}

void CudaAttentionBackend::convert_output_bf16(const AttentionInput& in, int64_t width, __nv_bfloat16* out_bf16) {
  if (out_bf16 == nullptr) return;
  convert_to_bf16(in.out, width, out_bf16, width, in.n_rows, static_cast<int>(width),
                  static_cast<cudaStream_t>(in.stream));
}

void CudaAttentionBackend::forward(const AttentionInput& in) {
  if (!standalone_) standalone_ = std::make_unique<DeviceStepTables>();
  std::vector<DeviceStepTables::Sequence> seqs;
  std::vector<const std::byte*> rows(in.sequences.size());
  for (size_t i = 0; i < in.sequences.size(); ++i) {
    const AttentionSequence& s = in.sequences[i];
    rows[i] = s.cache;
    seqs.push_back({.first_row = s.first_row, .n_tokens = s.n_tokens, .n_past = s.n_past, .attn_rows = &rows[i]});
  }
  auto stream = static_cast<cudaStream_t>(in.stream);
  LATTE_CUDA_CHECK(cudaStreamSynchronize(stream));  // the staging buffer may feed an earlier copy
  const DeviceStep step = standalone_->stage(seqs, in.n_rows, 1);
  standalone_->upload(stream);
  forward_device(in, step);  // tables of one layer: forward_device reads them as layer 0
}

namespace {

/// PagedRows over row-unit page tables: row r reads base + pages[r] * unit + pos * token_stride.
template <class T>
PagedRows<T> row_pages(const std::byte* base, const int64_t* pages, int64_t token_stride, int64_t head_stride,
                       int64_t element_offset = 0) {
  using Elem = std::remove_const_t<T>;
  return {.data = reinterpret_cast<T*>(const_cast<std::byte*>(base)) + element_offset,
          .page_table = pages,
          .page_stride = kDeviceRowUnit / static_cast<int64_t>(sizeof(Elem)),
          .token_stride = token_stride,
          .head_stride = head_stride,
          .page_size = kRowPageSize,
          .page_table_stride = 1};
}

/// Per-head gathered-GEMV groups for T rows of N heads: group (h, chunk) multiplies head h's matrix
/// with rows chunk*8 .. of that head, reading row t*x_token_rows + h (default N: [T, N, *] arrays) and
/// writing row t*N + h.
class HeadGroups {
 public:
  struct Groups {
    const GemvGroup* groups;
    const int32_t* count;
    int n;
    int max_tokens;  ///< the largest group's token count: min(T, 8)
  };
  Groups get(int T, int N, int x_token_rows = 0) {
    if (x_token_rows <= 0) x_token_rows = N;
    auto it = cache_.find({T, x_token_rows});
    if (it == cache_.end()) {
      std::vector<GemvGroup> host;
      for (int h = 0; h < N; ++h) {
        for (int t0 = 0; t0 < T; t0 += gemv_max_tokens) {
          GemvGroup g{};
          g.matrix = h;
          g.count = std::min(gemv_max_tokens, T - t0);
          for (int i = 0; i < g.count; ++i) {
            g.x_row[i] = (t0 + i) * x_token_rows + h;
            g.y_row[i] = (t0 + i) * N + h;
          }
          host.push_back(g);
        }
      }
      Entry e{DeviceBuffer<GemvGroup>(host.size(), "head groups"), DeviceBuffer<int32_t>(1, "head group count"),
              static_cast<int>(host.size())};
      const int32_t n = e.n;
      LATTE_CUDA_CHECK(
          cudaMemcpy(e.groups.data(), host.data(), host.size() * sizeof(GemvGroup), cudaMemcpyHostToDevice));
      LATTE_CUDA_CHECK(cudaMemcpy(e.count.data(), &n, sizeof(n), cudaMemcpyHostToDevice));
      it = cache_.emplace(std::pair{T, x_token_rows}, std::move(e)).first;
    }
    return {it->second.groups.data(), it->second.count.data(), it->second.n, std::min(T, gemv_max_tokens)};
  }

 private:
  struct Entry {
    DeviceBuffer<GemvGroup> groups;
    DeviceBuffer<int32_t> count;
    int n;
  };
  std::map<std::pair<int, int>, Entry> cache_;
};

/// y[t, h] = M_h x[t, h] for every row t and head h, one launch (M_h: matrix h of `stack`, `rows_per_head` rows).
void per_head_gemv(const DeviceMatrix& stack, int64_t rows_per_head, HeadGroups::Groups g, const float* x,
                   int64_t x_stride, float* y, int64_t y_stride, cudaStream_t stream, __nv_bfloat16* y_bf16 = nullptr,
                   const uint8_t* x_q = nullptr, bool x_quantize = false) {
  if (g.n > 65535) {
    throw Error(ErrorCode::unsupported, "cuda attention: " + std::to_string(g.n) + " head groups exceed one launch");
  }
  gemv_quant({.type = stack.type,
              .weight = stack.data,
              .weight_bytes = stack.bytes(),
              .matrix_stride_bytes = rows_per_head * stack.row_bytes,
              .n_rows = static_cast<int>(rows_per_head),
              .k = static_cast<int>(stack.k),
              .x = x,
              .x_stride = x_stride,
              .y = y,
              .y_bf16 = y_bf16,
              .y_stride = y_stride,
              .groups = g.groups,
              .n_groups = g.count,
              .max_groups = g.n,
              .max_tokens_per_group = g.max_tokens,
              .x_q = x_q,
              .x_q_stride = x_q ? x_int8_record_bytes(stack.k) : 0,
              .x_quantize = x_quantize},
             stream);
}

/// run_flash_prefill with its keys split over several CTAs where that fills the device better (the
/// partial results in `workspace`, grown as needed).
void flash_prefill_split(FlashPrefillParams p, DeviceBuffer<float>& workspace, cudaStream_t stream) {
  const size_t bytes = flash_prefill_workspace_bytes(p);
  if (bytes > 0) {
    p.workspace = grow_scratch(workspace, (bytes + sizeof(float) - 1) / sizeof(float), "flash prefill split workspace");
    p.workspace_bytes = workspace.bytes();
  }
  run_flash_prefill(p, stream);
}

// ---- mla --------------------------------------------------------------------------------------

class CudaMlaBackend final : public CudaAttentionBackend {
 public:
  explicit CudaMlaBackend(const ModelConfig& c) : c_(c) {}
  [[nodiscard]] std::string_view name() const noexcept override { return "mla"; }
  [[nodiscard]] KvLayout kv_layout() const override {
    return {.values_per_token = c_.kv_lora_rank + c_.qk_rope_head_dim, .element_type = GgmlType::bf16};
  }

  /// Steps of up to LATTE_MLA_UK_BESIDE_ROPE rows (default 1; 0: never; at most 8): W_UK on the side stream
  /// beside the rope launch, its blocks quantizing q_nope themselves (the same records as the rope launch's,
  /// so the same q_lat), instead of after the rope launch on its records. Several rows need q's token stride
  /// to be whole heads (q_token_stride % (P + R) == 0: the DeepSeek projection row of q | latent | k_pe is).
  bool start_query(int il, int n_rows, const float* q, int64_t q_token_stride, cudaStream_t stream) override {
    static const int max_rows = latte::detail::env_int("LATTE_MLA_UK_BESIDE_ROPE", 1);
    const DeviceLayer& w = layer(il);
    const int N = c_.n_head, L = c_.kv_lora_rank, qk = c_.qk_nope_head_dim + c_.qk_rope_head_dim;
    if (n_rows < 1 || n_rows > max_rows || !reads_q_nope_records(w, n_rows) || q_token_stride % qk != 0) return false;
    __nv_bfloat16* q_lat_bf16 = grow_scratch(q_lat_bf16_, static_cast<size_t>(n_rows) * N * L, "mla q_lat bf16");
    const HeadGroups::Groups groups = groups_.get(n_rows, N, static_cast<int>(q_token_stride / qk));
    if (!side_) side_.emplace();  // made on first use, on the device the step runs on
    if (!fork_) fork_.emplace(cudaEventDisableTiming);
    if (!join_) join_.emplace(cudaEventDisableTiming);
    fork_->record(stream);
    LATTE_CUDA_CHECK(cudaStreamWaitEvent(side_->get(), fork_->get(), 0));
    per_head_gemv(w.k_b, L, groups, q, qk, nullptr, L, side_->get(), q_lat_bf16, nullptr, true);
    join_->record(side_->get());
    uk_started_ = {il, n_rows};
    return true;
  }

  /// Whether the decode kernel may copy its first tiles' earlier rows before the kernels before it end
  /// (MlaDecodeParams::earlier_rows_ready; LATTE_MLA_EARLY_TILES): one new token per sequence, so that every row
  /// but a batch entry's last was written by an earlier step; dense attention (the DSA selection is this step's).
  static bool early_tiles(const AttentionInput& in) {
    static const bool on = latte::detail::env_flag("LATTE_MLA_EARLY_TILES", true);
    return on && in.selection == nullptr && !in.sequences.empty() &&
           std::all_of(in.sequences.begin(), in.sequences.end(),
                       [](const AttentionSequence& s) { return s.n_tokens == 1; });
  }

  QueryTargets query_targets(int il, int n_rows, const DeviceStep& step) override {
    if (n_rows > (Linear::direct_bf16() ? kTargetRows : kTargetRowsBefore)) return {};
    QueryTargets q;
    if (cache_from_rope()) {
      q.cache = latent_rows(in_layer_table(step, il), step, n_rows);
      q.cache_batch = step.rows;
    }
    const size_t heads = static_cast<size_t>(n_rows) * c_.n_head;
    if (reads_q_nope_records(layer(il), n_rows) && uk_started_ != std::pair{il, n_rows}) {
      q.records_stride = x_int8_record_bytes(c_.qk_nope_head_dim);
      q.nope_records = grow_scratch(q_nope_q_, heads * static_cast<size_t>(q.records_stride), "mla q_nope int8");
    }
    q.rope_bf16 = grow_scratch(q_rope_bf16_, heads * c_.qk_rope_head_dim, "mla q_rope bf16");
    if (blas_rows_from_kernels(n_rows)) {
      // the batched cuBLAS W_UK reads q_nope as bf16: the rope launch writes it, no conversion launch
      q.nope_bf16 = grow_scratch(q_nope_bf16_, heads * c_.qk_nope_head_dim, "mla q_nope bf16");
    }
    targets_for_ = {il, n_rows};
    return q;
  }

  void forward_device(const AttentionInput& in, const DeviceStep& step) override {
    const int T = in.n_rows, N = c_.n_head, L = c_.kv_lora_rank, R = c_.qk_rope_head_dim, P = c_.qk_nope_head_dim;
    const int V = c_.v_head_dim, qk = P + R, row = L + R;
    const int table = in_layer_table(step, in.layer);
    const DeviceLayer& w = layer(in.layer);
    auto stream = static_cast<cudaStream_t>(in.stream);
    const size_t TN = static_cast<size_t>(T) * N;
    const int64_t* pages = step.attn_pages + static_cast<size_t>(table) * T;
    const std::byte* base = step.attn_base[table];
    // the rope launch wrote q_nope's records (where this forward reads them), q_pe's bf16 into
    // q_nope_q_ and q_rope_bf16_, sized for these rows, and (cache_from_rope) the rows' latent and k_pe
    // into the cache, when the caller took query_targets for them
    const bool given = targets_for_ == std::pair{in.layer, T};
    targets_for_ = {-1, 0};
    const bool uk_done = uk_started_ == std::pair{in.layer, T};  // start_query ran W_UK (join_ before the decode)
    uk_started_ = {-1, 0};
    __nv_bfloat16* const out_bf16 = take_output_bf16();  // filled on every path below

    // Cache rows: c (L) then k_pe (R), bf16.
    if (!given || !cache_from_rope()) {
      run_kv_cache_append({.src = in.latent,
                           .src_token_stride = L,
                           .n_tokens = T,
                           .dim = L,
                           .dst = latent_rows(table, step, T),
                           .batch_index = step.rows,
                           .positions = step.positions,
                           .tail_src = in.k_rope,
                           .tail_src_token_stride = R,
                           .tail_dim = R,
                           .tail_dst_offset = L},
                          stream);
    }

    if (decompressed_prefill(in)) {
      if (uk_done) LATTE_CUDA_CHECK(cudaStreamWaitEvent(stream, join_->get(), 0));  // (not taken at one row)
      prefill_decompressed(in, w, stream);
      convert_output_bf16(in, static_cast<int64_t>(N) * V, out_bf16);
      return;
    }

    // q_lat[t, h] = W_UK_h^T q_nope[t, h] (all heads, one launch), written as bf16 for the kernel.
    __nv_bfloat16* q_lat_bf16 = grow_scratch(q_lat_bf16_, TN * L, "mla q_lat bf16");
    __nv_bfloat16* q_rope_bf16 = grow_scratch(q_rope_bf16_, TN * R, "mla q_rope bf16");
    const HeadGroups::Groups groups = groups_.get(T, N);
    // decode: each token's and head's q_nope as a split-int8 record for the int8 GEMV (W_UK's rows are
    // short), and q_pe as bf16: written by the rope launch when the caller took query_targets, else here
    uint8_t* q_nope_q = nullptr;
    if (reads_q_nope_records(w, T) && !uk_done) {
      if (given) {
        q_nope_q = q_nope_q_.data();
      } else {
        q_nope_q = grow_scratch(q_nope_q_, TN * static_cast<size_t>(x_int8_record_bytes(P)), "mla q_nope int8");
        quantize_x_int8({.x = in.q,
                         .x_stride = qk,
                         .rows = static_cast<int>(TN),
                         .k = P,
                         .out = q_nope_q,
                         .out_stride = x_int8_record_bytes(P)},
                        stream);
      }
    }
    keep_heads_f32(stream);
    const bool heads_blas = heads_through_blas(T);  // never with the DSA indexer (see there)
    const bool f32 = heads_f32(T);
    float* o_lat = nullptr;               // the attention output: fp32 for the per-head GEMV and the
    __nv_bfloat16* o_lat_bf16 = nullptr;  // fp32 cuBLAS product, or bf16 for the bf16 one
    if (f32) {
      // q_lat from the fp32 q_nope and W_UK, summed in fp32, as bf16 for the kernel
      // (not where start_query ran W_UK already: a first step that made the copies in between)
      if (!uk_done)
        heads_product_f32(w.k_b, L, in.q, static_cast<int64_t>(N) * qk, qk, P, T, nullptr, q_lat_bf16, L, stream);
      o_lat = grow_scratch(o_lat_, TN * L, "mla o_lat");
    } else if (heads_blas) {
      // many rows: q_nope as bf16 and one strided-batched product with every head's W_UK (a batch entry per
      // head, bf16 out), where the per-head GEMV re-read each head's matrix for every group of 8 tokens
      __nv_bfloat16* q_nope_bf16 = grow_scratch(q_nope_bf16_, TN * P, "mla q_nope bf16");
      // query_targets handed out these rows to the rope launch when it saw this branch coming: heads_f32 only turns
      // true between the two (keep_heads_f32), so false here means it was false there too
      if (!given || !Linear::direct_bf16()) {
        convert_to_bf16(in.q, qk, q_nope_bf16, P, static_cast<int>(TN), P, stream);
      }
      heads_product_bf16(w.k_b, L, q_nope_bf16, P, T, q_lat_bf16, nullptr, L, stream);
      o_lat_bf16 = grow_scratch(o_lat_bf16_, TN * L, "mla o_lat bf16");
    } else {
      if (!uk_done) {
        per_head_gemv(w.k_b, L, groups, in.q, qk, nullptr, L, stream, q_lat_bf16, q_nope_q);  // bf16 for the kernel
      }
      o_lat = grow_scratch(o_lat_, TN * L, "mla o_lat");
    }
    if (!given) convert_to_bf16(in.q + P, qk, q_rope_bf16, R, static_cast<int>(TN), R, stream);

    MlaDecodeParams p{.q_latent = q_lat_bf16,
                      .q_latent_token_stride = static_cast<int64_t>(N) * L,
                      .q_latent_head_stride = L,
                      .q_rope = q_rope_bf16,
                      .q_rope_token_stride = static_cast<int64_t>(N) * R,
                      .q_rope_head_stride = R,
                      .cache = row_pages<const __nv_bfloat16>(base, pages, row, 0),
                      .kv_lens = step.kv_lens,
                      .indices = in.selection,
                      .index_stride = in.selection ? in.selection_width : 0,
                      .top_k = in.selection ? in.selection_width : 0,
                      .batch = T,
                      .q_len = 1,
                      .n_heads = N,
                      .max_kv_len = step.max_kv_len,
                      .scale = in.scale,
                      .out_type = o_lat_bf16 ? AttnOutputType::bf16 : AttnOutputType::f32,
                      .out = o_lat_bf16 ? static_cast<void*>(o_lat_bf16) : static_cast<void*>(o_lat),
                      .earlier_rows_ready = early_tiles(in)};
    const MlaDecodePlan plan = plan_mla_decode(p);
    if (uk_done) LATTE_CUDA_CHECK(cudaStreamWaitEvent(stream, join_->get(), 0));
    void* ws =
        plan.workspace_bytes ? grow_scratch(workspace_, plan.workspace_bytes, "mla split-KV workspace") : nullptr;
    run_mla_decode(p, plan, ws, plan.workspace_bytes, stream);

    // out[t, h] = W_UV_h o_lat[t, h].
    if (f32) {
      heads_product_f32(w.v_b, V, o_lat, static_cast<int64_t>(N) * L, L, L, T, in.out, out_bf16, V, stream);
      return;
    }
    if (heads_blas) {
      if (out_bf16 != nullptr && !output_f32_too() && Linear::direct_bf16()) {
        heads_product_bf16(w.v_b, V, o_lat_bf16, L, T, out_bf16, nullptr, V, stream);  // the output as bf16 only
        return;
      }
      heads_product_bf16(w.v_b, V, o_lat_bf16, L, T, nullptr, in.out, V, stream);
    } else {
      per_head_gemv(w.v_b, V, groups, o_lat, L, in.out, V, stream, nullptr, nullptr, uv_quantizes(w, T));
    }
    convert_output_bf16(in, static_cast<int64_t>(N) * V, out_bf16);
  }

  /// Steps whose heads_f32 products run as heads_product launches write the attention output as bf16 in the W_UV
  /// launch (a caller's bf16 target, set_output_bf16).
  [[nodiscard]] bool writes_output_bf16(int /*il*/, int n_rows) const override {
    return (heads_f32(n_rows) && heads_kernel(n_rows, c_.kv_lora_rank)) || blas_rows_from_kernels(n_rows);
  }

 private:
  /// Dense prefill chunks of one sequence of at least this many tokens run decompressed.
  static constexpr int kMinDecompressedChunk = 16;
  /// From this many cached rows on, the decompression runs through cuBLAS (below: the fused GEMM).
  static constexpr int kBlasMinCacheRows = 128;

  /// Whether the absorbed path of T rows runs W_UK as the split-int8 GEMV over q_nope records (below the
  /// cuBLAS rows; the head groups hold at most 8 tokens each; the fp32 GEMV took 229 us per layer at 128
  /// rows on an H200).
  [[nodiscard]] bool reads_q_nope_records(const DeviceLayer& w, int T) const {
    return !heads_through_blas(T) && gemv_reads_x_int8(w.k_b.type, c_.qk_nope_head_dim, std::min(T, gemv_max_tokens));
  }

  /// Whether the per-head W_UV GEMV of a one-row step quantizes the attention output into split-int8 records
  /// in its blocks (GemvParams::x_quantize: integer products) rather than reading it as fp32
  /// (LATTE_MLA_UV_INT8=0: always fp32). Measured on an H200 (BENCHMARKS.md, eleventh round): tg64 +1-3%; at
  /// 8 rows the 16 head groups' blocks each quantizing 8 rows took 27 us against the fp32 GEMV's 12.
  [[nodiscard]] bool uv_quantizes(const DeviceLayer& w, int T) const {
    static const bool on = latte::detail::env_flag("LATTE_MLA_UV_INT8", true);
    return on && T == 1 && gemv_reads_x_int8(w.v_b.type, c_.kv_lora_rank, 1);
  }

  /// Whether a decode step of T rows multiplies the heads' queries by W_UK and their attention outputs by
  /// W_UV as cuBLAS products (below, per-head GEMVs that read each head's matrix once per group of 8 tokens:
  /// 20 + 22 us per layer at 32 rows on an H200): from Linear's row count (LATTE_BLAS_MIN_ROWS) as bf16
  /// products, each dequantizing its matrix in every step, and below it as fp32 products where heads_f32 says so.
  /// LATTE_MLA_HEADS_BLAS=0: always the GEMVs, to compare. Models with the DSA indexer keep the GEMVs: the
  /// bf16 roundings of q_nope, the weights and the attention output move the next layers' index scores
  /// enough to flip top-k positions on near-ties (on an H200 with it on, the glm-dsa truncated-session test
  /// went from passing to a 0.023 median logits error, and the glm-5-sparse oracle to 2 of 24 positions
  /// just over its 0.02 bound; every dense model's oracle and session tests stayed within theirs).
  [[nodiscard]] bool heads_through_blas(int T) const {
    return T >= Linear::blas_min_rows() ? heads_blas_allowed() : heads_f32(T);
  }
  /// Whether a step of T rows takes the batched bf16 cuBLAS W_UK / W_UV with their bf16 rows written by the kernels
  /// around them (Linear::direct_bf16): q_nope by the rope launch, the attention output by W_UV itself.
  [[nodiscard]] bool blas_rows_from_kernels(int T) const {
    return Linear::direct_bf16() && heads_through_blas(T) && !heads_f32(T);
  }

  /// Whether this model's W_UK / W_UV may run as cuBLAS products at all (heads_through_blas).
  [[nodiscard]] bool heads_blas_allowed() const {
    static const bool on = latte::detail::env_flag("LATTE_MLA_HEADS_BLAS", true);
    return on && !c_.has_indexer();
  }

  /// Fewest rows of heads_f32's products (LATTE_MLA_HEADS_BLAS_ROWS, default 2; 1: one-row steps too, in place of
  /// the split-int8 GEMVs and W_UK beside the rope launch).
  static int heads_f32_rows() {
    static const int rows = std::max(1, latte::detail::env_int("LATTE_MLA_HEADS_BLAS_ROWS", 2));
    return rows;
  }

  /// Whether a decode step of T rows below Linear's row count, from LATTE_MLA_HEADS_BLAS_ROWS (default 2), runs
  /// W_UK and W_UV as fp32 cuBLAS products over fp32 copies of the weights (heads_f32_ready): as exact as the
  /// reference, where the GEMVs read split-int8 records. Measured on an H100 (BENCHMARKS.md, twenty-third round):
  /// x4 +2.5%, x8 +3.1%, x16 +1.7%; at 32 and 128 rows they lost 1.5% to the bf16 products (and TF32 inputs tied).
  [[nodiscard]] bool heads_f32(int T) const {
    return heads_blas_allowed() && T >= heads_f32_rows() && T < Linear::blas_min_rows() && heads_f32_ready();
  }

  /// Whether every layer's W_UK and W_UV of the bound weights have fp32 copies (keep_heads_f32).
  [[nodiscard]] bool heads_f32_ready() const { return weights_ && weights_->heads_f32_ready(); }

  /// Has the bound model make fp32 copies of every layer's W_UK and W_UV (DeviceWeights::make_heads_f32, shared by
  /// its sessions), where all of them take at most LATTE_MLA_HEADS_F32_MB MB (default 1024; 0: never) and half the
  /// free device memory: DeepSeek-V2-Lite 8 MB a layer, 216 MB in all; DeepSeek-V3 64 MB a layer over the
  /// tensor-parallel ranks. Not where heads_f32 would never take them (no cuBLAS products, or its rows start at
  /// Linear's row count), and never inside a graph capture (a step's first run of its shape is not captured). Once
  /// made, heads_f32_ready only turns true between a step's query_targets and its forward_device: the rope launch
  /// then wrote q_nope records that nothing reads, never the other way round.
  void keep_heads_f32(cudaStream_t stream) {
    static const int64_t budget_mb = latte::detail::env_int("LATTE_MLA_HEADS_F32_MB", 1024);
    if (!weights_ || heads_f32_ready() || budget_mb == 0 || !heads_blas_allowed() ||
        heads_f32_rows() >= Linear::blas_min_rows()) {
      return;
    }
    if (!stream_is_capturing(stream)) weights_->make_heads_f32(budget_mb * 1024 * 1024, stream);
  }

  /// Whether heads_product_f32 of T rows of k values runs as one heads_product launch (by default, measured with the
  /// norm's bf16 rows and routing in the sort: +2.2% at 8 rows on an H100, BENCHMARKS.md; LATTE_MLA_HEADS_KERNEL=0:
  /// the cuBLAS product, then a conversion launch for each bf16 output).
  static bool heads_kernel(int T, int64_t k) {
    static const bool on = latte::detail::env_flag("LATTE_MLA_HEADS_KERNEL", true);
    return on && heads_product_takes(T, static_cast<int>(k));
  }

  /// For every head h: C_h[T, n] = A_h[T, k] W_h^T, fp32 products and sums, with W_h the rows [h n, (h + 1) n) of
  /// `stack`'s fp32 copy, A_h at a + h a_head_stride (token stride a_token_stride), C_h at h c_head_stride of each
  /// output row (row stride N c_head_stride): into c (fp32), c_bf16 (each sum rounded once) or both. One
  /// heads_product launch where it takes the shape, else the batched fp32 cuBLAS product and a conversion.
  void heads_product_f32(const DeviceMatrix& stack, int64_t n, const float* a, int64_t a_token_stride,
                         int64_t a_head_stride, int64_t k, int T, float* c, __nv_bfloat16* c_bf16,
                         int64_t c_head_stride, cudaStream_t stream) {
    const int64_t ldw = bf16_weight_stride(stack.k);
    const int64_t ldc = c_.n_head * c_head_stride;
    const HeadsProductParams hp{.a = a,
                                .lda = a_token_stride,
                                .stride_a = a_head_stride,
                                .w = weights_->heads_f32(stack),
                                .ldw = ldw,
                                .stride_w = n * ldw,
                                .c = c,
                                .c_bf16 = c_bf16,
                                .ldc = ldc,
                                .stride_c = c_head_stride,
                                .m = T,
                                .n = static_cast<int>(n),
                                .k = static_cast<int>(k),
                                .batch = c_.n_head};
    if (heads_kernel(T, k) && heads_product_takes(hp)) {
      heads_product(hp, stream);
    } else {
      float* scratch =
          c != nullptr ? nullptr : grow_scratch(heads_f32_out_, static_cast<size_t>(T) * ldc, "mla heads fp32");
      heads_product_via_blas(blas(), hp, scratch, stream);
    }
  }

  /// For every head h: C_h[T, n] = A_h[T, k] W_h^T with W_h the rows [h n, (h + 1) n) of `stack` (k values
  /// each) as bf16, A_h at a + h k (token stride N k), C_h at h n (token stride N n) of c (bf16) or c_f32.
  void heads_product_bf16(const DeviceMatrix& stack, int64_t n, const __nv_bfloat16* a, int64_t k, int T,
                          __nv_bfloat16* c, float* c_f32, int64_t c_head_stride, cudaStream_t stream) {
    const int N = c_.n_head;
    const int64_t ldw = bf16_weight_stride(stack.k);
    gemm_bf16_batched(blas(),
                      {.a = a,
                       .lda = N * k,
                       .stride_a = k,
                       .w = weight_bf16(stack, stream),
                       .ldw = ldw,
                       .stride_w = n * ldw,
                       .c = c,
                       .c_f32 = c_f32,
                       .ldc = N * c_head_stride,
                       .stride_c = c_head_stride,
                       .m = T,
                       .n = static_cast<int>(n),
                       .k = static_cast<int>(k),
                       .batch = N},
                      stream);
  }

  /// `m` as bf16 rows bf16_weight_stride(m.k) apart, dequantized on `stream` into the one weight scratch
  /// (each copy is read by the products enqueued after it and before the next copy).
  const __nv_bfloat16* weight_bf16(const DeviceMatrix& m, cudaStream_t stream) {
    // the model's own copy where it made them (CudaForward::keep_dense_copies): the same values, not dequantized again
    if (const __nv_bfloat16* copy = weights_ ? weights_->dense_bf16(m) : nullptr) return copy;
    const size_t elems = static_cast<size_t>(m.rows) * static_cast<size_t>(bf16_weight_stride(m.k));
    __nv_bfloat16* out = grow_scratch(weight_bf16_, elems, "mla weight bf16");
    dequantize_weight_bf16({.type = m.type,
                            .weight = m.data,
                            .weight_bytes = m.bytes(),
                            .n_rows = static_cast<int>(m.rows),
                            .k = static_cast<int>(m.k)},
                           out, elems, stream);
    return out;
  }

  BlasHandle& blas() {
    if (!blas_) blas_ = std::make_unique<BlasHandle>();
    return *blas_;
  }

  [[nodiscard]] bool decompressed_prefill(const AttentionInput& in) const {
    return !absorbed_only_ && in.selection == nullptr && in.sequences.size() == 1 &&
           in.sequences[0].n_tokens >= kMinDecompressedChunk && in.sequences[0].cache != nullptr;
  }

  /// Decompressed attention over the latent cache for one sequence's chunk: per head K = [W_UK c | k_pe]
  /// and V = W_UV c of every visible position (one GEMM over the cache rows with attn_kv_b), then
  /// flash-attention prefill. Costs 2 n_kv L N (P + V) FLOPs per layer for the decompression, which
  /// a chunk of T queries repays against the absorbed kernel's 2 T n_kv N (L + R + L).
  void prefill_decompressed(const AttentionInput& in, const DeviceLayer& w, cudaStream_t stream) {
    const AttentionSequence& s = in.sequences[0];
    const int N = c_.n_head, L = c_.kv_lora_rank, R = c_.qk_rope_head_dim, P = c_.qk_nope_head_dim;
    const int V = c_.v_head_dim, qk = P + R, row = L + R, n_kv = s.n_past + s.n_tokens;
    const int64_t kv_width = static_cast<int64_t>(N) * (P + V);
    const auto* cache = reinterpret_cast<const __nv_bfloat16*>(s.cache);

    // K [n_kv, N, P+R] and V [n_kv, N, V] in bf16: k_nope and v = c attn_kv_b^T with the cache rows (bf16,
    // 576 apart) as the A operand, k_pe copied from the cache rows.
    const int32_t* positions = iota(n_kv);
    __nv_bfloat16* k = grow_scratch(k_, static_cast<size_t>(n_kv) * N * qk, "mla decompressed K");
    __nv_bfloat16* v = grow_scratch(v_, static_cast<size_t>(n_kv) * N * V, "mla decompressed V");
    const PagedRows<__nv_bfloat16> k_rows{.data = k, .token_stride = static_cast<int64_t>(N) * qk, .head_stride = qk};
    const PagedRows<__nv_bfloat16> v_rows{.data = v, .token_stride = static_cast<int64_t>(N) * V, .head_stride = V};
    const bool fused = gemm_quant_supports(w.kv_b.type) && reinterpret_cast<uintptr_t>(w.kv_b.data) % 16 == 0 &&
                       n_kv < kBlasMinCacheRows;
    if (fused) {
      // Short caches: the fused quantized GEMM into fp32 [n_kv, N(P+V)], then into K and V.
      float* kv = grow_scratch(kv_, static_cast<size_t>(n_kv) * kv_width, "mla decompressed kv");
      gemm_quant({.type = w.kv_b.type,
                  .weight = w.kv_b.data,
                  .weight_bytes = w.kv_b.bytes(),
                  .n_rows = static_cast<int>(w.kv_b.rows),
                  .k = static_cast<int>(w.kv_b.k),
                  .a = cache,
                  .lda = row,
                  .c = kv,
                  .ldc = kv_width,
                  .m = n_kv},
                 stream);
      for (const auto& [offset, dim, dst] : {std::tuple{0, P, k_rows}, std::tuple{P, V, v_rows}}) {
        run_kv_cache_append({.src = kv + offset,
                             .src_token_stride = kv_width,
                             .src_head_stride = P + V,
                             .n_tokens = n_kv,
                             .n_heads = N,
                             .dim = dim,
                             .dst = dst,
                             .positions = positions},
                            stream);
      }
    } else {
      // Long caches: a bf16 copy of attn_kv_b, then one batched cuBLAS product per half (a batch entry per
      // head) writing bf16 straight into K and V: no fp32 [n_kv, N(P+V)] round trip (4 N (P+V) bytes per
      // cached row written and read again).
      const int64_t ldw = bf16_weight_stride(w.kv_b.k);
      const __nv_bfloat16* w_bf16 = weight_bf16(w.kv_b, stream);
      for (const auto& [offset, dim, dst] : {std::tuple{0, P, k_rows}, std::tuple{P, V, v_rows}}) {
        gemm_bf16_batched(blas(),
                          {.a = cache,
                           .lda = row,
                           .w = w_bf16 + offset * ldw,
                           .ldw = ldw,
                           .stride_w = (P + V) * ldw,
                           .c = dst.data,
                           .ldc = dst.token_stride,
                           .stride_c = dst.head_stride,
                           .m = n_kv,
                           .n = dim,
                           .k = L,
                           .batch = N},
                          stream);
      }
    }
    run_kv_cache_append({.src = cache + L,
                         .src_type = AppendSourceType::bf16,
                         .src_token_stride = row,
                         .src_head_stride = 0,
                         .n_tokens = n_kv,
                         .n_heads = N,
                         .dim = R,
                         .dst = k_rows,
                         .dst_offset = P,
                         .positions = positions},
                        stream);

    __nv_bfloat16* q = grow_scratch(q_bf16_, static_cast<size_t>(s.n_tokens) * N * qk, "mla prefill q bf16");
    convert_to_bf16(in.q + static_cast<size_t>(s.first_row) * N * qk, static_cast<int64_t>(N) * qk, q,
                    static_cast<int64_t>(N) * qk, s.n_tokens, N * qk, stream);
    flash_prefill_split({.q = q,
                         .q_token_stride = static_cast<int64_t>(N) * qk,
                         .q_head_stride = qk,
                         .k_cache = {.data = k, .token_stride = static_cast<int64_t>(N) * qk, .head_stride = qk},
                         .v_cache = {.data = v, .token_stride = static_cast<int64_t>(N) * V, .head_stride = V},
                         .n_queries = s.n_tokens,
                         .pos0 = s.n_past,
                         .n_heads = N,
                         .head_dim_qk = qk,
                         .head_dim_v = V,
                         .scale = in.scale,
                         .out_type = AttnOutputType::f32,
                         .out = in.out + static_cast<size_t>(s.first_row) * N * V},
                        prefill_workspace_, stream);
  }

  /// Device [n] = 0, 1, ..., n - 1.
  const int32_t* iota(int n) {
    if (static_cast<int>(iota_.size()) < n) {
      std::vector<int32_t> host(static_cast<size_t>(std::max(n, 1024)));
      for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<int32_t>(i);
      iota_ = DeviceBuffer<int32_t>(host.size(), "positions 0..n-1");
      bump_scratch_generation();
      LATTE_CUDA_CHECK(cudaMemcpy(iota_.data(), host.data(), host.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    }
    return iota_.data();
  }

  ModelConfig c_;
  bool absorbed_only_ = latte::detail::env_choice("LATTE_MLA_PREFILL", "auto") == "absorbed";
  std::unique_ptr<BlasHandle> blas_;
  DeviceBuffer<float> kv_;
  DeviceBuffer<__nv_bfloat16> k_, v_, q_bf16_, weight_bf16_;
  DeviceBuffer<int32_t> iota_;
  HeadGroups groups_;
  DeviceBuffer<float> o_lat_;
  DeviceBuffer<float> prefill_workspace_;  // flash prefill's split partial results
  DeviceBuffer<__nv_bfloat16> q_lat_bf16_, q_rope_bf16_;
  DeviceBuffer<__nv_bfloat16> q_nope_bf16_, o_lat_bf16_;  // decode steps of many rows
  DeviceBuffer<float> heads_f32_out_;  // heads_product_f32 on cuBLAS with only a bf16 output: its fp32 sums
  DeviceBuffer<uint8_t> q_nope_q_;                        // decode: q_nope per token and head as split-int8 records
  /// The page table of layer il among the step's (one table: that layer's, whatever il is).
  static int in_layer_table(const DeviceStep& step, int il) { return step.n_layer == 1 ? 0 : il; }
  /// The latent cache rows c | k_pe of the step's n_rows rows in page table `table`.
  PagedRows<__nv_bfloat16> latent_rows(int table, const DeviceStep& step, int n_rows) const {
    return row_pages<__nv_bfloat16>(step.attn_base[table], step.attn_pages + static_cast<size_t>(table) * n_rows,
                                    c_.kv_lora_rank + c_.qk_rope_head_dim, 0);
  }
  /// Whether query_targets hands out the cache rows (LATTE_ROPE_WRITES_CACHE=0: the forward appends).
  static bool cache_from_rope() {
    static const bool on = latte::detail::env_flag("LATTE_ROPE_WRITES_CACHE", true);
    return on;
  }

  // query_targets: up to this many rows; with Linear::direct_bf16 (the batched W_UV's output as bf16 only, q_nope's
  // bf16 rows from the rope launch) up to kTargetRows, else kTargetRowsBefore
  static constexpr int kTargetRows = 128;
  static constexpr int kTargetRowsBefore = 64;
  std::pair<int, int> targets_for_{-1, 0};  // (layer, rows) whose query_targets were handed out
  std::pair<int, int> uk_started_{-1, 0};   // (layer, rows) whose W_UK start_query launched
  std::optional<Stream> side_;              // start_query's stream (fork_ / join_ order it)
  std::optional<Event> fork_, join_;
  DeviceBuffer<std::byte> workspace_;
};

// ---- standard ---------------------------------------------------------------------------------

class CudaStandardBackend final : public CudaAttentionBackend {
 public:
  explicit CudaStandardBackend(const ModelConfig& c) : c_(c) {}
  [[nodiscard]] std::string_view name() const noexcept override { return "standard"; }
  [[nodiscard]] KvLayout kv_layout() const override {
    return {.values_per_token = c_.n_head * (c_.qk_head_dim() + c_.v_head_dim), .element_type = GgmlType::bf16};
  }

  void forward_device(const AttentionInput& in, const DeviceStep& step) override {
    const int T = in.n_rows, N = c_.n_head, L = c_.kv_lora_rank, R = c_.qk_rope_head_dim, P = c_.qk_nope_head_dim;
    const int V = c_.v_head_dim, qk = P + R;
    const int64_t row = static_cast<int64_t>(N) * (qk + V);  // K [N, qk] then V [N, V]
    const int table = step.n_layer == 1 ? 0 : in.layer;
    const DeviceLayer& w = layer(in.layer);
    auto stream = static_cast<cudaStream_t>(in.stream);
    const int64_t* pages = step.attn_pages + static_cast<size_t>(table) * T;
    const std::byte* base = step.attn_base[table];
    const int64_t v_offset = static_cast<int64_t>(N) * qk;
    if (take_output_bf16() != nullptr) {
      throw Error(ErrorCode::internal,
                  "standard (CUDA): a bf16 output target, which writes_output_bf16 never asks for");
    }

    // [k_nope | v] per head = attn_kv_b c for the new rows, then into the cache with the shared k_pe.
    float* kv = grow_scratch(kv_, static_cast<size_t>(T) * N * (P + V), "standard decompressed kv");
    linear_.use_copies(weights_.get());
    linear_(w.kv_b, {.x = in.latent, .x_stride = L, .rows = T, .y = kv, .y_stride = static_cast<int64_t>(N) * (P + V)},
            stream);
    const PagedRows<__nv_bfloat16> k_rows = row_pages<__nv_bfloat16>(base, pages, row, qk);
    const PagedRows<__nv_bfloat16> v_rows = row_pages<__nv_bfloat16>(base, pages, row, V, v_offset);
    run_kv_cache_append({.src = kv,
                         .src_token_stride = static_cast<int64_t>(N) * (P + V),
                         .src_head_stride = P + V,
                         .n_tokens = T,
                         .n_heads = N,
                         .dim = P,
                         .dst = k_rows,
                         .batch_index = step.rows,
                         .positions = step.positions},
                        stream);
    run_kv_cache_append({.src = in.k_rope,
                         .src_token_stride = R,
                         .src_head_stride = 0,
                         .n_tokens = T,
                         .n_heads = N,
                         .dim = R,
                         .dst = k_rows,
                         .dst_offset = P,
                         .batch_index = step.rows,
                         .positions = step.positions},
                        stream);
    run_kv_cache_append({.src = kv + P,
                         .src_token_stride = static_cast<int64_t>(N) * (P + V),
                         .src_head_stride = P + V,
                         .n_tokens = T,
                         .n_heads = N,
                         .dim = V,
                         .dst = v_rows,
                         .batch_index = step.rows,
                         .positions = step.positions},
                        stream);

    __nv_bfloat16* q = grow_scratch(q_bf16_, static_cast<size_t>(T) * N * qk, "standard q bf16");
    convert_to_bf16(in.q, static_cast<int64_t>(N) * qk, q, static_cast<int64_t>(N) * qk, T, N * qk, stream);
    const PagedRows<const __nv_bfloat16> k_read = row_pages<const __nv_bfloat16>(base, pages, row, qk);
    const PagedRows<const __nv_bfloat16> v_read = row_pages<const __nv_bfloat16>(base, pages, row, V, v_offset);

    // Dense chunks of several tokens: flash-attention prefill per sequence.
    bool prefill = in.selection == nullptr;
    for (const AttentionSequence& s : in.sequences) prefill = prefill && s.n_tokens > 1;
    if (prefill) {
      for (const AttentionSequence& s : in.sequences) {
        flash_prefill_split({.q = q + static_cast<size_t>(s.first_row) * N * qk,
                             .q_token_stride = static_cast<int64_t>(N) * qk,
                             .q_head_stride = qk,
                             .k_cache = k_read,
                             .v_cache = v_read,
                             .cache_batch = s.first_row,
                             .n_queries = s.n_tokens,
                             .pos0 = s.n_past,
                             .n_heads = N,
                             .head_dim_qk = qk,
                             .head_dim_v = V,
                             .scale = in.scale,
                             .out_type = AttnOutputType::f32,
                             .out = in.out + static_cast<size_t>(s.first_row) * N * V},
                            prefill_workspace_, stream);
      }
      return;
    }
    // Otherwise every row is one decode entry (dense or sparse), all in one launch.
    StandardDecodeParams p{.q = q,
                           .q_batch_stride = static_cast<int64_t>(N) * qk,
                           .q_head_stride = qk,
                           .k_cache = k_read,
                           .v_cache = v_read,
                           .kv_lens = step.kv_lens,
                           .indices = in.selection,
                           .index_stride = in.selection ? in.selection_width : 0,
                           .top_k = in.selection ? in.selection_width : 0,
                           .batch = T,
                           .n_heads = N,
                           .head_dim_qk = qk,
                           .head_dim_v = V,
                           .max_kv_len = step.max_kv_len,
                           .scale = in.scale,
                           .out_type = AttnOutputType::f32,
                           .out = in.out};
    const StandardDecodePlan plan = plan_standard_decode(p);
    void* ws =
        plan.workspace_bytes ? grow_scratch(workspace_, plan.workspace_bytes, "standard split-KV workspace") : nullptr;
    run_standard_decode(p, plan, ws, plan.workspace_bytes, stream);
  }

 private:
  ModelConfig c_;
  Linear linear_;
  DeviceBuffer<float> kv_;
  DeviceBuffer<__nv_bfloat16> q_bf16_;
  DeviceBuffer<float> prefill_workspace_;  // flash prefill's split partial results
  DeviceBuffer<std::byte> workspace_;
};

bool mla_dims(const ModelConfig& c) { return c.kv_lora_rank == kMlaLatentDim && c.qk_rope_head_dim == kMlaRopeDim; }
bool standard_dims(const ModelConfig& c) {
  return (c.qk_head_dim() == 192 && c.v_head_dim == 128) || (c.qk_head_dim() == 256 && c.v_head_dim == 256);
}

}  // namespace

AttentionBackendInfo cuda_mla_backend_info() {
  return {
      .name = "mla",
      .description = "weight-absorbed MLA: bf16 latent cache c|k_pe (576 per token per layer), split-KV decode; CUDA",
      .supports = [](const ModelConfig& c, Device d) { return d.is_cuda() && mla_dims(c); },
      .create = [](const ModelConfig& c, Device) -> std::unique_ptr<AttentionBackend> {
        return std::make_unique<CudaMlaBackend>(c);
      }};
}

AttentionBackendInfo cuda_standard_backend_info() {
  return {.name = "standard",
          .description = "decompressed attention: bf16 per-head K|V cache, flash prefill + split-KV decode; CUDA",
          .supports = [](const ModelConfig& c, Device d) { return d.is_cuda() && standard_dims(c); },
          .create = [](const ModelConfig& c, Device) -> std::unique_ptr<AttentionBackend> {
            return std::make_unique<CudaStandardBackend>(c);
          }};
}

}  // namespace latte::cuda
