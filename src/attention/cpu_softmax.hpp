// The masking and softmax both CPU attention backends apply to a block of score rows.
#pragma once

#include <cstdint>
#include <vector>

namespace latte::detail {

/// scores: [n_rows, n_kv] row-major, already scaled. Row r is the query at cache position
/// first_position + r: columns past it are masked (causal). With `selection` ([n_rows, width]
/// cache positions, -1 padding), every column not selected for the row is masked too. Then each
/// row becomes its softmax (masked entries 0). `mask` is scratch.
void mask_and_softmax(float* scores, int n_rows, int n_kv, int first_position, const int32_t* selection, int width,
                      std::vector<char>& mask);

}  // namespace latte::detail
