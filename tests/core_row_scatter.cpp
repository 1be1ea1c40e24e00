// scatter_rows: every row lands whole at its own destination, on the calling thread and spread over a pool
// (whole rows, and rows cut in pieces when there are few of them), and nothing around a destination moves.
#include "core/row_scatter.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace {

struct Case {
  size_t rows, width;
  unsigned threads;
  size_t parallel_from;
};

}  // namespace

TEST_CASE("scatter_rows copies each row whole to its destination, serially and over a pool") {
  std::mt19937 rng(std::random_device{}());
  // (1, 1) serial; a pool below its threshold (serial); whole rows over a pool; a few rows cut in 2-4 pieces
  // of a width no piece count divides; one row over 4 threads
  for (const Case c : {Case{5, 7, 1, 0}, Case{9, 33, 3, 1 << 20}, Case{40, 129, 3, 0}, Case{3, 1001, 4, 0},
                       Case{1, 4099, 4, 0}, Case{2, 5, 8, 0}}) {
    CAPTURE(c.rows);
    CAPTURE(c.width);
    CAPTURE(c.threads);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    std::vector<float> src(c.rows * c.width);
    for (float& v : src) v = value(rng);
    // destination rows in a shuffled order inside one buffer, a guard row of NaN between every two
    std::vector<size_t> slot(c.rows);
    std::iota(slot.begin(), slot.end(), size_t{0});
    std::shuffle(slot.begin(), slot.end(), rng);
    const size_t pitch = c.width + 3;
    std::vector<float> dst(c.rows * pitch + 3, NAN);
    latte::TaskPool pool(c.threads);
    latte::scatter_rows(
        src.data(), c.rows, c.width, [&](size_t i) { return dst.data() + 3 + slot[i] * pitch; },
        c.threads > 1 ? &pool : nullptr, c.parallel_from);
    size_t wrong = 0, guards_touched = 0;
    for (size_t i = 0; i < c.rows; ++i) {
      for (size_t j = 0; j < c.width; ++j) wrong += dst[3 + slot[i] * pitch + j] != src[i * c.width + j];
    }
    for (size_t r = 0; r <= c.rows; ++r) {
      for (size_t g = 0; g < 3; ++g) guards_touched += !std::isnan(dst[r * pitch + g]);
    }
    CHECK(wrong == 0);
    CHECK(guards_touched == 0);
  }
  latte::TaskPool pool(2);
  latte::scatter_rows(nullptr, 0, 16, [](size_t) -> float* { FAIL("no row expected"); return nullptr; }, &pool, 0);
}
