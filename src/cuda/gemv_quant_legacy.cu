// Instantiates the GEMV kernels for the legacy 4- and 5-bit types (one translation unit per family so that
// the families compile in parallel; Q8_0, MXFP4 and the IQ4 types are in gemv_quant_q8_iq4.cu).
#include "cuda/gemv_kernel.cuh"

namespace latte::cuda {

template void launch_gemv<GgmlType::q4_0>(const GemvParams&, cudaStream_t);
template void launch_gemv<GgmlType::q4_1>(const GemvParams&, cudaStream_t);
template void launch_gemv<GgmlType::q5_0>(const GemvParams&, cudaStream_t);
template void launch_gemv<GgmlType::q5_1>(const GemvParams&, cudaStream_t);

}  // namespace latte::cuda
