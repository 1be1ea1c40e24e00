// Byte-level BPE tokenizer (the GGUF "gpt2" tokenizer model) with the DeepSeek, GLM-4 and GPT-2
// pre-tokenizers, special-token parsing and a streaming-safe decoder.
//
//   auto tok = latte::Tokenizer::from_gguf(latte::gguf::File::open("model.gguf"));
//   std::vector<latte::Token> ids = tok.encode("Hello", {.add_special = true, .parse_special = false});
#pragma once

#include <latte/token.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace latte {

namespace gguf {
class File;
}

/// Kind of a vocabulary entry, numbered as in tokenizer.ggml.token_type (llama.cpp's numbering).
enum class TokenType : int32_t {
  undefined = 0,
  normal = 1,        ///< produced by BPE; its text is in the byte-level (GPT-2) alphabet
  unknown = 2,       ///< the unknown token
  control = 3,       ///< special token (BOS, EOS, chat markers); parsed from text only on request
  user_defined = 4,  ///< added token matched verbatim in any text, rendered verbatim
  unused = 5,        ///< padding entry (e.g. "[PAD123]"); never produced, decodes to nothing
  byte = 6,          ///< byte-fallback token "<0xXX>"
};

/// The data a tokenizer is built from: the tokenizer.ggml.* metadata of a GGUF file.
struct Vocabulary {
  std::string model = "gpt2";          ///< tokenizer.ggml.model; only "gpt2" (byte-level BPE) is supported
  std::string pre = "default";         ///< tokenizer.ggml.pre: gpt-2 (gpt2, default), deepseek-llm, ...
  std::vector<std::string> tokens;     ///< [n_vocab] token texts, by id
  std::vector<TokenType> token_types;  ///< [n_vocab] kinds, or empty for all normal
  std::vector<std::string> merges;     ///< BPE merges "left right", by rank (first = applied first)
  std::optional<Token> bos, eos, pad, unk;
  bool add_bos = false;       ///< encode() prepends bos when asked to add special tokens
  bool add_eos = false;       ///< encode() appends eos when asked to add special tokens
  std::string chat_template;  ///< tokenizer.chat_template (Jinja source), may be empty
};

/// Options of Tokenizer::encode.
struct EncodeOptions {
  bool add_special = true;     ///< add BOS/EOS as the vocabulary's add_bos/add_eos say
  bool parse_special = false;  ///< match control tokens (e.g. "<｜User｜>") written in the text
};

/// Options of Tokenizer::decode, token_to_piece and StreamDecoder.
struct DecodeOptions {
  bool render_special = true;  ///< write control/unknown tokens' text; when false they produce nothing
};

/// An immutable byte-level BPE tokenizer. Cheap to copy (shared state); thread-safe.
class Tokenizer {
 public:
  /// Builds the tokenizer from a GGUF file's tokenizer.ggml.* keys. Throws Error(not_found) for a
  /// missing required key, Error(invalid_file) naming the key for inconsistent data and
  /// Error(unsupported) naming an unknown tokenizer model or pre-tokenizer.
  static Tokenizer from_gguf(const gguf::File& file);
  /// Builds the tokenizer from plain vectors. Throws like from_gguf (key names refer to the fields).
  static Tokenizer from_vocabulary(Vocabulary vocabulary);

  /// Tokenizes `text` (any bytes: invalid UTF-8 is split as U+FFFD but encoded as its raw bytes).
  /// User-defined tokens are always matched, control tokens only with parse_special; among
  /// overlapping candidates the leftmost, then the longest wins.
  [[nodiscard]] std::vector<Token> encode(std::string_view text, const EncodeOptions& options = {}) const;
  /// The bytes of a whole sequence (may be invalid UTF-8 if the ids are). Throws
  /// Error(invalid_argument) naming the id and the vocabulary size for an id out of range.
  [[nodiscard]] std::string decode(std::span<const Token> ids, const DecodeOptions& options = {}) const;
  /// The bytes one token stands for (possibly part of a UTF-8 sequence). Throws like decode.
  [[nodiscard]] std::string token_to_piece(Token id, const DecodeOptions& options = {}) const;

  /// Number of tokens in the vocabulary.
  [[nodiscard]] size_t n_vocab() const noexcept;
  /// The stored text of a token (byte-level alphabet for normal tokens). Throws for a bad id.
  [[nodiscard]] const std::string& token_text(Token id) const;
  /// The kind of a token. Throws for a bad id.
  [[nodiscard]] TokenType token_type(Token id) const;
  /// The id of the token whose stored text is exactly `text`, if any.
  [[nodiscard]] std::optional<Token> find_token(std::string_view text) const;

  [[nodiscard]] std::optional<Token> bos() const noexcept;
  [[nodiscard]] std::optional<Token> eos() const noexcept;
  [[nodiscard]] std::optional<Token> pad() const noexcept;
  [[nodiscard]] std::optional<Token> unk() const noexcept;
  [[nodiscard]] bool add_bos() const noexcept;
  [[nodiscard]] bool add_eos() const noexcept;
  /// The canonical pre-tokenizer name ("deepseek-v3", "gpt-2", ...).
  [[nodiscard]] const std::string& pre_tokenizer() const noexcept;
  /// The Jinja chat template stored with the vocabulary ("" if none).
  [[nodiscard]] const std::string& chat_template() const noexcept;
  /// The vocabulary the tokenizer was built from.
  [[nodiscard]] const Vocabulary& vocabulary() const noexcept;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
  friend class StreamDecoder;
};

/// Turns tokens into text as they are generated, never splitting a UTF-8 character: bytes of an
/// incomplete multi-byte sequence are held back until the sequence completes. The concatenation of
/// every push() result and flush() equals Tokenizer::decode of the same ids.
///
///   latte::StreamDecoder out(tok);
///   for (latte::Token t : generated) std::cout << out.push(t);  std::cout << out.flush();
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, const DecodeOptions& options = {});
  /// Appends a token; returns the text that is now complete (possibly empty). Throws for a bad id.
  std::string push(Token id);
  /// Returns whatever is held back (an incomplete sequence, emitted as its raw bytes) and resets.
  std::string flush();
  /// Number of bytes currently held back (0..3).
  [[nodiscard]] size_t pending_bytes() const noexcept { return pending_.size(); }

 private:
  Tokenizer tokenizer_;
  DecodeOptions options_;
  std::string pending_;
};

}  // namespace latte
