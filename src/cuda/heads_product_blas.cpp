// heads_product's cuBLAS form (heads_product.hpp): the batched fp32 product and a bf16 conversion.
#include "cuda/activations.hpp"
#include "cuda/gemm_bf16.hpp"
#include "cuda/heads_product.hpp"

#include <latte/error.hpp>

namespace latte::cuda {

void heads_product_via_blas(BlasHandle& blas, const HeadsProductParams& p, float* scratch, cudaStream_t stream) {
  float* const c = p.c != nullptr ? p.c : scratch;
  if (c == nullptr) throw Error(ErrorCode::invalid_argument, "heads_product_via_blas: no fp32 output or scratch");
  gemm_f32_batched(blas,
                   {.a = p.a,
                    .lda = p.lda,
                    .stride_a = p.stride_a,
                    .w = p.w,
                    .ldw = p.ldw,
                    .stride_w = p.stride_w,
                    .c = c,
                    .ldc = p.ldc,
                    .stride_c = p.stride_c,
                    .m = p.m,
                    .n = p.n,
                    .k = p.k,
                    .batch = p.batch},
                   stream);
  if (p.c_bf16 != nullptr) convert_to_bf16(c, p.ldc, p.c_bf16, p.ldc, p.m, static_cast<int>(p.ldc), stream);
}

}  // namespace latte::cuda
