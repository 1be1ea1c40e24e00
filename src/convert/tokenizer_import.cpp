#include "convert/tokenizer_import.hpp"

#include <latte/error.hpp>

#include <cstdio>
#include <filesystem>

namespace latte::convert {

bool write_tokenizer_metadata(const std::string& model_folder, int n_vocab, bool required, gguf::Writer& writer) {
  namespace fs = std::filesystem;
  const fs::path tokenizer_json = fs::path(model_folder) / "tokenizer.json";
  std::error_code ec;
  if (!fs::exists(tokenizer_json, ec)) {
    if (required) throw Error(ErrorCode::not_found, tokenizer_json.string() + ": no such file");
    std::fprintf(stderr, "warning: %s: no tokenizer.json; the GGUF file gets no tokenizer metadata\n",
                 model_folder.c_str());
    return false;
  }
  (void)n_vocab;
  (void)writer;
  // The Hugging Face tokenizer importer plugs in here.
  throw Error(ErrorCode::unsupported,
              tokenizer_json.string() + ": this build cannot import Hugging Face tokenizers yet");
}

}  // namespace latte::convert
