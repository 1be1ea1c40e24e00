#include "convert/tokenizer_import.hpp"

#include "convert/hf_tokenizer.hpp"

#include <latte/error.hpp>

#include <cstdint>
#include <filesystem>

namespace latte::convert {

bool write_tokenizer_metadata(const std::string& model_folder, int n_vocab, bool required, gguf::Writer& writer) {
  namespace fs = std::filesystem;
  const fs::path tokenizer_json = fs::path(model_folder) / "tokenizer.json";
  std::error_code ec;
  if (!fs::exists(tokenizer_json, ec)) {
    if (required) throw Error(ErrorCode::not_found, tokenizer_json.string() + ": no such file");
    return false;
  }
  const auto tokenizer =
      import_hf_tokenizer_files(tokenizer_json.string(), (fs::path(model_folder) / "tokenizer_config.json").string(),
                                static_cast<uint32_t>(n_vocab));
  tokenizer.write_to(writer);
  return true;
}

}  // namespace latte::convert
