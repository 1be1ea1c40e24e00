// Copying logits from the device into page-locked host memory, asynchronously on the compute stream.
// The output head itself is gemv_quant (decode) or gemm_quant (prefill) with `vocab` rows.
//
//   latte::cuda::PinnedBuffer<float> host(vocab);
//   latte::cuda::copy_logits_to_host(d_logits, 1, vocab, vocab, host, stream); stream.synchronize();
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/device_buffer.hpp"

namespace latte::cuda {

/// Copies rows [0, n_rows) of fp32 logits [n_rows, device_stride] into `host` as a dense
/// [n_rows, vocab] array. Enqueued on `stream`; synchronize before reading. Throws Error when
/// `host` is too small or the shape is invalid.
void copy_logits_to_host(const float* device_logits, int64_t n_rows, int64_t vocab, int64_t device_stride,
                         PinnedBuffer<float>& host, cudaStream_t stream);

}  // namespace latte::cuda
