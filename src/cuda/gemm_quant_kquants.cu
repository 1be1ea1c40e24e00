// Instantiates the fused GEMM kernels for the kquants types (one translation unit per family so
// that the families compile in parallel).
#include "cuda/gemm_kernel.cuh"

namespace latte::cuda {

template void launch_gemm<GgmlType::q2_k>(const QuantGemmParams&, cudaStream_t);
template void launch_gemm<GgmlType::q3_k>(const QuantGemmParams&, cudaStream_t);
template void launch_gemm<GgmlType::q4_k>(const QuantGemmParams&, cudaStream_t);
template void launch_gemm<GgmlType::q5_k>(const QuantGemmParams&, cudaStream_t);
template void launch_gemm<GgmlType::q6_k>(const QuantGemmParams&, cudaStream_t);

}  // namespace latte::cuda
