// Instantiates the GEMV kernels for the float types (one translation unit per family so that
// the families compile in parallel).
#include "cuda/gemv_kernel.cuh"

namespace latte::cuda {

template void launch_gemv<GgmlType::f32>(const GemvParams&, cudaStream_t);
template void launch_gemv<GgmlType::f16>(const GemvParams&, cudaStream_t);
template void launch_gemv<GgmlType::bf16>(const GemvParams&, cudaStream_t);

}  // namespace latte::cuda
