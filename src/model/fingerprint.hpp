// A model's fingerprint: a 64-bit hash that tells two GGUF files apart before a saved session state
// is applied to the wrong model. Computed once per Model (at load), from every metadata key and
// value, the tensor table (names, types, shapes, offsets) and a sample of each tensor's bytes
// (up to 64 at its start, middle and end), so two files with identical metadata but different
// weights differ too; a few pages per tensor are read, never the whole file.
//
//   uint64_t fp = latte::detail::model_fingerprint(file);
#pragma once

#include <latte/gguf.hpp>

#include <cstdint>

namespace latte::detail {

/// The fingerprint of `file` (stable across runs, platforms and copies of the same file).
[[nodiscard]] uint64_t model_fingerprint(const gguf::File& file);

}  // namespace latte::detail
