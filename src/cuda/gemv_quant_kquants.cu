// Instantiates the GEMV kernels for the kquants types (one translation unit per family so that
// the families compile in parallel).
#include "cuda/gemv_kernel.cuh"

namespace latte::cuda {

template void launch_gemv<GgmlType::q2_k>(const GemvParams&, cudaStream_t);
template void launch_gemv<GgmlType::q3_k>(const GemvParams&, cudaStream_t);
template void launch_gemv<GgmlType::q4_k>(const GemvParams&, cudaStream_t);
template void launch_gemv<GgmlType::q5_k>(const GemvParams&, cudaStream_t);
template void launch_gemv<GgmlType::q6_k>(const GemvParams&, cudaStream_t);

}  // namespace latte::cuda
