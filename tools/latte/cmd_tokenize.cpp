// `latte tokenize`: text -> token ids, ids -> text, with a GGUF vocabulary or a Hugging Face
// tokenizer.json (which it can also save as a vocabulary-only GGUF).
#include "command.hpp"

#include <latte/error.hpp>
#include <latte/gguf.hpp>
#include <latte/tokenizer.hpp>

#include "convert/hf_tokenizer.hpp"

#include <charconv>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

namespace {

constexpr const char* usage =
    "usage: latte tokenize (--model F.gguf | --hf DIR) [options] [TEXT...]\n"
    "  --model F.gguf       vocabulary from a GGUF file (tokenizer.ggml.*)\n"
    "  --hf DIR             vocabulary from DIR/tokenizer.json and DIR/tokenizer_config.json\n"
    "  --file F             tokenize the contents of file F instead of TEXT\n"
    "  --special            parse control tokens written in the text (e.g. <|User|>)\n"
    "  --no-bos             do not add BOS/EOS even if the vocabulary asks for them\n"
    "  --decode \"1 2 3\"     print the text of these ids instead\n"
    "  --write-vocab OUT    (with --hf) write the imported vocabulary as a GGUF file\n"
    "  --arch NAME          general.architecture of that file (default deepseek2)\n"
    "  --time               print the encoding time and throughput (MB/s) on stderr\n"
    "Prints the ids separated by spaces.\n";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw latte::Error(latte::ErrorCode::not_found, path + ": cannot open for reading");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<latte::Token> parse_ids(const std::string& text) {
  std::vector<latte::Token> ids;
  size_t at = 0;
  while (at < text.size()) {
    while (at < text.size() && (text[at] == ' ' || text[at] == ',' || text[at] == '\t' || text[at] == '\n')) ++at;
    if (at >= text.size()) break;
    latte::Token id = 0;
    const auto [end, ec] = std::from_chars(text.data() + at, text.data() + text.size(), id);
    if (ec != std::errc() ||
        (end != text.data() + text.size() && *end != ' ' && *end != ',' && *end != '\t' && *end != '\n')) {
      throw latte::Error(latte::ErrorCode::invalid_argument,
                         "--decode: '" + text.substr(at, 20) + "' is not a token id (byte " + std::to_string(at) + ")");
    }
    ids.push_back(id);
    at = static_cast<size_t>(end - text.data());
  }
  return ids;
}

int run_tokenize(std::span<const std::string> argv) {
  latte::cli::Args args(argv);
  if (args.flag({"--help", "-h"})) {
    std::fputs(usage, stdout);
    return 0;
  }
  const auto model = args.take({"--model", "-m"});
  const auto hf = args.take({"--hf"});
  const auto file = args.take({"--file", "-f"});
  const auto decode = args.take({"--decode"});
  const auto write_vocab = args.take({"--write-vocab"});
  const auto arch = args.take({"--arch"});
  const bool special = args.flag({"--special"});
  const bool no_bos = args.flag({"--no-bos"});
  const bool time = args.flag({"--time"});
  const auto positionals = args.positionals();
  if (model.has_value() == hf.has_value()) {
    throw latte::Error(latte::ErrorCode::invalid_argument,
                       "give exactly one of --model F.gguf or --hf DIR\n" + std::string(usage));
  }

  std::optional<latte::Tokenizer> tok;
  if (model) {
    tok = latte::Tokenizer::from_gguf(latte::gguf::File::open(*model));
  } else {
    const std::filesystem::path dir(*hf);
    const auto meta = latte::convert::import_hf_tokenizer_files((dir / "tokenizer.json").string(),
                                                                (dir / "tokenizer_config.json").string());
    if (write_vocab) {
      latte::gguf::Writer writer;
      writer.set("general.architecture", arch.value_or("deepseek2"));
      writer.set("general.name", dir.filename().string());
      meta.write_to(writer);
      writer.write(*write_vocab, [](size_t, std::span<std::byte>) {});
      std::fprintf(stderr, "wrote %s (%zu tokens, pre-tokenizer %s)\n", write_vocab->c_str(),
                   meta.vocabulary.tokens.size(), meta.vocabulary.pre.c_str());
      if (positionals.empty() && !file && !decode) return 0;
    }
    tok = latte::Tokenizer::from_vocabulary(meta.vocabulary);
  }
  if (write_vocab && model) {
    throw latte::Error(latte::ErrorCode::invalid_argument, "--write-vocab needs --hf DIR");
  }

  if (decode) {
    if (file || !positionals.empty()) {
      throw latte::Error(latte::ErrorCode::invalid_argument, "--decode takes no TEXT or --file");
    }
    std::cout << tok->decode(parse_ids(*decode), {.render_special = true}) << "\n";
    return 0;
  }
  std::string text;
  if (file) {
    if (!positionals.empty()) throw latte::Error(latte::ErrorCode::invalid_argument, "give --file or TEXT, not both");
    text = read_file(*file);
  } else {
    for (size_t i = 0; i < positionals.size(); ++i) text += (i ? " " : "") + positionals[i];
  }
  const auto start = std::chrono::steady_clock::now();
  const std::clock_t cpu_start = std::clock();
  const auto ids = tok->encode(text, {.add_special = !no_bos, .parse_special = special});
  if (time) {
    // CPU time of this thread's work is the figure to quote on a shared machine; wall time is shown too.
    const double cpu = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double mb = static_cast<double>(text.size()) / 1e6;
    std::fprintf(stderr, "encoded %zu bytes into %zu tokens: %.1f ms CPU (%.1f MB/s), %.1f ms wall (%.1f MB/s)\n",
                 text.size(), ids.size(), cpu * 1e3, mb / cpu, wall * 1e3, mb / wall);
  }
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) line += ' ';
    line += std::to_string(ids[i]);
  }
  std::cout << line << "\n";
  return 0;
}

const latte::cli::Registration registration{
    {"tokenize", "text to token ids and back with a GGUF or tokenizer.json vocabulary", run_tokenize}};

}  // namespace
