// Copies the rows of a dense [n_rows, width] float array to a destination per row, spread over a TaskPool
// when there is enough to copy. The CUDA pass hands each session its logits row out of the step's pinned
// buffer this way: 128 rows of a 129,280-entry vocabulary are 66 MB per decode step, several ms for one
// thread on the serial path of every step.
//
//   latte::TaskPool pool(8);
//   latte::scatter_rows(src, n_rows, width, [&](size_t i) { return session_row(i); }, &pool);
#pragma once

#include <cstddef>
#include <functional>

#include "core/task_pool.hpp"

namespace latte {

/// From this many bytes a scatter_rows call with a pool spreads its copies over the pool's threads.
inline constexpr size_t kParallelScatterBytes = size_t{8} << 20;

/// For i in [0, n_rows): copies src[i * width, (i + 1) * width) to dest(i) (width floats, not overlapping
/// src). Runs on the calling thread when `pool` is null or the copy is under `parallel_from` bytes; else as
/// pool tasks of whole rows, or of quarters / halves of rows when there are fewer than two rows per thread.
/// dest(i) may be called from any of the pool's threads.
void scatter_rows(const float* src, size_t n_rows, size_t width, const std::function<float*(size_t)>& dest,
                  TaskPool* pool, size_t parallel_from = kParallelScatterBytes);

}  // namespace latte
