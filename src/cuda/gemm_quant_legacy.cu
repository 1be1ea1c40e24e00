// Instantiates the fused GEMM kernels for the legacy types (one translation unit per family so
// that the families compile in parallel).
#include "cuda/gemm_kernel.cuh"

namespace latte::cuda {

template void launch_gemm<GgmlType::bf16>(const QuantGemmParams&, cudaStream_t);
template void launch_gemm<GgmlType::q4_0>(const QuantGemmParams&, cudaStream_t);
template void launch_gemm<GgmlType::q4_1>(const QuantGemmParams&, cudaStream_t);
template void launch_gemm<GgmlType::q5_0>(const QuantGemmParams&, cudaStream_t);
template void launch_gemm<GgmlType::q5_1>(const QuantGemmParams&, cudaStream_t);
template void launch_gemm<GgmlType::q8_0>(const QuantGemmParams&, cudaStream_t);

}  // namespace latte::cuda
