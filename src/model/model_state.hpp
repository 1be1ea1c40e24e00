// The shared, immutable state behind latte::Model: the mapped file, its config, audit and views.
#pragma once

#include "model/weights.hpp"

#include <latte/error.hpp>
#include <latte/gguf.hpp>
#include <latte/model.hpp>
#include <latte/tokenizer.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace latte::detail {

struct ModelState {
  ModelState(gguf::File f, Device d) : file(std::move(f)), device(d) {}

  gguf::File file;  ///< owns the mapping every TensorView points into
  ModelConfig config{};
  WeightAudit audit{};
  ModelWeights weights{};  ///< views into `file`
  Device device;
  uint64_t fingerprint = 0;                         ///< model_fingerprint(file), see model/fingerprint.hpp
  std::optional<Tokenizer> tokenizer{};             ///< when the file has a usable tokenizer
  Error tokenizer_error{ErrorCode::not_found, ""};  ///< why `tokenizer` is empty
};

}  // namespace latte::detail
