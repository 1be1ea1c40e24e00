#include "attention/cpu_softmax.hpp"

#include "cpu/norms.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>

namespace latte::detail {

void mask_and_softmax(float* scores, int n_rows, int n_kv, int first_position, const int32_t* selection, int width,
                      std::vector<char>& mask) {
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  for (int r = 0; r < n_rows; ++r) {
    float* row = scores + static_cast<size_t>(r) * n_kv;
    const int visible = std::min(n_kv, first_position + r + 1);
    std::fill(row + visible, row + n_kv, kMasked);
    if (selection) {
      mask.assign(static_cast<size_t>(visible), 0);
      const int32_t* sel = selection + static_cast<size_t>(r) * width;
      for (int j = 0; j < width; ++j) {
        if (sel[j] >= 0 && sel[j] < visible) mask[static_cast<size_t>(sel[j])] = 1;
      }
      for (int j = 0; j < visible; ++j) {
        if (!mask[static_cast<size_t>(j)]) row[j] = kMasked;
      }
    }
    cpu::softmax_row(row, n_kv);
  }
}

}  // namespace latte::detail
