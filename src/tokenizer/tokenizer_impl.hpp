// Internal state of latte::Tokenizer: the vocabulary plus the lookup structures built from it.
#pragma once

#include <latte/tokenizer.hpp>

#include "tokenizer/pre_tokenizer.hpp"

#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace latte {

namespace tokenizer {
/// Reusable working memory of Tokenizer::Impl::bpe.
struct BpeScratch {
  struct Symbol {
    Token id;            ///< current token of this symbol, -1 once merged into its left neighbour
    int32_t prev, next;  ///< neighbours in the linked list, -1 at the ends
  };
  struct Candidate {
    uint32_t rank;                    ///< merge rank (lower applies first)
    int32_t left, right;              ///< symbol indices
    Token left_id, right_id, merged;  ///< ids when queued (stale entries are skipped)
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::vector<Symbol> symbols;  ///< [piece bytes]
  std::vector<Candidate> heap;  ///< min-heap by (rank, left)
};
}  // namespace tokenizer

struct Tokenizer::Impl {
  Vocabulary vocab;
  tokenizer::PreTokenizer pre;

  std::vector<std::string> pieces;                    ///< [n_vocab] bytes each token decodes to
  std::unordered_map<std::string, Token> text_to_id;  ///< stored text -> lowest id with that text

  // BPE over token ids: the first symbol of each byte, then merges by rank.
  std::array<Token, 256> byte_token{};                   ///< byte -> initial symbol id, -1 if none
  std::unordered_map<uint64_t, uint64_t> merge_of_pair;  ///< (left << 32 | right) -> (rank << 32 | result)

  // Added tokens (control and user-defined), matched on raw text with a byte trie.
  struct TrieNode {
    Token token = -1;      ///< token ending here, -1 if none
    bool control = false;  ///< that token is a control token (matched only with parse_special)
  };
  std::vector<TrieNode> trie_nodes;                   ///< node 0 is the root
  std::unordered_map<uint64_t, uint32_t> trie_edges;  ///< (node << 8 | byte) -> child node
  std::array<bool, 256> trie_first_byte{};            ///< a user-defined token may start with this byte
  std::array<bool, 256> trie_first_byte_special{};    ///< any added token may start with this byte

  /// Builds everything from `vocab` (already moved in). Throws on inconsistent data.
  void build();
  void check_id(Token id) const;
  /// Appends the BPE tokens of one pre-tokenized piece.
  void bpe(std::string_view piece, std::vector<Token>& out, tokenizer::BpeScratch& scratch) const;
};

}  // namespace latte
