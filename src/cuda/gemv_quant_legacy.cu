// Instantiates the GEMV kernels for the legacy types, MXFP4 and the IQ4 types (one translation unit per family so that
// the families compile in parallel).
#include "cuda/gemv_kernel.cuh"

namespace latte::cuda {

template void launch_gemv<GgmlType::q4_0>(const GemvParams&, cudaStream_t);
template void launch_gemv<GgmlType::q4_1>(const GemvParams&, cudaStream_t);
template void launch_gemv<GgmlType::q5_0>(const GemvParams&, cudaStream_t);
template void launch_gemv<GgmlType::q5_1>(const GemvParams&, cudaStream_t);
template void launch_gemv<GgmlType::q8_0>(const GemvParams&, cudaStream_t);
template void launch_gemv<GgmlType::mxfp4>(const GemvParams&, cudaStream_t);
template void launch_gemv<GgmlType::iq4_nl>(const GemvParams&, cudaStream_t);
template void launch_gemv<GgmlType::iq4_xs>(const GemvParams&, cudaStream_t);

}  // namespace latte::cuda
