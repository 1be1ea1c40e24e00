// The pre-tokenizer regex cascades, learned from the tokenizer.json files these models ship.
// Non-ASCII characters are written as \x{..} escapes so the source survives any normalisation.
#include "tokenizer/pre_tokenizer.hpp"

#include <cstdint>
#include <latte/error.hpp>

namespace latte::tokenizer {

namespace {

// GPT-2's ByteLevel(use_regex = true) split.
constexpr std::string_view gpt2_pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// The same split as some converters spell it, without the final |\s+ (equivalent: \s+(?!\S) and
// the fallback together cover every white-space run, as the last character of a run always matches).
constexpr std::string_view gpt2_pattern_short =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";

// DeepSeek LLM (V1, V2, V2.5): newlines, cased letters with one leading space, ASCII and full-width
// punctuation, trailing white space, CJK + Hangul, digit runs.
constexpr std::string_view deepseek_llm_letters =
    R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF})"
    R"(\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1})"
    R"(\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5})"
    R"(\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A})"
    R"(\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B})"
    R"(\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC})"
    R"(\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107})"
    R"(\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134})"
    R"(\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4})"
    R"(\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787})"
    R"(\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A})"
    R"(\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2})"
    R"(\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)";
constexpr std::string_view deepseek_llm_punctuation =
    R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)";
constexpr std::string_view deepseek_cjk = R"([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";

// DeepSeek V3 / R1: digit groups of up to three, CJK + kana runs, then the main split.
constexpr std::string_view deepseek_v3_cjk = R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)";
constexpr std::string_view deepseek_v3_main =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|)"
    R"( ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// GLM-4 family (the Llama-3 style split with 1-3 digit groups).
constexpr std::string_view glm4_pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|)"
    R"(\s+(?!\S)|\s+)";
constexpr std::string_view glm4_pattern_classes =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|)"
    R"( ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::vector<PreTokenizerSpec> make_specs() {
  std::vector<PreTokenizerSpec> specs;
  specs.push_back({.name = "gpt-2",
                   .aliases = {"gpt2", "default"},
                   .patterns = {gpt2_pattern},
                   .equivalent_patterns = {{gpt2_pattern_short}}});
  specs.push_back(
      {.name = "deepseek-llm",
       .aliases = {},
       .patterns = {R"([\r\n])", deepseek_llm_letters, deepseek_llm_punctuation, R"(\s+$)", deepseek_cjk, R"(\p{N}+)"},
       .equivalent_patterns = {}});
  specs.push_back({.name = "deepseek-coder",
                   .aliases = {},
                   .patterns = {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", deepseek_cjk, R"(\p{N})"},
                   .equivalent_patterns = {}});
  specs.push_back({.name = "deepseek-v3",
                   .aliases = {},
                   .patterns = {R"(\p{N}{1,3})", deepseek_v3_cjk, deepseek_v3_main},
                   .equivalent_patterns = {}});
  specs.push_back({.name = "glm4",
                   .aliases = {"chatglm-bpe"},
                   .patterns = {glm4_pattern},
                   .equivalent_patterns = {{glm4_pattern_classes}}});
  return specs;
}

// Decodes escapes that stand for a single non-metacharacter (\x{..} \xHH \uHHHH \UHHHHHHHH for
// non-ASCII code points, \r \n \t) so differently escaped spellings of one pattern compare equal.
std::string canonical_pattern(std::string_view p) {
  std::string out;
  auto hex_value = [](std::string_view digits, uint32_t& v) {
    if (digits.empty() || digits.size() > 8) return false;
    v = 0;
    for (char c : digits) {
      uint32_t d;
      if (c >= '0' && c <= '9') {
        d = static_cast<uint32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        d = static_cast<uint32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        d = static_cast<uint32_t>(c - 'A' + 10);
      } else {
        return false;
      }
      v = v * 16 + d;
    }
    return v <= 0x10FFFF;
  };
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] != '\\' || i + 1 >= p.size()) {
      out += p[i];
      continue;
    }
    const char e = p[i + 1];
    if (e == 'r' || e == 'n' || e == 't') {
      out += e == 'r' ? '\r' : e == 'n' ? '\n' : '\t';
      ++i;
      continue;
    }
    size_t digits_at = 0, digits_len = 0, consumed = 0;
    if (e == 'x' && i + 2 < p.size() && p[i + 2] == '{') {
      const size_t close = p.find('}', i + 3);
      if (close != std::string_view::npos) digits_at = i + 3, digits_len = close - (i + 3), consumed = close - i + 1;
    } else if (e == 'x') {
      digits_at = i + 2, digits_len = 2, consumed = 4;
    } else if (e == 'u') {
      digits_at = i + 2, digits_len = 4, consumed = 6;
    } else if (e == 'U') {
      digits_at = i + 2, digits_len = 8, consumed = 10;
    }
    uint32_t v = 0;
    if (consumed != 0 && digits_at + digits_len <= p.size() && hex_value(p.substr(digits_at, digits_len), v) &&
        v >= 0x80) {
      unicode::append_utf8(out, v);
      i += consumed - 1;
      continue;
    }
    out += p[i];
    out += p[i + 1];
    ++i;
  }
  return out;
}

bool same_cascade(std::span<const std::string> given, const std::vector<std::string_view>& known) {
  if (given.size() != known.size()) return false;
  for (size_t i = 0; i < known.size(); ++i) {
    if (canonical_pattern(given[i]) != canonical_pattern(known[i])) return false;
  }
  return true;
}

}  // namespace

const std::vector<PreTokenizerSpec>& known_pre_tokenizers() {
  static const std::vector<PreTokenizerSpec> specs = make_specs();
  return specs;
}

std::optional<std::string> detect_pre_tokenizer(std::span<const std::string> patterns) {
  for (const auto& spec : known_pre_tokenizers()) {
    if (same_cascade(patterns, spec.patterns)) return std::string(spec.name);
    for (const auto& alt : spec.equivalent_patterns) {
      if (same_cascade(patterns, alt)) return std::string(spec.name);
    }
  }
  return std::nullopt;
}

PreTokenizer PreTokenizer::for_name(std::string_view name) {
  std::string supported;
  for (const auto& spec : known_pre_tokenizers()) {
    bool hit = spec.name == name;
    for (auto alias : spec.aliases) hit = hit || alias == name;
    if (hit) return from_patterns(std::string(spec.name), spec.patterns);
    supported += (supported.empty() ? "" : ", ") + std::string(spec.name);
    for (auto alias : spec.aliases) supported += ", " + std::string(alias);
  }
  throw Error(ErrorCode::unsupported,
              "unknown pre-tokenizer '" + std::string(name) + "' (tokenizer.ggml.pre); supported: " + supported);
}

PreTokenizer PreTokenizer::from_patterns(std::string name, std::span<const std::string_view> patterns) {
  PreTokenizer p;
  p.name_ = std::move(name);
  for (auto pattern : patterns) p.regexes_.push_back(Regex::compile(pattern));
  return p;
}

void PreTokenizer::split(const unicode::DecodedText& text, uint32_t begin, uint32_t end, std::vector<Span>& pieces,
                         PreTokenizeScratch& scratch) const {
  pieces.clear();
  if (begin >= end) return;
  pieces.push_back({begin, end});
  for (const Regex& re : regexes_) {
    scratch.next.clear();
    for (const Span& piece : pieces) re.split(text, piece.begin, piece.end, scratch.next, scratch.match);
    pieces.swap(scratch.next);
  }
}

std::vector<std::string> PreTokenizer::split(std::string_view text) const {
  unicode::DecodedText decoded;
  decoded.assign(text);
  PreTokenizeScratch scratch;
  std::vector<Span> spans;
  split(decoded, 0, static_cast<uint32_t>(decoded.size()), spans, scratch);
  std::vector<std::string> out;
  out.reserve(spans.size());
  for (const auto& s : spans) {
    const size_t b = decoded.byte_offsets[s.begin];
    out.emplace_back(text.substr(b, decoded.byte_offsets[s.end] - b));
  }
  return out;
}

}  // namespace latte::tokenizer
