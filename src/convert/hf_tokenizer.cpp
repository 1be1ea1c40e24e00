// Hugging Face tokenizer.json / tokenizer_config.json -> GGUF tokenizer metadata.
#include "convert/hf_tokenizer.hpp"

#include <latte/error.hpp>

#include "tokenizer/pre_tokenizer.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <unordered_map>

namespace latte::convert {

namespace {

using Json = nlohmann::json;

// A JSON value together with the file it came from and its JSON-pointer path, for error messages.
struct Node {
  const Json& json;
  const std::string& file;
  std::string path;

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(ErrorCode::invalid_file, file + ": " + (path.empty() ? "/" : path) + " " + what);
  }
  Node at(const std::string& key) const {
    if (!json.is_object()) fail("must be an object");
    const auto it = json.find(key);
    if (it == json.end()) fail("has no member \"" + key + "\"");
    return {*it, file, path + "/" + key};
  }
  std::optional<Node> find(const std::string& key) const {
    if (!json.is_object()) fail("must be an object");
    const auto it = json.find(key);
    if (it == json.end() || it->is_null()) return std::nullopt;
    return Node{*it, file, path + "/" + key};
  }
  Node operator[](size_t i) const { return {json[i], file, path + "/" + std::to_string(i)}; }
  const std::string& string() const {
    if (!json.is_string()) fail("must be a string");
    return json.get_ref<const std::string&>();
  }
  bool boolean() const {
    if (!json.is_boolean()) fail("must be true or false");
    return json.get<bool>();
  }
  int64_t integer() const {
    if (!json.is_number_integer()) fail("must be an integer");
    return json.get<int64_t>();
  }
  size_t array_size() const {
    if (!json.is_array()) fail("must be an array");
    return json.size();
  }
};

Json parse(const std::string& text, const std::string& name) {
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    throw Error(ErrorCode::invalid_file, name + ": not valid JSON: " + e.what());
  }
}

// Looks-special heuristic of llama.cpp's converter: added tokens that are not marked special but
// are spelled like control markers become control tokens.
bool looks_special(const std::string& t) {
  const auto starts = [&](std::string_view p) { return t.size() >= p.size() && t.compare(0, p.size(), p) == 0; };
  const auto ends = [&](std::string_view s) {
    return t.size() >= s.size() && t.compare(t.size() - s.size(), s.size(), s) == 0;
  };
  if (t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]") return true;
  if (starts("<|") && ends("|>") && t.size() >= 4) return true;
  if (starts("<\xEF\xBD\x9C") && ends("\xEF\xBD\x9C>") && t.size() >= 8) return true;  // <｜ ... ｜>
  return starts("<unused") && ends(">");
}

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
  return s;
}

// The pre-tokenizer name of tokenizer.json's pre_tokenizer.
std::string detect_pre(const Node& root) {
  const auto pre = root.find("pre_tokenizer");
  if (!pre) {
    throw Error(ErrorCode::unsupported,
                root.file + ": /pre_tokenizer is null; byte-level BPE without a pre-tokenizer is not supported");
  }
  std::vector<std::string> patterns;
  const auto add_step = [&](const Node& step, bool last) {
    const std::string& type = step.at("type").string();
    if (type == "ByteLevel") {
      if (!last) step.fail("is a ByteLevel pre-tokenizer that is not the last step; not supported");
      const auto use_regex = step.find("use_regex");
      if (!use_regex || use_regex->boolean()) {
        patterns.emplace_back(tokenizer::known_pre_tokenizers().front().patterns.front());  // GPT-2's split
      }
      if (const auto prefix = step.find("add_prefix_space"); prefix && prefix->boolean()) {
        throw Error(ErrorCode::unsupported, root.file + ": " + step.path + " has add_prefix_space = true");
      }
      return true;
    }
    if (type == "Split") {
      const Node pattern = step.at("pattern");
      std::string regex;
      if (const auto r = pattern.find("Regex")) {
        regex = r->string();
      } else if (const auto s = pattern.find("String")) {
        for (char c : s->string()) {  // a literal: escape the metacharacters
          if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) regex += '\\';
          regex += c;
        }
      } else {
        pattern.fail("has neither \"Regex\" nor \"String\"");
      }
      const auto behavior = step.find("behavior");
      if (!behavior || behavior->string() != "Isolated") {
        throw Error(ErrorCode::unsupported,
                    root.file + ": " + step.path + " splits with a behavior other than \"Isolated\"");
      }
      if (const auto invert = step.find("invert"); invert && invert->boolean()) {
        throw Error(ErrorCode::unsupported, root.file + ": " + step.path + " has invert = true");
      }
      patterns.push_back(regex);
      return false;
    }
    throw Error(ErrorCode::unsupported, root.file + ": " + step.path + " is a '" + type +
                                            "' pre-tokenizer; latte supports Split and ByteLevel");
  };
  const std::string& type = pre->at("type").string();
  bool saw_byte_level = false;
  if (type == "Sequence") {
    const Node steps = pre->at("pretokenizers");
    const size_t n = steps.array_size();
    for (size_t i = 0; i < n; ++i) saw_byte_level = add_step(steps[i], i + 1 == n) || saw_byte_level;
  } else {
    saw_byte_level = add_step(*pre, true);
  }
  if (!saw_byte_level) {
    throw Error(ErrorCode::unsupported, root.file + ": /pre_tokenizer has no ByteLevel step; not a byte-level BPE");
  }
  if (auto name = tokenizer::detect_pre_tokenizer(patterns)) return *name;
  std::string list;
  for (const auto& p : patterns) list += "\n  " + p;
  throw Error(ErrorCode::unsupported, root.file +
                                          ": /pre_tokenizer is not a known pre-tokenizer (deepseek-llm, "
                                          "deepseek-coder, deepseek-v3, glm4, gpt-2); its split patterns are:" +
                                          list);
}

void check_normalizer(const Node& root) {
  const auto normalizer = root.find("normalizer");
  if (!normalizer) return;
  const std::string& type = normalizer->at("type").string();
  if (type == "Sequence" && normalizer->at("normalizers").array_size() == 0) return;
  // NFC is accepted as llama.cpp accepts it: GGUF cannot express normalizers, and text that is
  // already NFC (almost all text) tokenizes the same.
  if (type == "NFC") return;
  throw Error(ErrorCode::unsupported, root.file + ": /normalizer of type '" + type + "' cannot be expressed in GGUF");
}

}  // namespace

TokenizerMetadata import_hf_tokenizer(const std::string& tokenizer_json, const std::string& tokenizer_config_json,
                                      const HfTokenizerOptions& options) {
  const Json doc = parse(tokenizer_json, options.tokenizer_json_name);
  const Node root{doc, options.tokenizer_json_name, ""};
  const Node model = root.at("model");
  const std::string& model_type = model.find("type") ? model.at("type").string() : std::string("BPE");
  if (model_type != "BPE") {
    throw Error(ErrorCode::unsupported,
                root.file + ": /model/type is '" + model_type + "'; latte imports byte-level BPE tokenizers only");
  }
  check_normalizer(root);

  TokenizerMetadata meta;
  Vocabulary& v = meta.vocabulary;
  v.model = "gpt2";
  v.pre = detect_pre(root);

  // id -> text, from the model vocabulary then the added tokens.
  std::map<int64_t, std::string> by_id;
  std::unordered_map<std::string, int64_t> id_of;
  const Node vocab = model.at("vocab");
  if (!vocab.json.is_object()) vocab.fail("must be an object mapping token text to id");
  for (const auto& [text, id_json] : vocab.json.items()) {
    const Node id_node{id_json, root.file, vocab.path + "/" + text};
    const int64_t id = id_node.integer();
    if (id < 0 || id >= (int64_t{1} << 31)) id_node.fail("is not a valid token id");
    if (!by_id.emplace(id, text).second) id_node.fail("reuses id " + std::to_string(id));
    id_of.emplace(text, id);
  }
  struct Added {
    bool special;
  };
  std::map<int64_t, Added> added;
  if (const auto list = root.find("added_tokens")) {
    const size_t n = list->array_size();
    for (size_t i = 0; i < n; ++i) {
      const Node t = (*list)[i];
      const int64_t id = t.at("id").integer();
      if (id < 0 || id >= (int64_t{1} << 31)) t.at("id").fail("is not a valid token id");
      const std::string& content = t.at("content").string();
      const auto special = t.find("special");
      added[id] = Added{special ? special->boolean() : false};
      auto [it, inserted] = by_id.emplace(id, content);
      if (!inserted && it->second != content) {
        t.fail("gives id " + std::to_string(id) + " the text '" + content + "' but the vocabulary has '" + it->second +
               "'");
      }
      id_of[content] = id;
    }
  }
  if (by_id.empty()) root.fail("defines no tokens");
  const int64_t defined = by_id.rbegin()->first + 1;
  const int64_t n_vocab = options.vocab_size ? int64_t{*options.vocab_size} : defined;
  if (n_vocab < defined) {
    throw Error(ErrorCode::invalid_file, root.file + ": defines token id " + std::to_string(defined - 1) +
                                             " but the model's vocab_size is " + std::to_string(n_vocab));
  }
  const bool byte_fallback = model.find("byte_fallback") && model.at("byte_fallback").boolean();
  v.tokens.reserve(static_cast<size_t>(n_vocab));
  v.token_types.reserve(static_cast<size_t>(n_vocab));
  for (int64_t id = 0; id < n_vocab; ++id) {
    const auto it = by_id.find(id);
    if (it == by_id.end()) {
      v.tokens.push_back("[PAD" + std::to_string(id) + "]");
      v.token_types.push_back(TokenType::unused);
      continue;
    }
    std::string text = it->second;
    TokenType type = TokenType::normal;
    if (const auto a = added.find(id); a != added.end()) {
      if (a->second.special || looks_special(text)) {
        type = TokenType::control;
      } else {
        type = TokenType::user_defined;
        text = replace_all(std::move(text), "\xE2\x96\x81", " ");  // pre-normalise SentencePiece spaces
      }
    } else if (byte_fallback && text.size() == 6 && text.compare(0, 3, "<0x") == 0 && text[5] == '>') {
      type = TokenType::byte;
    }
    v.tokens.push_back(std::move(text));
    v.token_types.push_back(type);
  }

  const Node merges = model.at("merges");
  const size_t n_merges = merges.array_size();
  v.merges.reserve(n_merges);
  for (size_t i = 0; i < n_merges; ++i) {
    const Node m = merges[i];
    if (m.json.is_string()) {
      v.merges.push_back(m.string());
    } else if (m.json.is_array() && m.json.size() == 2) {
      v.merges.push_back(m[0].string() + " " + m[1].string());
    } else {
      m.fail("must be a string \"left right\" or a pair of strings");
    }
  }

  // tokenizer_config.json: special tokens, add_bos/add_eos, chat template.
  if (!tokenizer_config_json.empty()) {
    const Json cfg_doc = parse(tokenizer_config_json, options.tokenizer_config_name);
    const Node cfg{cfg_doc, options.tokenizer_config_name, ""};
    if (!cfg.json.is_object()) cfg.fail("must be an object");
    const auto special_id = [&](const char* key) -> std::optional<Token> {
      const auto entry = cfg.find(key);
      if (!entry) return std::nullopt;
      const std::string& content = entry->json.is_object() ? entry->at("content").string() : entry->string();
      const auto it = id_of.find(content);
      if (it == id_of.end()) entry->fail("names the token '" + content + "', which " + root.file + " does not define");
      return static_cast<Token>(it->second);
    };
    v.bos = special_id("bos_token");
    v.eos = special_id("eos_token");
    v.pad = special_id("pad_token");
    v.unk = special_id("unk_token");
    if (const auto b = cfg.find("add_bos_token")) {
      v.add_bos = b->boolean();
      meta.has_add_bos = true;
    }
    if (const auto e = cfg.find("add_eos_token")) {
      v.add_eos = e->boolean();
      meta.has_add_eos = true;
    }
    if (const auto t = cfg.find("chat_template")) {
      if (t->json.is_string()) {
        v.chat_template = t->string();
      } else {
        const size_t n = t->array_size();
        for (size_t i = 0; i < n; ++i) {
          const Node entry = (*t)[i];
          const std::string& name = entry.at("name").string();
          const std::string& text = entry.at("template").string();
          if (name == "default") {
            v.chat_template = text;
          } else {
            meta.named_chat_templates.emplace_back(name, text);
          }
        }
      }
    }
  }

  // Validate by building the tokenizer once (catches ids, merges and pre-tokenizer problems).
  try {
    (void)Tokenizer::from_vocabulary(v);
  } catch (const Error& e) {
    throw Error(e.code(), root.file + ": the imported vocabulary is inconsistent: " + e.what());
  }
  return meta;
}

std::vector<gguf::KeyValue> TokenizerMetadata::key_values() const {
  const Vocabulary& v = vocabulary;
  std::vector<gguf::KeyValue> out;
  const auto add = [&](std::string key, gguf::Value value) { out.push_back({std::move(key), std::move(value)}); };
  const auto string_array = [](const std::vector<std::string>& values) { return gguf::Value(gguf::Array(values)); };
  add("tokenizer.ggml.model", gguf::Value(v.model));
  add("tokenizer.ggml.pre", gguf::Value(v.pre));
  add("tokenizer.ggml.tokens", string_array(v.tokens));
  std::vector<int32_t> types(v.token_types.size());
  for (size_t i = 0; i < types.size(); ++i) types[i] = static_cast<int32_t>(v.token_types[i]);
  add("tokenizer.ggml.token_type", gguf::Value(gguf::Array(std::move(types))));
  add("tokenizer.ggml.merges", string_array(v.merges));
  if (v.bos) add("tokenizer.ggml.bos_token_id", gguf::Value(static_cast<uint32_t>(*v.bos)));
  if (v.eos) add("tokenizer.ggml.eos_token_id", gguf::Value(static_cast<uint32_t>(*v.eos)));
  if (v.unk) add("tokenizer.ggml.unknown_token_id", gguf::Value(static_cast<uint32_t>(*v.unk)));
  if (v.pad) add("tokenizer.ggml.padding_token_id", gguf::Value(static_cast<uint32_t>(*v.pad)));
  if (has_add_bos) add("tokenizer.ggml.add_bos_token", gguf::Value(v.add_bos));
  if (has_add_eos) add("tokenizer.ggml.add_eos_token", gguf::Value(v.add_eos));
  if (!v.chat_template.empty()) add("tokenizer.chat_template", gguf::Value(v.chat_template));
  for (const auto& [name, text] : named_chat_templates) add("tokenizer.chat_template." + name, gguf::Value(text));
  return out;
}

void TokenizerMetadata::write_to(gguf::Writer& writer) const {
  for (auto& kv : key_values()) writer.set(std::move(kv.key), std::move(kv.value));
}

namespace {

std::string read_text_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw Error(ErrorCode::not_found, path + ": no such file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::io, path + ": cannot open for reading");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error(ErrorCode::io, path + ": read failed");
  return ss.str();
}

}  // namespace

TokenizerMetadata import_hf_tokenizer_files(const std::string& tokenizer_json_path,
                                            const std::string& tokenizer_config_path,
                                            std::optional<uint32_t> vocab_size) {
  std::string config;
  std::error_code ec;
  if (!tokenizer_config_path.empty() && std::filesystem::exists(tokenizer_config_path, ec)) {
    config = read_text_file(tokenizer_config_path);
  }
  return import_hf_tokenizer(read_text_file(tokenizer_json_path), config,
                             {.vocab_size = vocab_size,
                              .tokenizer_json_name = tokenizer_json_path,
                              .tokenizer_config_name = tokenizer_config_path});
}

}  // namespace latte::convert
