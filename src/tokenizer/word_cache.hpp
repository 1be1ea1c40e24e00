// A flat hash map from a pre-tokenized piece (bytes) to its BPE tokens, used within one encode()
// call: English text repeats its words, so most pieces skip BPE. Open addressing with linear
// probing; keys and values live in two arenas, so a lookup touches one slot and the key bytes.
//
//   WordCache cache;  if (auto hit = cache.find(piece)) out.insert(out.end(), hit->begin(), hit->end());
//   else cache.insert(piece, tokens);
#pragma once

#include <latte/token.hpp>

#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace latte::tokenizer {

class WordCache {
 public:
  /// Entries kept before the cache starts over (bounds memory to roughly 40 bytes per entry plus
  /// the words themselves).
  static constexpr size_t max_entries = 1 << 18;

  /// The cached tokens of `word`, or an empty optional. The span is valid until the next insert.
  [[nodiscard]] std::optional<std::span<const Token>> find(std::string_view word) const noexcept {
    if (slots_.empty()) return std::nullopt;
    const uint64_t h = hash(word);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key_length == empty) return std::nullopt;
      if (s.hash == h && s.key_length == word.size() &&
          std::memcmp(keys_.data() + s.key_offset, word.data(), word.size()) == 0) {
        return std::span<const Token>(tokens_.data() + s.token_offset, s.token_count);
      }
    }
  }

  /// Remembers the tokens of `word` (which must not be cached yet).
  void insert(std::string_view word, std::span<const Token> tokens) {
    if (count_ >= max_entries) clear();
    if ((count_ + 1) * 2 > slots_.size()) grow();
    const uint64_t h = hash(word);
    size_t i = h & mask_;
    while (slots_[i].key_length != empty) i = (i + 1) & mask_;
    slots_[i] = Slot{h, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(word.size()),
                     static_cast<uint32_t>(tokens_.size()), static_cast<uint32_t>(tokens.size())};
    keys_.append(word);
    tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
    ++count_;
  }

  void clear() {
    slots_.assign(slots_.size(), Slot{});
    keys_.clear();
    tokens_.clear();
    count_ = 0;
  }

 private:
  static constexpr uint32_t empty = 0xFFFFFFFFu;
  struct Slot {
    uint64_t hash = 0;
    uint32_t key_offset = 0;
    uint32_t key_length = empty;  ///< empty marks a free slot
    uint32_t token_offset = 0;
    uint32_t token_count = 0;
  };

  // FNV-1a over the bytes, finished with a multiply-xorshift so the low bits used for the slot
  // index depend on every byte.
  static uint64_t hash(std::string_view s) noexcept {
    uint64_t h = 0xcbf29ce484222325ull;
    for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 32);
  }

  void grow() {
    const size_t capacity = slots_.empty() ? 1024 : slots_.size() * 2;
    std::vector<Slot> old(capacity);
    old.swap(slots_);
    mask_ = capacity - 1;
    for (const Slot& s : old) {
      if (s.key_length == empty) continue;
      size_t i = s.hash & mask_;
      while (slots_[i].key_length != empty) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }

  std::vector<Slot> slots_;  ///< [capacity], capacity a power of two, at most half full
  size_t mask_ = 0;
  size_t count_ = 0;
  std::string keys_;           ///< concatenated key bytes
  std::vector<Token> tokens_;  ///< concatenated token lists
};

}  // namespace latte::tokenizer
