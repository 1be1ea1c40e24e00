// The tokenizer part of a conversion: tokenizer.json + tokenizer_config.json of a Hugging Face folder
// written as GGUF tokenizer.ggml.* metadata (through the Hugging Face tokenizer importer).
//
//   bool written = latte::convert::write_tokenizer_metadata("DeepSeek-V3", 129280, false, writer);
#pragma once

#include <latte/gguf.hpp>

#include <string>

namespace latte::convert {

/// Adds the tokenizer metadata of `model_folder` to `writer` and returns true. Without a
/// tokenizer.json it returns false, unless `required`, when it throws Error(not_found). Malformed
/// tokenizer files throw as the importer does.
bool write_tokenizer_metadata(const std::string& model_folder, int n_vocab, bool required, gguf::Writer& writer);

}  // namespace latte::convert
