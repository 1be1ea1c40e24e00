// Instantiates the GEMV kernels for Q8_0, MXFP4 and the IQ4 types (split from gemv_quant_legacy.cu, whose
// eight types made it the longest compile of the library).
#include "cuda/gemv_kernel.cuh"

namespace latte::cuda {

template void launch_gemv<GgmlType::q8_0>(const GemvParams&, cudaStream_t);
template void launch_gemv<GgmlType::mxfp4>(const GemvParams&, cudaStream_t);
template void launch_gemv<GgmlType::iq4_nl>(const GemvParams&, cudaStream_t);
template void launch_gemv<GgmlType::iq4_xs>(const GemvParams&, cudaStream_t);

}  // namespace latte::cuda
