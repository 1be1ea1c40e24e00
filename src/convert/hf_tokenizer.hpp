// Imports a Hugging Face tokenizer (tokenizer.json + tokenizer_config.json) as the GGUF
// tokenizer.ggml.* metadata llama.cpp's converter writes for byte-level BPE models.
//
//   auto meta = latte::convert::import_hf_tokenizer(read("tokenizer.json"), read("tokenizer_config.json"));
//   meta.write_to(writer);   // tokenizer.ggml.model, .pre, .tokens, .token_type, .merges, ids, template
#pragma once

#include <latte/gguf.hpp>
#include <latte/tokenizer.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace latte::convert {

/// Options of import_hf_tokenizer.
struct HfTokenizerOptions {
  /// The model's vocabulary size (config.json "vocab_size"). Ids below it that the tokenizer does
  /// not define become "[PAD<id>]" entries of type unused, as llama.cpp's converter writes them.
  /// When absent, the vocabulary ends at the largest defined id.
  std::optional<uint32_t> vocab_size;
  /// Names used in error messages.
  std::string tokenizer_json_name = "tokenizer.json";
  std::string tokenizer_config_name = "tokenizer_config.json";
};

/// The imported tokenizer: a Vocabulary (buildable with Tokenizer::from_vocabulary) plus what GGUF
/// stores besides it.
struct TokenizerMetadata {
  Vocabulary vocabulary;
  bool has_add_bos = false;  ///< tokenizer_config.json states add_bos_token (written only then)
  bool has_add_eos = false;  ///< tokenizer_config.json states add_eos_token (written only then)
  /// Named chat templates other than the default one (tokenizer.chat_template.<name>).
  std::vector<std::pair<std::string, std::string>> named_chat_templates;

  /// The GGUF metadata, in the order llama.cpp writes it.
  [[nodiscard]] std::vector<gguf::KeyValue> key_values() const;
  /// Sets every key of key_values() on `writer`.
  void write_to(gguf::Writer& writer) const;
};

/// Imports from the two files' contents. `tokenizer_config_json` may be empty (no such file).
/// Throws Error(invalid_file) naming the file and the JSON path at fault for malformed input, and
/// Error(unsupported) naming the model type, pre-tokenizer patterns or normalizer it cannot map.
TokenizerMetadata import_hf_tokenizer(const std::string& tokenizer_json, const std::string& tokenizer_config_json,
                                      const HfTokenizerOptions& options = {});

/// Reads the files and imports them. `tokenizer_config_path` may be empty or name a missing file.
/// Throws Error(not_found)/Error(io) for unreadable files, then like import_hf_tokenizer.
TokenizerMetadata import_hf_tokenizer_files(const std::string& tokenizer_json_path,
                                            const std::string& tokenizer_config_path,
                                            std::optional<uint32_t> vocab_size = std::nullopt);

}  // namespace latte::convert
