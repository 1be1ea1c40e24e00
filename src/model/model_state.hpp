// The shared, immutable state behind latte::Model: the mapped file, its config, audit and views.
#pragma once

#include "model/weights.hpp"

#include <latte/gguf.hpp>
#include <latte/model.hpp>

namespace latte::detail {

struct ModelState {
  gguf::File file;  ///< owns the mapping every TensorView points into
  ModelConfig config;
  WeightAudit audit;
  ModelWeights weights;  ///< views into `file`
  Device device;
};

}  // namespace latte::detail
