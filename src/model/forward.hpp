// The forward pass interface: one call runs every inference layer over a batch of new tokens that
// may belong to several sequences (each with its own cache), and writes the requested logits.
// Implementations: the fp32 CPU pass of each architecture (deepseek2.cpp, glm_dsa.cpp); a CUDA pass
// plugs in behind the same interface.
#pragma once

#include "session/kv_cache.hpp"

#include <latte/token.hpp>

#include <span>

namespace latte::detail {

/// One sequence of a batch. Its new tokens are the contiguous batch rows
/// [first_row, first_row + n_tokens), at positions cache->n_tokens() ... in order.
struct BatchSequence {
  KvCache* cache = nullptr;
  int first_row = 0;
  int n_tokens = 0;
};

/// A step over new tokens. The pass reserves cache room, writes each layer's rows and, at the end,
/// advances every sequence's cache by its n_tokens.
struct ForwardBatch {
  std::span<const Token> tokens;             ///< [T] token ids (already validated)
  std::span<const BatchSequence> sequences;  ///< cover rows [0, T) in order
  std::span<const int> logit_rows;           ///< batch rows whose logits are wanted
  float* logits = nullptr;                   ///< [logit_rows.size(), n_vocab]
};

/// Runs the model.
class ForwardPass {
 public:
  virtual ~ForwardPass() = default;
  virtual void run(const ForwardBatch& batch) = 0;
};

}  // namespace latte::detail
