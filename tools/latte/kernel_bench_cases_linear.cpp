// kernel-bench cases of the linear layers at a model's shapes (by default DeepSeek-V2-Lite: hidden
// 2048, q 3072, kv_a 576, o 2048x2048, dense FFN 10944, vocab 129280): decode GEMV on fp32 x (1 and 4
// tokens) and on split-int8 records (1, 8 and 32 tokens), prefill GEMM (512 tokens, fused vs dequantize +
// cuBLAS), dequantize to bf16.
#ifdef LATTE_WITH_CUDA

#include <latte/quant.hpp>

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cuda/check.hpp"
#include "cuda/dequantize.hpp"
#include "cuda/gemm_bf16.hpp"
#include "cuda/gemm_quant.hpp"
#include "cuda/gemv_quant.hpp"
#include "cuda/x_int8.hpp"
#include "kernel_bench.hpp"

namespace latte::cli {
namespace {

struct Linear {
  std::string name;
  int rows, k;
  GgmlType type;
};

/// `preferred` (a K-quant) where k is a multiple of 256, else Q5_0 (what llama.cpp falls back to).
GgmlType kquant_or_q5_0(GgmlType preferred, int k) { return k % 256 == 0 ? preferred : GgmlType::q5_0; }

// Q4_K_M-like choices; attn_output and ffn_down also at the other types such files mix in.
std::vector<Linear> linears_of(const KernelBenchShapes& m) {
  std::vector<Linear> l{{"attn_q", m.q_rows, m.q_k, kquant_or_q5_0(GgmlType::q4_k, m.q_k)},
                        {"attn_kv_a_mqa", m.kv_a_rows, m.hidden, kquant_or_q5_0(GgmlType::q4_k, m.hidden)}};
  for (GgmlType t : {GgmlType::q4_k, GgmlType::q5_k, GgmlType::q6_k, GgmlType::q8_0}) {
    if (t == GgmlType::q8_0 || m.o_k % 256 == 0) l.push_back({"attn_output", m.hidden, m.o_k, t});
  }
  if (m.o_k % 256 != 0) l.push_back({"attn_output", m.hidden, m.o_k, GgmlType::q5_0});
  if (m.dense_ffn > 0) {
    l.push_back({"ffn_up", m.dense_ffn, m.hidden, kquant_or_q5_0(GgmlType::q4_k, m.hidden)});
    l.push_back({"ffn_down", m.hidden, m.dense_ffn, kquant_or_q5_0(GgmlType::q6_k, m.dense_ffn)});
    l.push_back({"ffn_down", m.hidden, m.dense_ffn, GgmlType::q8_0});
  }
  l.push_back({"output", m.vocab, m.hidden, kquant_or_q5_0(GgmlType::q6_k, m.hidden)});
  // an IQ4_XS file's (IQ4_NL where the width is no multiple of 256)
  l.push_back({"attn_output", m.hidden, m.o_k, m.o_k % 256 == 0 ? GgmlType::iq4_xs : GgmlType::iq4_nl});
  l.push_back({"output", m.vocab, m.hidden, m.hidden % 256 == 0 ? GgmlType::iq4_xs : GgmlType::iq4_nl});
  return l;
}

std::string shape_of(const Linear& l, int tokens) {
  return l.name + " " + std::to_string(l.rows) + "x" + std::to_string(l.k) + " t=" + std::to_string(tokens);
}

/// Rotating copies of one weight matrix; returns the base pointers.
std::vector<const void*> weight_copies(BenchContext& ctx, const Linear& l, int64_t& bytes) {
  bytes = static_cast<int64_t>(row_bytes(l.type, static_cast<uint64_t>(l.k))) * l.rows;
  std::vector<const void*> copies;
  const int n = ctx.rotating_copies(bytes);
  for (int i = 0; i < n; ++i) copies.push_back(ctx.random_device(static_cast<size_t>(bytes), static_cast<int>(l.type)));
  return copies;
}

/// A GEMV case of `tokens` rows of x against l: its kernel name, shape, bytes and FLOPs, and `prepare`.
KernelBenchCase gemv_case(const std::string& kernel, const Linear& l, int tokens,
                          std::function<BenchLauncher(BenchContext&)> prepare) {
  const cuda::GemvParams shape{.type = l.type, .n_rows = l.rows, .k = l.k, .n_tokens = tokens};
  return {.kernel = kernel + " " + std::string(type_name(l.type)),
          .shape = shape_of(l, tokens),
          .bytes = cuda::gemv_min_bytes(shape),
          .flops = cuda::gemv_flops(shape),
          .prepare = std::move(prepare)};
}

std::vector<KernelBenchCase> linear_cases(const KernelBenchShapes& shapes) {
  const std::vector<Linear> linears = linears_of(shapes);
  std::vector<KernelBenchCase> cases;
  for (const Linear& l : linears) {
    for (int tokens : {1, 4}) {
      cases.push_back(gemv_case("gemv", l, tokens, [l, tokens](BenchContext& ctx) -> BenchLauncher {
        int64_t bytes = 0;
        auto w = weight_copies(ctx, l, bytes);
        auto* x = static_cast<const float*>(ctx.random_device(size_t{4} * tokens * l.k, 0));
        auto* y = static_cast<float*>(ctx.device_alloc(size_t{4} * tokens * l.rows));
        return [=](cudaStream_t s, int rep) {
          cuda::gemv_quant({.type = l.type,
                            .weight = w[rep % w.size()],
                            .weight_bytes = bytes,
                            .n_rows = l.rows,
                            .k = l.k,
                            .x = x,
                            .x_stride = l.k,
                            .y = y,
                            .y_stride = l.rows,
                            .n_tokens = tokens},
                           s);
        };
      }));
    }
  }
  // What a decode step runs: x as split-int8 records (made once here, as the norms make them), 1 token (the
  // dp4a GEMV), 8 (one sequence batch: the tensor cores from 5) and 32 (one launch, a row of blocks per 8 rows,
  // where the tensor-core GEMV takes the type; else this case is skipped)
  for (const Linear& l : linears) {
    for (int tokens : {1, 8, 32}) {
      cases.push_back(gemv_case("gemv int8 records", l, tokens, [l, tokens](BenchContext& ctx) -> BenchLauncher {
        const int64_t stride = cuda::x_int8_record_bytes(l.k);
        cuda::GemvParams p{.type = l.type,
                           .weight = reinterpret_cast<const void*>(uintptr_t{256}),  // a probe first: alignment only
                           .weight_bytes = static_cast<int64_t>(row_bytes(l.type, static_cast<uint64_t>(l.k))) * l.rows,
                           .n_rows = l.rows,
                           .k = l.k,
                           .x_stride = l.k,
                           .y_stride = l.rows,
                           .n_tokens = tokens,
                           .x_q = reinterpret_cast<const uint8_t*>(uintptr_t{256}),
                           .x_q_stride = stride};
        if (!cuda::gemv_reads_x_int8(l.type, l.k, std::min(tokens, cuda::gemv_max_tokens)) ||
            (tokens > cuda::gemv_max_tokens && !cuda::gemv_takes_dense_rows(p))) {
          return {};  // no split-int8 launch of this shape: nothing allocated
        }
        auto* x = static_cast<const float*>(ctx.random_device(size_t{4} * tokens * l.k, 0));
        auto* x_q = static_cast<uint8_t*>(ctx.device_alloc(static_cast<size_t>(stride) * tokens));
        cuda::quantize_x_int8({.x = x, .x_stride = l.k, .rows = tokens, .k = l.k, .out = x_q, .out_stride = stride},
                              nullptr);
        LATTE_CUDA_CHECK(cudaDeviceSynchronize());  // the records, before the timed stream reads them
        int64_t bytes = 0;
        auto w = weight_copies(ctx, l, bytes);
        p.x = x;
        p.y = static_cast<float*>(ctx.device_alloc(size_t{4} * tokens * l.rows));
        p.x_q = x_q;
        return [=](cudaStream_t s, int rep) {
          cuda::GemvParams q = p;
          q.weight = w[rep % w.size()];
          cuda::gemv_quant(q, s);
        };
      }));
    }
  }
  for (const Linear& l : linears) {
    const int m = 512;
    cuda::QuantGemmParams shape{.type = l.type, .n_rows = l.rows, .k = l.k, .m = m};
    auto prepare = [l, m](BenchContext& ctx, bool fused) -> BenchLauncher {
      int64_t bytes = 0;
      auto w = weight_copies(ctx, l, bytes);
      auto* a = static_cast<const __nv_bfloat16*>(ctx.random_device(size_t{2} * m * l.k, 30));
      auto* c = static_cast<float*>(ctx.device_alloc(size_t{4} * m * l.rows));
      auto* scratch = fused ? nullptr : static_cast<__nv_bfloat16*>(ctx.device_alloc(size_t{2} * l.rows * l.k));
      auto blas = fused ? nullptr : std::make_shared<cuda::BlasHandle>();
      return [=](cudaStream_t s, int rep) {
        const cuda::QuantGemmParams p{.type = l.type,
                                      .weight = w[rep % w.size()],
                                      .weight_bytes = bytes,
                                      .n_rows = l.rows,
                                      .k = l.k,
                                      .a = a,
                                      .lda = l.k,
                                      .c = c,
                                      .ldc = l.rows,
                                      .m = m};
        if (fused) {
          cuda::gemm_quant(p, s);
        } else {
          cuda::gemm_quant_via_bf16(*blas, p, scratch, size_t(l.rows) * l.k, s);
        }
      };
    };
    if (cuda::gemm_quant_supports(l.type)) {
      cases.push_back({.kernel = "gemm fused " + std::string(type_name(l.type)),
                       .shape = shape_of(l, m),
                       .bytes = cuda::gemm_min_bytes(shape),
                       .flops = cuda::gemm_flops(shape),
                       .prepare = [prepare](BenchContext& ctx) { return prepare(ctx, true); }});
    }
    cases.push_back({.kernel = "gemm dequant+cublas " + std::string(type_name(l.type)),
                     .shape = shape_of(l, m),
                     .bytes = cuda::gemm_min_bytes(shape),
                     .flops = cuda::gemm_flops(shape),
                     .prepare = [prepare](BenchContext& ctx) { return prepare(ctx, false); }});
  }
  for (const Linear& l : linears) {
    if (l.name != "ffn_up" && l.name != "output") continue;
    const cuda::DequantizeParams shape{.type = l.type, .n_rows = l.rows, .k = l.k};
    cases.push_back({.kernel = "dequantize->bf16 " + std::string(type_name(l.type)),
                     .shape = l.name + " " + std::to_string(l.rows) + "x" + std::to_string(l.k),
                     .bytes = cuda::dequantize_min_bytes(shape),
                     .flops = 0,
                     .prepare = [l](BenchContext& ctx) -> BenchLauncher {
                       int64_t bytes = 0;
                       auto w = weight_copies(ctx, l, bytes);
                       auto* out = ctx.device_alloc(size_t{2} * l.rows * l.k);
                       return [=](cudaStream_t s, int rep) {
                         cuda::dequantize_rows({.type = l.type,
                                                .weight = w[rep % w.size()],
                                                .weight_bytes = bytes,
                                                .n_source_rows = l.rows,
                                                .n_rows = l.rows,
                                                .k = l.k,
                                                .out = out,
                                                .out_stride = l.k},
                                               s);
                       };
                     }});
  }
  return cases;
}

const KernelBenchRegistration reg{linear_cases};

}  // namespace
}  // namespace latte::cli

#endif  // LATTE_WITH_CUDA
