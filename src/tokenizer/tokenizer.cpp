// latte::Tokenizer: vocabulary lookups, added-token matching, the pre-tokenizer cascade and BPE.
#include <latte/error.hpp>
#include <latte/tokenizer.hpp>

#include "tokenizer/byte_level.hpp"
#include "tokenizer/tokenizer_impl.hpp"
#include "tokenizer/unicode.hpp"
#include "tokenizer/word_cache.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>

namespace latte {

namespace {

std::string describe_token(const std::string& text) {
  std::string out;
  for (char c : text) {
    const auto b = static_cast<uint8_t>(c);
    if (b < 0x20 || b == 0x7F) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02X", b);
      out += hex;
    } else {
      out += c;
    }
  }
  return "'" + out + "'";
}

// "<0xAB>" -> 0xAB, or -1.
int parse_byte_token(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int v = 0;
  for (char c : text.substr(3, 2)) {
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'A' && c <= 'F') {
      d = c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else {
      return -1;
    }
    v = v * 16 + d;
  }
  return v;
}

// Working memory of one encode() call.
bool is_ascii_alphanumeric(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

struct EncodeScratch {
  unicode::DecodedText decoded;
  tokenizer::PreTokenizeScratch pre;
  std::vector<tokenizer::Span> spans;
  tokenizer::WordCache cache;
  std::vector<Token> word;
  tokenizer::BpeScratch bpe;
  static constexpr size_t chunk_bytes = 16 * 1024;  // pre-tokenize at most about this much at once
};

}  // namespace

void Tokenizer::Impl::check_id(Token id) const {
  if (id < 0 || static_cast<size_t>(id) >= vocab.tokens.size()) {
    throw Error(ErrorCode::invalid_argument, "token id " + std::to_string(id) + " is outside the vocabulary of " +
                                                 std::to_string(vocab.tokens.size()) + " tokens");
  }
}

void Tokenizer::Impl::build() {
  if (vocab.model != "gpt2") {
    throw Error(ErrorCode::unsupported, "tokenizer model '" + vocab.model +
                                            "' (tokenizer.ggml.model) is not supported; latte supports byte-level "
                                            "BPE ('gpt2')");
  }
  const size_t n = vocab.tokens.size();
  if (n == 0) throw Error(ErrorCode::invalid_file, "tokenizer.ggml.tokens is empty");
  if (n >= static_cast<size_t>(std::numeric_limits<Token>::max())) {
    throw Error(ErrorCode::invalid_file, "tokenizer.ggml.tokens has " + std::to_string(n) + " entries, too many");
  }
  if (vocab.token_types.empty()) vocab.token_types.assign(n, TokenType::normal);
  if (vocab.token_types.size() != n) {
    throw Error(ErrorCode::invalid_file, "tokenizer.ggml.token_type has " + std::to_string(vocab.token_types.size()) +
                                             " entries but tokenizer.ggml.tokens has " + std::to_string(n));
  }
  for (size_t i = 0; i < n; ++i) {
    const auto t = static_cast<int32_t>(vocab.token_types[i]);
    if (t < 0 || t > 6) {
      throw Error(ErrorCode::invalid_file, "tokenizer.ggml.token_type[" + std::to_string(i) +
                                               "] = " + std::to_string(t) + " is not a token type (0..6)");
    }
  }
  const auto check_special = [&](const std::optional<Token>& id, const char* key) {
    if (id && (*id < 0 || static_cast<size_t>(*id) >= n)) {
      throw Error(ErrorCode::invalid_file, std::string(key) + " = " + std::to_string(*id) +
                                               " is outside the vocabulary of " + std::to_string(n) + " tokens");
    }
  };
  check_special(vocab.bos, "tokenizer.ggml.bos_token_id");
  check_special(vocab.eos, "tokenizer.ggml.eos_token_id");
  check_special(vocab.pad, "tokenizer.ggml.padding_token_id");
  check_special(vocab.unk, "tokenizer.ggml.unknown_token_id");
  if (vocab.add_bos && !vocab.bos) {
    throw Error(ErrorCode::invalid_file, "tokenizer.ggml.add_bos_token is true but there is no bos_token_id");
  }
  if (vocab.add_eos && !vocab.eos) {
    throw Error(ErrorCode::invalid_file, "tokenizer.ggml.add_eos_token is true but there is no eos_token_id");
  }

  pre = tokenizer::PreTokenizer::for_name(vocab.pre);

  // Pieces, text index, added-token trie.
  pieces.assign(n, std::string());
  text_to_id.reserve(n);
  trie_nodes.assign(1, TrieNode{});
  byte_token.fill(-1);
  std::array<Token, 256> byte_fallback;
  byte_fallback.fill(-1);
  for (size_t i = 0; i < n; ++i) {
    const auto id = static_cast<Token>(i);
    const std::string& text = vocab.tokens[i];
    text_to_id.emplace(text, id);
    switch (vocab.token_types[i]) {
      case TokenType::normal: {
        auto bytes = tokenizer::byte_level_to_bytes(text);
        pieces[i] = bytes ? std::move(*bytes) : text;
        if (bytes && pieces[i].size() == 1 && byte_token[static_cast<uint8_t>(pieces[i][0])] < 0) {
          byte_token[static_cast<uint8_t>(pieces[i][0])] = id;
        }
        break;
      }
      case TokenType::byte: {
        const int b = parse_byte_token(text);
        if (b >= 0) {
          pieces[i] = std::string(1, static_cast<char>(b));
          if (byte_fallback[b] < 0) byte_fallback[b] = id;
        } else {
          pieces[i] = text;
        }
        break;
      }
      case TokenType::control:
      case TokenType::user_defined:
      case TokenType::unknown:
        pieces[i] = text;
        break;
      case TokenType::unused:
      case TokenType::undefined:
        break;
    }
    const bool control = vocab.token_types[i] == TokenType::control;
    if ((control || vocab.token_types[i] == TokenType::user_defined) && !text.empty()) {
      uint32_t node = 0;
      for (char c : text) {
        const uint64_t key = (uint64_t{node} << 8) | static_cast<uint8_t>(c);
        auto [it, inserted] = trie_edges.emplace(key, static_cast<uint32_t>(trie_nodes.size()));
        if (inserted) trie_nodes.push_back(TrieNode{});
        node = it->second;
      }
      if (trie_nodes[node].token < 0) trie_nodes[node] = TrieNode{.token = id, .control = control};
      const auto first = static_cast<uint8_t>(text[0]);
      trie_first_byte_special[first] = true;
      if (!control) trie_first_byte[first] = true;
    }
  }
  // A byte without a normal single-byte token falls back to <0xXX>, then to the unknown token.
  for (unsigned b = 0; b < 256; ++b) {
    if (byte_token[b] < 0) byte_token[b] = byte_fallback[b] >= 0 ? byte_fallback[b] : vocab.unk.value_or(-1);
  }

  // Merges: "left right" -> pair of ids -> (rank, merged id). Merges naming unknown tokens are
  // skipped, as they can never apply.
  merge_of_pair.reserve(vocab.merges.size());
  for (size_t rank = 0; rank < vocab.merges.size(); ++rank) {
    const std::string& m = vocab.merges[rank];
    const size_t space = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (space == std::string::npos) {
      throw Error(ErrorCode::invalid_file, "tokenizer.ggml.merges[" + std::to_string(rank) +
                                               "] = " + describe_token(m) + " is not of the form 'left right'");
    }
    const auto left = text_to_id.find(m.substr(0, space));
    const auto right = text_to_id.find(m.substr(space + 1));
    const auto merged = text_to_id.find(m.substr(0, space) + m.substr(space + 1));
    if (left == text_to_id.end() || right == text_to_id.end() || merged == text_to_id.end()) continue;
    const uint64_t key = (uint64_t(uint32_t(left->second)) << 32) | uint32_t(right->second);
    merge_of_pair.emplace(key, (uint64_t(rank) << 32) | uint32_t(merged->second));
  }
}

void Tokenizer::Impl::bpe(std::string_view piece, std::vector<Token>& out, tokenizer::BpeScratch& scratch) const {
  using Symbol = tokenizer::BpeScratch::Symbol;
  using Candidate = tokenizer::BpeScratch::Candidate;
  auto& symbols = scratch.symbols;
  symbols.clear();
  for (size_t i = 0; i < piece.size(); ++i) {
    const auto b = static_cast<uint8_t>(piece[i]);
    const Token id = byte_token[b];
    if (id < 0) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      throw Error(ErrorCode::invalid_argument, std::string("byte ") + hex +
                                                   " of the text has no token in the vocabulary (no byte-level "
                                                   "token, no <0xXX> fallback, no unknown token)");
    }
    symbols.push_back({id, static_cast<int32_t>(i) - 1, i + 1 < piece.size() ? static_cast<int32_t>(i) + 1 : -1});
  }
  if (symbols.size() > 1) {
    auto& heap = scratch.heap;
    heap.clear();
    const auto consider = [&](int32_t left, int32_t right) {
      if (left < 0 || right < 0) return;
      const uint64_t key = (uint64_t(uint32_t(symbols[left].id)) << 32) | uint32_t(symbols[right].id);
      const auto it = merge_of_pair.find(key);
      if (it == merge_of_pair.end()) return;
      heap.push_back({static_cast<uint32_t>(it->second >> 32), left, right, symbols[left].id, symbols[right].id,
                      static_cast<Token>(it->second & 0xFFFFFFFFu)});
      std::push_heap(heap.begin(), heap.end(), std::greater<>{});
    };
    for (size_t i = 0; i + 1 < symbols.size(); ++i) consider(static_cast<int32_t>(i), static_cast<int32_t>(i) + 1);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
      const Candidate c = heap.back();
      heap.pop_back();
      Symbol& l = symbols[c.left];
      if (l.id != c.left_id || l.next != c.right || symbols[c.right].id != c.right_id) continue;  // stale
      Symbol& r = symbols[c.right];
      l.id = c.merged;
      l.next = r.next;
      if (r.next >= 0) symbols[r.next].prev = c.left;
      r.id = -1;
      consider(l.prev, c.left);
      consider(c.left, l.next);
    }
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

Tokenizer Tokenizer::from_vocabulary(Vocabulary vocabulary) {
  auto impl = std::make_shared<Impl>();
  impl->vocab = std::move(vocabulary);
  impl->build();
  return Tokenizer(std::move(impl));
}

std::vector<Token> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  const Impl& m = *impl_;
  if (text.size() >= std::numeric_limits<uint32_t>::max()) {
    throw Error(ErrorCode::invalid_argument,
                "text of " + std::to_string(text.size()) + " bytes is too long to tokenize at once (limit 4 GiB)");
  }
  std::vector<Token> out;
  out.reserve(text.size() / 3 + 2);
  if (options.add_special && m.vocab.add_bos) out.push_back(*m.vocab.bos);

  EncodeScratch s;
  const auto encode_chunk = [&](std::string_view raw) {
    s.decoded.assign(raw);
    s.spans.clear();
    m.pre.split(s.decoded, 0, static_cast<uint32_t>(s.decoded.size()), s.spans, s.pre);
    for (const auto& span : s.spans) {
      const size_t b = s.decoded.byte_offsets[span.begin];
      const std::string_view piece = raw.substr(b, s.decoded.byte_offsets[span.end] - b);
      if (const auto hit = s.cache.find(piece)) {
        for (Token t : *hit) out.push_back(t);
        continue;
      }
      s.word.clear();
      m.bpe(piece, s.word, s.bpe);
      for (Token t : s.word) out.push_back(t);
      s.cache.insert(piece, s.word);
    }
  };
  // Long texts are pre-tokenized in chunks so the per-code-point arrays stay in cache. A chunk ends
  // between an ASCII letter or digit and a following '\n': no pattern of a supported cascade
  // matches across that point (a letter/digit run stops at the newline, punctuation runs that
  // swallow newlines do not contain letters or digits, white-space runs start at the newline), and
  // none looks behind, so the pieces are those of the whole text. Pinned by the "piece boundary"
  // and "chunked encoding" tests.
  const auto encode_raw = [&](size_t begin, size_t end) {
    while (begin < end) {
      size_t cut = end;
      if (end - begin > EncodeScratch::chunk_bytes) {
        for (size_t p = begin + EncodeScratch::chunk_bytes; p < end; ++p) {
          if (text[p] == '\n' && is_ascii_alphanumeric(text[p - 1])) {
            cut = p;
            break;
          }
        }
      }
      encode_chunk(text.substr(begin, cut - begin));
      begin = cut;
    }
  };

  // Added tokens: leftmost match, longest at that position; control tokens only on request.
  const auto& first_byte = options.parse_special ? m.trie_first_byte_special : m.trie_first_byte;
  size_t segment = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    if (!first_byte[static_cast<uint8_t>(text[pos])]) {
      ++pos;
      continue;
    }
    uint32_t node = 0;
    Token best = -1;
    size_t best_length = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      const auto edge = m.trie_edges.find((uint64_t{node} << 8) | static_cast<uint8_t>(text[i]));
      if (edge == m.trie_edges.end()) break;
      node = edge->second;
      const auto& n = m.trie_nodes[node];
      if (n.token >= 0 && (options.parse_special || !n.control)) {
        best = n.token;
        best_length = i - pos + 1;
      }
    }
    if (best < 0) {
      ++pos;
      continue;
    }
    encode_raw(segment, pos);
    out.push_back(best);
    pos += best_length;
    segment = pos;
  }
  encode_raw(segment, text.size());

  if (options.add_special && m.vocab.add_eos) out.push_back(*m.vocab.eos);
  return out;
}

std::string Tokenizer::token_to_piece(Token id, const DecodeOptions& options) const {
  const Impl& m = *impl_;
  m.check_id(id);
  const TokenType type = m.vocab.token_types[static_cast<size_t>(id)];
  if (!options.render_special && (type == TokenType::control || type == TokenType::unknown)) return {};
  return m.pieces[static_cast<size_t>(id)];
}

std::string Tokenizer::decode(std::span<const Token> ids, const DecodeOptions& options) const {
  const Impl& m = *impl_;
  std::string out;
  for (Token id : ids) {
    m.check_id(id);
    const TokenType type = m.vocab.token_types[static_cast<size_t>(id)];
    if (!options.render_special && (type == TokenType::control || type == TokenType::unknown)) continue;
    out += m.pieces[static_cast<size_t>(id)];
  }
  return out;
}

size_t Tokenizer::n_vocab() const noexcept { return impl_->vocab.tokens.size(); }

const std::string& Tokenizer::token_text(Token id) const {
  impl_->check_id(id);
  return impl_->vocab.tokens[static_cast<size_t>(id)];
}

TokenType Tokenizer::token_type(Token id) const {
  impl_->check_id(id);
  return impl_->vocab.token_types[static_cast<size_t>(id)];
}

std::optional<Token> Tokenizer::find_token(std::string_view text) const {
  const auto it = impl_->text_to_id.find(std::string(text));
  if (it == impl_->text_to_id.end()) return std::nullopt;
  return it->second;
}

std::optional<Token> Tokenizer::bos() const noexcept { return impl_->vocab.bos; }
std::optional<Token> Tokenizer::eos() const noexcept { return impl_->vocab.eos; }
std::optional<Token> Tokenizer::pad() const noexcept { return impl_->vocab.pad; }
std::optional<Token> Tokenizer::unk() const noexcept { return impl_->vocab.unk; }
bool Tokenizer::add_bos() const noexcept { return impl_->vocab.add_bos; }
bool Tokenizer::add_eos() const noexcept { return impl_->vocab.add_eos; }
const std::string& Tokenizer::pre_tokenizer() const noexcept { return impl_->pre.name(); }
const std::string& Tokenizer::chat_template() const noexcept { return impl_->vocab.chat_template; }
const Vocabulary& Tokenizer::vocabulary() const noexcept { return impl_->vocab; }

// ---- StreamDecoder ----

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, const DecodeOptions& options)
    : tokenizer_(tokenizer), options_(options) {}

std::string StreamDecoder::push(Token id) {
  pending_ += tokenizer_.token_to_piece(id, options_);
  // Hold back a trailing lead byte plus its continuation bytes when the sequence is not complete.
  const size_t n = pending_.size();
  size_t hold = 0;
  for (size_t k = 1; k <= std::min<size_t>(3, n); ++k) {
    const auto c = static_cast<uint8_t>(pending_[n - k]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for its lead byte
    if (unicode::utf8_sequence_length(c) > k) hold = k;
    break;
  }
  std::string ready = pending_.substr(0, n - hold);
  pending_.erase(0, n - hold);
  return ready;
}

std::string StreamDecoder::flush() {
  std::string rest;
  rest.swap(pending_);
  return rest;
}

}  // namespace latte
