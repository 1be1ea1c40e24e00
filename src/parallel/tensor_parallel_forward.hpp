// The CPU forward pass of a tensor-parallel model: one thread per rank, each running the
// architecture's forward pass over its shard with its own attention backend, thread pool and KV
// cache, the ranks meeting in an InProcessGroup at the two all-reduces of every block. Rank 0
// computes the logits (every rank holds the same residual stream after each all-reduce).
// Activation taps: emitted after the step in the unsharded pass's order and shapes; the per-head taps
// (q, q_pe, attn_heads) gathered over the ranks in head order, the others taken from rank 0.
//
//   auto forward = latte::detail::create_tensor_parallel_cpu_forward(state, "mla", 8);
//   forward->run(batch);   // like any ForwardPass; batch caches only count tokens
#pragma once

#include "model/forward.hpp"
#include "model/model_state.hpp"

#include <memory>
#include <string>

namespace latte::detail {

/// A forward pass over `model.tensor_parallel`'s ranks with backend `backend_name` created for
/// each rank's config, `n_threads` CPU threads shared out between the ranks. The caches of the
/// batches it runs only count tokens (n_tokens, reserve, truncate); each rank keeps its own cache
/// per sequence, brought back to the sequence's n_tokens before every step (truncate, reset).
std::unique_ptr<ForwardPass> create_tensor_parallel_cpu_forward(const ModelState& model,
                                                                const std::string& backend_name, int n_threads);

}  // namespace latte::detail
