// The CUDA forward pass of deepseek2 and glm-dsa models: the same per-block steps as the CPU pass
// (model/deepseek2.cpp, model/glm_dsa.cpp) on device buffers, driving the kernels of src/cuda/ on one
// stream. A step over T rows (one prefill chunk, one decode token, or one token of each of several
// sessions) runs without host synchronisation until its logits are copied into pinned memory.
//
//   auto pass = latte::cuda::create_cuda_forward(state, backend);   // backend: a CUDA "mla" / "standard"
//   pass->run(batch);
#pragma once

#include "model/forward.hpp"
#include "model/model_state.hpp"

#include <latte/attention.hpp>

#include <memory>

namespace latte::cuda {

/// Creates the CUDA pass for a model loaded on a CUDA device. Throws Error(unsupported) when `backend`
/// is not a CUDA backend or the model has shapes no kernel covers (named in the message).
std::unique_ptr<detail::ForwardPass> create_cuda_forward(const detail::ModelState& model, AttentionBackend& backend);

}  // namespace latte::cuda
