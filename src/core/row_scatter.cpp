#include "core/row_scatter.hpp"

#include <algorithm>
#include <cstring>

namespace latte {

void scatter_rows(const float* src, size_t n_rows, size_t width, const std::function<float*(size_t)>& dest,
                  TaskPool* pool, size_t parallel_from) {
  const size_t row_bytes = width * sizeof(float);
  if (n_rows == 0 || width == 0) return;
  if (pool == nullptr || pool->n_threads() <= 1 || n_rows * row_bytes < parallel_from) {
    for (size_t i = 0; i < n_rows; ++i) std::memcpy(dest(i), src + i * width, row_bytes);
    return;
  }
  // whole rows, or each row cut in up to 4 pieces when there are fewer rows than 2 per thread
  const size_t threads = pool->n_threads();
  const size_t pieces_per_row = std::clamp<size_t>((2 * threads + n_rows - 1) / n_rows, 1, 4);
  const size_t piece = (width + pieces_per_row - 1) / pieces_per_row;
  pool->run(n_rows * pieces_per_row, [&](size_t task) {
    const size_t i = task / pieces_per_row, begin = task % pieces_per_row * piece;
    const size_t end = std::min(width, begin + piece);
    if (begin < end) std::memcpy(dest(i) + begin, src + i * width + begin, (end - begin) * sizeof(float));
  });
}

}  // namespace latte
