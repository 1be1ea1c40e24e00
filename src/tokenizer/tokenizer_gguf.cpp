// Tokenizer::from_gguf: reads the tokenizer.ggml.* metadata into a Vocabulary.
#include <latte/error.hpp>
#include <latte/gguf.hpp>
#include <latte/tokenizer.hpp>

#include <cstdint>
#include <limits>
#include <type_traits>
#include <variant>

namespace latte {

namespace {

std::optional<Token> read_token_id(const gguf::File& file, std::string_view key) {
  const gguf::Value* v = file.find(key);
  if (!v) return std::nullopt;
  const auto id = v->as_int();
  if (!id) {
    throw Error(ErrorCode::invalid_file, file.path() + ": " + std::string(key) + " has type " +
                                             std::string(gguf::value_type_name(v->type())) +
                                             ", expected an integer token id");
  }
  if (*id < 0 || *id > std::numeric_limits<Token>::max()) {
    throw Error(ErrorCode::invalid_file,
                file.path() + ": " + std::string(key) + " = " + std::to_string(*id) + " is not a token id");
  }
  return static_cast<Token>(*id);
}

std::vector<TokenType> read_token_types(const gguf::File& file, std::string_view key) {
  std::vector<TokenType> out;
  if (!file.find(key)) return out;
  const gguf::Array& array = file.get_array_value(key);
  std::visit(
      [&](const auto& values) {
        using Element = typename std::decay_t<decltype(values)>::value_type;
        if constexpr (std::is_integral_v<Element> && !std::is_same_v<Element, bool>) {
          out.reserve(values.size());
          for (size_t i = 0; i < values.size(); ++i) {
            const auto t = static_cast<int64_t>(values[i]);
            if (t < 0 || t > 6) {
              throw Error(ErrorCode::invalid_file, file.path() + ": " + std::string(key) + "[" + std::to_string(i) +
                                                       "] = " + std::to_string(t) + " is not a token type (0..6)");
            }
            out.push_back(static_cast<TokenType>(t));
          }
        } else {
          throw Error(ErrorCode::invalid_file, file.path() + ": " + std::string(key) + " is an array of " +
                                                   std::string(gguf::value_type_name(array.element_type)) +
                                                   ", expected integers");
        }
      },
      array.values);
  return out;
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const gguf::File& file) {
  Vocabulary v;
  v.model = file.get<std::string>("tokenizer.ggml.model");
  v.pre = file.get_or<std::string>("tokenizer.ggml.pre", "default");
  v.tokens = file.get_strings("tokenizer.ggml.tokens");
  v.token_types = read_token_types(file, "tokenizer.ggml.token_type");
  if (file.find("tokenizer.ggml.merges")) {
    v.merges = file.get_strings("tokenizer.ggml.merges");
  } else if (v.model == "gpt2") {
    throw Error(ErrorCode::not_found, file.path() + ": tokenizer.ggml.merges is missing (needed by BPE)");
  }
  v.bos = read_token_id(file, "tokenizer.ggml.bos_token_id");
  v.eos = read_token_id(file, "tokenizer.ggml.eos_token_id");
  v.pad = read_token_id(file, "tokenizer.ggml.padding_token_id");
  v.unk = read_token_id(file, "tokenizer.ggml.unknown_token_id");
  v.add_bos = file.get_or<bool>("tokenizer.ggml.add_bos_token", false);
  v.add_eos = file.get_or<bool>("tokenizer.ggml.add_eos_token", false);
  v.chat_template = file.get_or<std::string>("tokenizer.chat_template", "");
  try {
    return from_vocabulary(std::move(v));
  } catch (const Error& e) {
    throw Error(e.code(), file.path() + ": " + e.what());
  }
}

}  // namespace latte
