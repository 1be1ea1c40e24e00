// kernel-bench cases of the MoE layer and the small per-token kernels at a model's shapes (by
// default DeepSeek-V2-Lite: 64 experts of 1408, gate/up Q4_K, down Q5_0 since 1408 % 256 != 0, 6
// active; router; RMSNorm; RoPE on 16 heads). MoE bytes count the weights of the experts touched.
#ifdef LATTE_WITH_CUDA

#include <latte/quant.hpp>

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <numeric>
#include <string>

#include "cuda/gemv_quant.hpp"
#include "cuda/moe_dispatch.hpp"
#include "cuda/moe_experts.hpp"
#include "cuda/moe_router.hpp"
#include "cuda/norms.hpp"
#include "cuda/rope_yarn.hpp"
#include "cuda/standalone_params.hpp"
#include "cuda/x_int8.hpp"
#include "kernel_bench.hpp"

namespace latte::cli {
namespace {

int64_t touched_experts(const cuda::MoeShape& m, int tokens) {
  const int kExperts = m.n_experts, kUsed = m.k;
  // expected distinct experts when each token draws 6 of 64 uniformly
  const double miss = std::pow(1.0 - static_cast<double>(kUsed) / kExperts, tokens);
  return static_cast<int64_t>(std::ceil(kExperts * (1.0 - miss)));
}

/// "E64x1408 k6 t=1" (snprintf: GCC 12 warns falsely on chains of std::string operator+ here).
std::string moe_shape(int n_expert, int ffn, int used, int tokens) {
  char buf[64];
  if (ffn > 0) {
    std::snprintf(buf, sizeof buf, "E%dx%d k%d t=%d", n_expert, ffn, used, tokens);
  } else {
    std::snprintf(buf, sizeof buf, "E%d k%d t=%d", n_expert, used, tokens);
  }
  return buf;
}

GgmlType kquant_or_q5_0(int k) { return k % 256 == 0 ? GgmlType::q4_k : GgmlType::q5_0; }

/// The MoE of a batched decode step of `tokens` rows as the model runs it (tokens <= 128: moe_experts_decode on the
/// rows' split-int8 records, groups of up to 16 tokens per expert), or a prefill chunk (past 128 rows, or
/// `prefill`: moe_experts_prefill on bf16 rows).
KernelBenchCase moe_case(const cuda::MoeShape& m, int tokens, bool prefill = true) {
  const int kExperts = m.n_experts, kUsed = m.k, kHidden = m.hidden, kFfn = m.ffn;
  const GgmlType gate_type = m.gate_type, down_type = m.down_type;
  const int64_t gate_bytes = cuda::expert_matrix_bytes(gate_type, kFfn, kHidden);
  const int64_t down_bytes = cuda::expert_matrix_bytes(down_type, kHidden, kFfn);
  const double bytes =
      static_cast<double>(touched_experts(m, tokens)) * (2.0 * gate_bytes + down_bytes) + 8.0 * tokens * kHidden;
  const double flops = 2.0 * tokens * kUsed * 3.0 * kHidden * kFfn;
  // Q4_K / Q5_0 stacks keep the names the earlier rounds' figures carry; other types name the gate's
  const bool decode = tokens <= 8 || (!prefill && tokens <= cuda::moe_gemv_max_tokens);
  std::string kernel = decode ? "moe experts decode" : "moe experts prefill";
  if (gate_type != GgmlType::q4_k && gate_type != GgmlType::q5_0) kernel.append(" ").append(type_name(gate_type));
  return {.kernel = kernel,
          .shape = moe_shape(kExperts, kFfn, kUsed, tokens),
          .bytes = bytes,
          .flops = flops,
          .prepare = [=](BenchContext& ctx) -> BenchLauncher {
            // one stack (64 experts) per copy: 3 x ~100 MB already exceeds L2
            auto* gate = ctx.random_device(static_cast<size_t>(gate_bytes * kExperts), int(gate_type));
            auto* up = ctx.random_device(static_cast<size_t>(gate_bytes * kExperts), int(gate_type));
            auto* down = ctx.random_device(static_cast<size_t>(down_bytes * kExperts), int(down_type));
            const cuda::MoeExpertWeights w = cuda::moe_expert_weights(m, gate, up, down);
            const std::vector<int32_t> ids = cuda::random_expert_ids(m, tokens, ctx.rng);
            auto* d_ids = static_cast<int32_t*>(ctx.device_alloc(ids.size() * 4));
            LATTE_CUDA_CHECK(cudaMemcpy(d_ids, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
            auto* weights = static_cast<const float*>(ctx.random_device(ids.size() * 4, 0));
            auto* x = static_cast<const float*>(ctx.random_device(size_t{4} * tokens * kHidden, 0));
            auto* xb = static_cast<const __nv_bfloat16*>(ctx.random_device(size_t{2} * tokens * kHidden, 30));
            auto* out = static_cast<float*>(ctx.device_alloc(size_t{4} * tokens * kHidden));
            auto ws = std::make_shared<cuda::MoeWorkspace>(cuda::moe_workspace_shape(m, tokens));
            ctx.keep_alive.push_back(ws);
            // a batched step's rows come with their records (the FFN norm writes them); one token's without
            const int64_t record = cuda::x_int8_record_bytes(kHidden);
            uint8_t* xq = nullptr;
            if (decode && tokens > 8) {
              xq = static_cast<uint8_t*>(ctx.device_alloc(static_cast<size_t>(record * tokens)));
              cuda::quantize_x_int8(
                  {.x = x, .x_stride = kHidden, .rows = tokens, .k = kHidden, .out = xq, .out_stride = record},
                  nullptr);
              LATTE_CUDA_CHECK(cudaDeviceSynchronize());
            }
            return [=](cudaStream_t s, int) {
              cuda::MoeExpertsCall call = cuda::moe_experts_call(
                  m, tokens, {.ids = d_ids, .weights = weights, .x = x, .x_bf16 = xb, .out = out});
              call.x_q = xq;
              call.x_q_stride = xq != nullptr ? record : 0;
              if (decode) {
                cuda::moe_experts_decode(w, *ws, call, s);
              } else {
                cuda::moe_experts_prefill(w, *ws, call, s);
              }
            };
          }};
}

std::vector<KernelBenchCase> moe_cases(const KernelBenchShapes& shapes) {
  // Gate/up Q4_K (Q5_0 where the width is no multiple of 256), down likewise by its width; softmax routing.
  const cuda::MoeShape m{.n_experts = shapes.n_expert,
                         .k = shapes.n_expert_used,
                         .hidden = shapes.hidden,
                         .ffn = shapes.expert_ffn,
                         .gate_type = kquant_or_q5_0(shapes.hidden),
                         .up_type = kquant_or_q5_0(shapes.hidden),
                         .down_type = kquant_or_q5_0(shapes.expert_ffn)};
  const int kExperts = m.n_experts, kUsed = m.k, kHidden = m.hidden;
  const int heads = shapes.n_head, q_rows = shapes.q_rows, head_dim = shapes.qk_nope + shapes.qk_rope,
            n_rot = shapes.qk_rope, rot_offset = shapes.qk_nope;
  std::vector<KernelBenchCase> cases;
  if (kExperts > 0)
    cases = {moe_case(m, 1), moe_case(m, 4), moe_case(m, 32, false), moe_case(m, 128, false), moe_case(m, 512)};
  if (kExperts > 0 && kHidden % 256 == 0) {
    // an IQ4_XS file's stacks (IQ4_NL where the width is no multiple of 256, as llama-quantize falls back)
    cuda::MoeShape iq = m;
    iq.gate_type = iq.up_type = GgmlType::iq4_xs;
    iq.down_type = shapes.expert_ffn % 256 == 0 ? GgmlType::iq4_xs : GgmlType::iq4_nl;
    for (int tokens : {1, 4, 512}) cases.push_back(moe_case(iq, tokens));
  }
  // The FFN norm of a decode step with its records, alone and computing the router logits too (rms_norm's
  // router product), and the fp32 router GEMV that the product replaces.
  for (int tokens : {1, 8}) {
    if (kExperts <= 0 || kHidden % 32 != 0) break;
    const std::string shape =
        std::to_string(kHidden) + " E" + std::to_string(kExperts) + " t=" + std::to_string(tokens);
    for (bool router : {false, true}) {
      cases.push_back({.kernel = router ? "rms_norm records + router" : "rms_norm records",
                       .shape = shape,
                       .bytes = 8.0 * tokens * kHidden + 4.0 * kHidden + (router ? 4.0 * kExperts * kHidden : 0.0),
                       .flops = router ? 2.0 * tokens * kExperts * kHidden : 0.0,
                       .prepare = [=](BenchContext& ctx) -> BenchLauncher {
                         auto* x = static_cast<const float*>(ctx.random_device(size_t{4} * tokens * kHidden, 0));
                         auto* w = static_cast<const float*>(ctx.random_device(size_t{4} * kHidden, 0));
                         auto* r = static_cast<const float*>(ctx.random_device(size_t{4} * kExperts * kHidden, 0));
                         auto* y = static_cast<float*>(ctx.device_alloc(size_t{4} * tokens * kHidden));
                         const int64_t q_stride = cuda::x_int8_record_bytes(kHidden);
                         auto* q = static_cast<uint8_t*>(ctx.device_alloc(static_cast<size_t>(q_stride * tokens)));
                         auto* logits = static_cast<float*>(ctx.device_alloc(size_t{4} * tokens * kExperts));
                         return [=](cudaStream_t s, int) {
                           cuda::rms_norm({.x = x,
                                           .x_stride = kHidden,
                                           .weight = w,
                                           .n = kHidden,
                                           .rows = tokens,
                                           .out = y,
                                           .out_stride = kHidden,
                                           .out_q = q,
                                           .out_q_stride = q_stride,
                                           .router = router ? r : nullptr,
                                           .router_rows = router ? kExperts : 0,
                                           .router_out = router ? logits : nullptr,
                                           .router_out_stride = router ? kExperts : 0},
                                          s);
                         };
                       }});
    }
    cases.push_back({.kernel = "router gemv f32",
                     .shape = shape,
                     .bytes = 4.0 * tokens * kHidden + 4.0 * kExperts * kHidden,
                     .flops = 2.0 * tokens * kExperts * kHidden,
                     .prepare = [=](BenchContext& ctx) -> BenchLauncher {
                       auto* x = static_cast<const float*>(ctx.random_device(size_t{4} * tokens * kHidden, 0));
                       auto* r = ctx.random_device(size_t{4} * kExperts * kHidden, 0);
                       auto* logits = static_cast<float*>(ctx.device_alloc(size_t{4} * tokens * kExperts));
                       return [=](cudaStream_t s, int) {
                         cuda::gemv_quant({.type = GgmlType::f32,
                                           .weight = r,
                                           .weight_bytes = int64_t{4} * kExperts * kHidden,
                                           .n_rows = kExperts,
                                           .k = kHidden,
                                           .x = x,
                                           .x_stride = kHidden,
                                           .y = logits,
                                           .y_stride = kExperts,
                                           .n_tokens = tokens},
                                          s);
                       };
                     }});
  }
  for (int tokens : {1, 512}) {
    if (kExperts > 0) {
      cases.push_back({.kernel = "moe router softmax",
                       .shape = moe_shape(kExperts, 0, kUsed, tokens),
                       .bytes = 4.0 * tokens * kExperts + 8.0 * tokens * kUsed,
                       .flops = 0,
                       .prepare = [=](BenchContext& ctx) -> BenchLauncher {
                         auto* logits = static_cast<const float*>(ctx.random_device(size_t{4} * tokens * kExperts, 0));
                         auto* ids = static_cast<int32_t*>(ctx.device_alloc(size_t{4} * tokens * kUsed));
                         auto* w = static_cast<float*>(ctx.device_alloc(size_t{4} * tokens * kUsed));
                         return [=](cudaStream_t s, int) {
                           cuda::moe_route(cuda::moe_router_params(m, tokens, logits, nullptr, ids, w), s);
                         };
                       }});
    }
    cases.push_back({.kernel = "rms_norm + residual",
                     .shape = std::to_string(kHidden) + " t=" + std::to_string(tokens),
                     .bytes = 16.0 * tokens * kHidden,
                     .flops = 0,
                     .prepare = [=](BenchContext& ctx) -> BenchLauncher {
                       auto* x = static_cast<const float*>(ctx.random_device(size_t{4} * tokens * kHidden, 0));
                       auto* h = static_cast<float*>(ctx.random_device(size_t{4} * tokens * kHidden, 0));
                       auto* w = static_cast<const float*>(ctx.random_device(size_t{4} * kHidden, 0));
                       auto* y = static_cast<float*>(ctx.device_alloc(size_t{4} * tokens * kHidden));
                       return [=](cudaStream_t s, int) {
                         cuda::rms_norm({.x = x,
                                         .x_stride = kHidden,
                                         .residual = h,
                                         .residual_stride = kHidden,
                                         .weight = w,
                                         .n = kHidden,
                                         .rows = tokens,
                                         .out = y,
                                         .out_stride = kHidden},
                                        s);
                       };
                     }});
    cases.push_back(
        {.kernel = "rope_yarn q",
         .shape = std::to_string(heads) + " heads x " + std::to_string(n_rot) + " t=" + std::to_string(tokens),
         .bytes = 8.0 * tokens * heads * n_rot,
         .flops = 0,
         .prepare = [=](BenchContext& ctx) -> BenchLauncher {
           auto* q = static_cast<float*>(ctx.random_device(size_t{4} * tokens * q_rows, 0));
           std::vector<int32_t> pos(static_cast<size_t>(tokens));
           std::iota(pos.begin(), pos.end(), 1000);
           auto* d_pos = static_cast<int32_t*>(ctx.device_alloc(pos.size() * 4));
           LATTE_CUDA_CHECK(cudaMemcpy(d_pos, pos.data(), pos.size() * 4, cudaMemcpyHostToDevice));
           const auto corr = cuda::yarn_corr_dims(n_rot, 4096, 10000.0f, 32.0f, 1.0f);
           return [=](cudaStream_t s, int) {
             cuda::rope_yarn({.data = q,
                              .token_stride = q_rows,
                              .n_heads = heads,
                              .head_stride = head_dim,
                              .rot_offset = rot_offset,
                              .n_rot = n_rot,
                              .positions = d_pos,
                              .n_tokens = tokens,
                              .freq_scale = 1.0f / 40.0f,
                              .ext_factor = 1.0f,
                              .corr = corr},
                             s);
           };
         }});
  }
  return cases;
}

const KernelBenchRegistration reg{moe_cases};

}  // namespace
}  // namespace latte::cli

#endif  // LATTE_WITH_CUDA
