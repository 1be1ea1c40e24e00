// What one rank's forward pass needs to know about tensor parallelism: the communicator that sums
// the partial results, and which routed experts the rank holds. A forward pass given a RankContext
// computes, at the two reduction points of every block (after attn_output and after the FFN down
// projections), only its share into a scratch buffer, all-reduces it, then adds it to the residual.
#pragma once

#include "parallel/communicator.hpp"

namespace latte::detail {

struct RankContext {
  Communicator* communicator = nullptr;  ///< sums the partial outputs of all ranks
  int expert_first = 0;                  ///< first routed expert held (expert-parallel)
  int expert_count = 0;                  ///< routed experts held; the rank's expert tensors start at expert_first
};

}  // namespace latte::detail
