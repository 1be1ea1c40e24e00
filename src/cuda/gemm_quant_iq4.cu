// Instantiates the fused GEMM kernels for the IQ4 types (one translation unit per family so that the
// families compile in parallel).
#include "cuda/gemm_kernel.cuh"

namespace latte::cuda {

template void launch_gemm<GgmlType::iq4_nl>(const QuantGemmParams&, cudaStream_t);
template void launch_gemm<GgmlType::iq4_xs>(const QuantGemmParams&, cudaStream_t);

}  // namespace latte::cuda
