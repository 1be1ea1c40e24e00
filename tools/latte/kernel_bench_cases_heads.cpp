// kernel-bench cases of the mla backend's per-head products of a 2-16-row decode step over the fp32 copies of W_UK
// and W_UV (by default DeepSeek-V2-Lite: 16 heads, W_UK 512 x 128 and W_UV 128 x 512 per head), at 2, 8 and 16 rows:
// heads_product (one launch, bf16 out; W_UV fp32 and bf16 out) against the batched fp32 cuBLAS product followed by
// the conversion to bf16 that the model then needs.
#ifdef LATTE_WITH_CUDA

#include <cuda_bf16.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cuda/gemm_bf16.hpp"
#include "cuda/heads_product.hpp"
#include "kernel_bench.hpp"

namespace latte::cli {
namespace {

struct HeadsShape {
  std::string name;
  int n, k;       ///< per head: n rows of k values
  bool both_out;  ///< fp32 and bf16 outputs (W_UV), else bf16 only (W_UK)
};

std::vector<KernelBenchCase> heads_cases(const KernelBenchShapes& m) {
  std::vector<KernelBenchCase> cases;
  if (m.kv_lora <= 0 || m.n_head <= 0) return cases;
  const HeadsShape shapes[] = {{"W_UK", m.kv_lora, m.qk_nope, false}, {"W_UV", m.v_head, m.kv_lora, true}};
  for (const HeadsShape& h : shapes) {
    for (const int t : {2, 8, 16}) {
      if (!cuda::heads_product_takes(t, h.k)) continue;
      const int N = m.n_head;
      const int64_t w_elems = static_cast<int64_t>(N) * h.n * h.k;
      const double bytes =
          4.0 * static_cast<double>(w_elems) + 4.0 * t * N * h.k + (h.both_out ? 6.0 : 2.0) * t * N * h.n;
      const double flops = 2.0 * t * static_cast<double>(w_elems);
      const std::string shape = h.name + " " + std::to_string(N) + "x" + std::to_string(h.n) + "x" +
                                std::to_string(h.k) + " t=" + std::to_string(t);
      auto prepare = [h, t, N, w_elems](BenchContext& ctx, bool kernel) -> BenchLauncher {
        const size_t w_bytes = static_cast<size_t>(w_elems) * sizeof(float);
        std::vector<const float*> w;
        for (int i = 0, n = ctx.rotating_copies(static_cast<int64_t>(w_bytes)); i < n; ++i) {
          w.push_back(static_cast<const float*>(ctx.random_device(w_bytes)));
        }
        const int64_t ldc = static_cast<int64_t>(N) * h.n;
        auto* a = static_cast<const float*>(ctx.random_device(sizeof(float) * t * N * h.k));
        auto* c = static_cast<float*>(ctx.device_alloc(sizeof(float) * t * ldc));
        auto* c_bf16 = static_cast<__nv_bfloat16*>(ctx.device_alloc(sizeof(uint16_t) * t * ldc));
        auto blas = kernel ? nullptr : std::make_shared<cuda::BlasHandle>();
        return [=](cudaStream_t s, int rep) {
          const cuda::HeadsProductParams p{.a = a,
                                           .lda = static_cast<int64_t>(N) * h.k,
                                           .stride_a = h.k,
                                           .w = w[static_cast<size_t>(rep) % w.size()],
                                           .ldw = h.k,
                                           .stride_w = static_cast<int64_t>(h.n) * h.k,
                                           .c = h.both_out ? c : nullptr,
                                           .c_bf16 = c_bf16,
                                           .ldc = ldc,
                                           .stride_c = h.n,
                                           .m = t,
                                           .n = h.n,
                                           .k = h.k,
                                           .batch = N};
          if (kernel) {
            cuda::heads_product(p, s);
          } else {
            cuda::heads_product_via_blas(*blas, p, c, s);
          }
        };
      };
      cases.push_back({.kernel = "heads product fp32",
                       .shape = shape,
                       .bytes = bytes,
                       .flops = flops,
                       .prepare = [prepare](BenchContext& ctx) { return prepare(ctx, true); }});
      cases.push_back({.kernel = "heads product cublas+bf16",
                       .shape = shape,
                       .bytes = bytes,
                       .flops = flops,
                       .prepare = [prepare](BenchContext& ctx) { return prepare(ctx, false); }});
    }
  }
  return cases;
}

const KernelBenchRegistration reg{heads_cases};

}  // namespace
}  // namespace latte::cli

#endif  // LATTE_WITH_CUDA
