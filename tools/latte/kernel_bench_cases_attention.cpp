// kernel-bench cases of the attention kernels:
//   mla decode        batch 64 x context 8192 at 16 heads (V2-Lite) and 128 heads (V3), batch 1 at 4096 / 16384
//   mla decode sparse GLM-5 shard (64 heads), top_k 2048 of 16384 positions
//   standard decode   the decompressed cache at depth 8192 (8.9x the MLA bytes at 16 heads, 71x at 128)
//   flash prefill     512 queries at depth 0 and 16384, DeepSeek dims (qk 192, v 128)
//   dsa index scores / dsa top-k  GLM-5 indexer for decode (64 x 16384) and a 512-token prefill chunk
// For a loaded model (`latte bench --kernels`): the same kernels at its head count, head dims and indexer.
// Bytes are the minimum each kernel must move (cache read once, outputs written once); FLOPs count only
// the useful (unmasked) work. Inputs are filled on the device with uniform values in [-1, 1).
#ifdef LATTE_WITH_CUDA

#include <latte/error.hpp>
#include <latte/quant.hpp>

#include <cuda_bf16.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cuda/check.hpp"
#include "cuda/dsa_indexer.hpp"
#include "cuda/flash_prefill.hpp"
#include "cuda/mla_decode.hpp"
#include "cuda/random_fill.hpp"
#include "cuda/standalone_params.hpp"
#include "cuda/standard_decode.hpp"
#include "kernel_bench.hpp"

namespace latte::cli {
namespace {

using bf16 = __nv_bfloat16;

bf16* random_bf16(BenchContext& ctx, size_t count) {
  auto* p = static_cast<bf16*>(ctx.device_alloc(count * sizeof(bf16)));
  cuda::run_fill_uniform_bf16(p, count, -1.0f, 1.0f, ctx.rng(), nullptr);
  return p;
}

int32_t* device_ints(BenchContext& ctx, const std::vector<int32_t>& host) {
  auto* p = static_cast<int32_t*>(ctx.device_alloc(host.size() * sizeof(int32_t)));
  LATTE_CUDA_CHECK(cudaMemcpy(p, host.data(), host.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  return p;
}

/// Fills finish before the first timed launch (the bench stream does not wait for the null stream).
void finish_fills() { LATTE_CUDA_CHECK(cudaDeviceSynchronize()); }

std::string kv_shape(int batch, int context, int heads) {
  return "B=" + std::to_string(batch) + " ctx=" + std::to_string(context) + " N=" + std::to_string(heads);
}

KernelBenchCase mla_decode_case(int batch, int context, int heads, int top_k) {
  const bool sparse = top_k > 0;
  const double positions = sparse ? top_k : context;
  const double cache_bytes = static_cast<double>(batch) * positions * cuda::kMlaCacheRow * 2;
  const double io_bytes = static_cast<double>(batch) * heads * (cuda::kMlaCacheRow + cuda::kMlaLatentDim) * 2;
  return {.kernel = sparse ? "mla decode sparse" : "mla decode",
          .shape = kv_shape(batch, context, heads) + (sparse ? " top_k=" + std::to_string(top_k) : ""),
          .bytes = cache_bytes + io_bytes,
          .flops = 2.0 * batch * heads * positions * (cuda::kMlaCacheRow + cuda::kMlaLatentDim),
          .prepare = [=](BenchContext& ctx) -> BenchLauncher {
            const int64_t seq_elems = static_cast<int64_t>(context) * cuda::kMlaCacheRow;
            const int copies = ctx.rotating_copies(static_cast<int64_t>(batch) * seq_elems * 2);
            std::vector<const bf16*> caches;
            for (int i = 0; i < copies; ++i) caches.push_back(random_bf16(ctx, static_cast<size_t>(batch) * seq_elems));
            const bf16* q = random_bf16(ctx, static_cast<size_t>(batch) * heads * cuda::kMlaCacheRow);
            const int32_t* lens = device_ints(ctx, std::vector<int32_t>(batch, context));
            std::vector<int32_t> index_rows;
            if (sparse) {  // distinct positions spread over the context (7919 is prime)
              for (int b = 0; b < batch; ++b) {
                for (int i = 0; i < top_k; ++i)
                  index_rows.push_back(static_cast<int32_t>((int64_t{i} * 7919 + b) % context));
              }
            }
            const int32_t* indices = sparse ? device_ints(ctx, index_rows) : nullptr;
            // One query buffer of 576-element rows per head: q_latent, then q_rope.
            cuda::MlaDecodeParams p = cuda::mla_decode_params(
                {.batch = batch,
                 .n_heads = heads,
                 .capacity = context,
                 .scale = 0.0722f,  // 1/sqrt(192)
                 .out_type = cuda::AttnOutputType::bf16},
                {.q_latent = q,
                 .q_latent_head_stride = cuda::kMlaCacheRow,
                 .q_rope = q + cuda::kMlaLatentDim,
                 .q_rope_head_stride = cuda::kMlaCacheRow,
                 .cache = caches[0],
                 .kv_lens = lens,
                 .out = ctx.device_alloc(static_cast<size_t>(batch) * heads * cuda::kMlaLatentDim * 2)});
            p.indices = indices;
            p.index_stride = top_k;
            p.top_k = top_k;
            p.lse = static_cast<float*>(ctx.device_alloc(static_cast<size_t>(batch) * heads * 4));
            const cuda::MlaDecodePlan plan = cuda::plan_mla_decode(p);
            void* workspace = plan.workspace_bytes ? ctx.device_alloc(plan.workspace_bytes) : nullptr;
            finish_fills();
            return [=](cudaStream_t s, int rep) mutable {
              p.cache.data = caches[rep % caches.size()];
              cuda::run_mla_decode(p, plan, workspace, plan.workspace_bytes, s);
            };
          }};
}

KernelBenchCase standard_decode_case(int batch, int context, int heads, int kQk = 192, int kV = 128) {
  return {.kernel = "standard decode " + std::to_string(kQk) + "/" + std::to_string(kV),
          .shape = kv_shape(batch, context, heads),
          .bytes = static_cast<double>(batch) * context * heads * (kQk + kV) * 2 +
                   static_cast<double>(batch) * heads * (kQk + kV) * 2,
          .flops = 2.0 * batch * heads * context * (kQk + kV),
          .prepare = [=](BenchContext& ctx) -> BenchLauncher {
            const size_t tokens = static_cast<size_t>(batch) * context;
            const bf16* k = random_bf16(ctx, tokens * heads * kQk);  // [B, ctx, N, 192]
            const bf16* v = random_bf16(ctx, tokens * heads * kV);   // [B, ctx, N, 128]
            const bf16* q = random_bf16(ctx, static_cast<size_t>(batch) * heads * kQk);
            const int32_t* lens = device_ints(ctx, std::vector<int32_t>(batch, context));
            const cuda::StandardDecodeParams p =
                cuda::standard_decode_params({.batch = batch,
                                              .n_heads = heads,
                                              .capacity = context,
                                              .head_dim_qk = kQk,
                                              .head_dim_v = kV,
                                              .scale = 0.0722f,
                                              .out_type = cuda::AttnOutputType::bf16},
                                             {.q = q,
                                              .k = k,
                                              .v = v,
                                              .kv_lens = lens,
                                              .out = ctx.device_alloc(static_cast<size_t>(batch) * heads * kV * 2)});
            const cuda::StandardDecodePlan plan = cuda::plan_standard_decode(p);
            void* workspace = plan.workspace_bytes ? ctx.device_alloc(plan.workspace_bytes) : nullptr;
            finish_fills();
            return [=](cudaStream_t s, int) { cuda::run_standard_decode(p, plan, workspace, plan.workspace_bytes, s); };
          }};
}

KernelBenchCase flash_prefill_case(int queries, int pos0, int heads, int kQk = 192, int kV = 128) {
  const double keys = pos0 + queries;
  const double visible_pairs = static_cast<double>(queries) * pos0 + 0.5 * queries * (queries + 1.0);
  return {.kernel = "flash prefill " + std::to_string(kQk) + "/" + std::to_string(kV),
          .shape = "T=" + std::to_string(queries) + " pos0=" + std::to_string(pos0) + " N=" + std::to_string(heads),
          .bytes = keys * heads * (kQk + kV) * 2 + static_cast<double>(queries) * heads * (kQk + kV) * 2,
          .flops = 2.0 * heads * visible_pairs * (kQk + kV),
          .prepare = [=](BenchContext& ctx) -> BenchLauncher {
            const size_t n_keys = static_cast<size_t>(pos0) + queries;
            const int copies = ctx.rotating_copies(static_cast<int64_t>(n_keys * heads * (kQk + kV) * 2));
            std::vector<const bf16*> ks, vs;
            for (int i = 0; i < copies; ++i) {
              ks.push_back(random_bf16(ctx, n_keys * heads * kQk));
              vs.push_back(random_bf16(ctx, n_keys * heads * kV));
            }
            const bf16* q = random_bf16(ctx, static_cast<size_t>(queries) * heads * kQk);
            void* out = ctx.device_alloc(static_cast<size_t>(queries) * heads * kV * 2);
            const cuda::AttentionShape shape{.n_heads = heads,
                                             .capacity = static_cast<int>(n_keys),
                                             .head_dim_qk = kQk,
                                             .head_dim_v = kV,
                                             .scale = 0.0722f,
                                             .out_type = cuda::AttnOutputType::bf16};
            cuda::FlashPrefillParams p =
                cuda::flash_prefill_params(shape, queries, {.q = q, .k = ks[0], .v = vs[0], .out = out});
            // the keys split over several CTAs where the plan chooses to, as the model's prefill runs it
            p.workspace_bytes = cuda::flash_prefill_workspace_bytes(p);
            if (p.workspace_bytes > 0) p.workspace = ctx.device_alloc(p.workspace_bytes);
            finish_fills();
            return [=](cudaStream_t s, int rep) mutable {
              p.k_cache.data = ks[rep % ks.size()];
              p.v_cache.data = vs[rep % vs.size()];
              cuda::run_flash_prefill(p, s);
            };
          }};
}

/// Indexer scores (and, with `top_k` > 0, the top-k selection on them) for `batch` entries of
/// `q_len` query tokens, the last at position context - 1.
KernelBenchCase dsa_case(int batch, int q_len, int context, int top_k) {
  const bool select = top_k > 0;
  const double rows = static_cast<double>(batch) * q_len;
  const double visible = rows * (context - q_len) + static_cast<double>(batch) * 0.5 * q_len * (q_len + 1.0);
  return {.kernel = select ? "dsa top-k" : "dsa index scores",
          .shape = "B=" + std::to_string(batch) + " q_len=" + std::to_string(q_len) +
                   " ctx=" + std::to_string(context) + (select ? " k=" + std::to_string(top_k) : ""),
          .bytes = select ? visible * 4 + rows * top_k * 4
                          : static_cast<double>(batch) * context * cuda::kDsaIndexHeadDim * 2 + visible * 4,
          .flops = select ? 0.0 : 2.0 * visible * cuda::kDsaIndexHeads * cuda::kDsaIndexHeadDim,
          .prepare = [=](BenchContext& ctx) -> BenchLauncher {
            const size_t n_rows = static_cast<size_t>(batch) * q_len;
            cuda::DsaIndexScoresParams sp;
            sp.q = random_bf16(ctx, n_rows * cuda::kDsaIndexHeads * cuda::kDsaIndexHeadDim);
            sp.q_token_stride = int64_t{cuda::kDsaIndexHeads} * cuda::kDsaIndexHeadDim;
            sp.q_head_stride = cuda::kDsaIndexHeadDim;
            auto* w = static_cast<float*>(
                ctx.random_device(n_rows * cuda::kDsaIndexHeads * 4, static_cast<int>(GgmlType::f32)));
            sp.weights = w;
            sp.weights_token_stride = cuda::kDsaIndexHeads;
            sp.k_cache = {.data = random_bf16(ctx, static_cast<size_t>(batch) * context * cuda::kDsaIndexHeadDim),
                          .page_stride = int64_t{context} * cuda::kDsaIndexHeadDim,
                          .token_stride = cuda::kDsaIndexHeadDim};
            sp.kv_lens = device_ints(ctx, std::vector<int32_t>(batch, context));
            sp.batch = batch;
            sp.q_len = q_len;
            sp.max_kv_len = context;
            sp.scale = 0.0884f;  // 128^-0.5
            sp.scores = static_cast<float*>(ctx.device_alloc(n_rows * context * 4));
            sp.scores_stride = context;
            if (!select) {
              finish_fills();
              return [=](cudaStream_t s, int) { cuda::run_dsa_index_scores(sp, s); };
            }
            cuda::run_dsa_index_scores(sp, nullptr);
            cuda::DsaTopKParams tp{.scores = sp.scores,
                                   .scores_stride = sp.scores_stride,
                                   .kv_lens = sp.kv_lens,
                                   .batch = batch,
                                   .q_len = q_len,
                                   .top_k = top_k,
                                   .indices = static_cast<int32_t*>(ctx.device_alloc(n_rows * top_k * 4)),
                                   .index_stride = top_k};
            finish_fills();
            return [=](cudaStream_t s, int) { cuda::run_dsa_top_k(tp, s); };
          }};
}

std::vector<KernelBenchCase> attention_cases(const KernelBenchShapes& m) {
  if (!m.reference) {  // a loaded model: its head count and dims, its indexer if any
    const int qk = m.qk_nope + m.qk_rope, heads = m.n_head;
    std::vector<KernelBenchCase> cases;
    if (m.kv_lora == cuda::kMlaLatentDim && m.kv_lora + m.qk_rope == cuda::kMlaCacheRow) {
      for (auto [batch, context] : {std::pair{64, 8192}, std::pair{1, 4096}, std::pair{1, 16384}})
        cases.push_back(mla_decode_case(batch, context, heads, 0));
      if (m.indexer_top_k > 0) cases.push_back(mla_decode_case(64, 16384, heads, m.indexer_top_k));
    }
    cases.push_back(standard_decode_case(64, 8192, heads, qk, m.v_head));
    cases.push_back(flash_prefill_case(512, 0, heads, qk, m.v_head));
    cases.push_back(flash_prefill_case(512, 16384, heads, qk, m.v_head));
    if (m.indexer_heads == cuda::kDsaIndexHeads && m.indexer_top_k > 0) {
      for (int top_k : {0, m.indexer_top_k}) {
        cases.push_back(dsa_case(64, 1, 16384, top_k));
        cases.push_back(dsa_case(1, 512, 16896, top_k));
      }
    }
    return cases;
  }
  return {
      mla_decode_case(64, 8192, 16, 0),   mla_decode_case(64, 8192, 128, 0),    mla_decode_case(1, 4096, 16, 0),
      mla_decode_case(1, 16384, 16, 0),   mla_decode_case(1, 4096, 128, 0),     mla_decode_case(1, 16384, 128, 0),
      mla_decode_case(1, 8192, 128, 0),   mla_decode_case(64, 16384, 64, 2048), standard_decode_case(64, 8192, 16),
      standard_decode_case(1, 8192, 128), flash_prefill_case(512, 0, 16),       flash_prefill_case(512, 16384, 16),
      flash_prefill_case(512, 0, 128),    flash_prefill_case(512, 16384, 128),  dsa_case(64, 1, 16384, 0),
      dsa_case(64, 1, 16384, 2048),       dsa_case(1, 512, 16896, 0),           dsa_case(1, 512, 16896, 2048),
  };
}

const KernelBenchRegistration reg{attention_cases};

}  // namespace
}  // namespace latte::cli

#endif  // LATTE_WITH_CUDA
