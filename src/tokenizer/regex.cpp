// Parser, compiler and backtracking matcher of the pre-tokenizer regex subset (see regex.hpp).
#include "tokenizer/regex.hpp"

#include <latte/error.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>

namespace latte::tokenizer {

namespace {

constexpr uint32_t unbounded = std::numeric_limits<uint32_t>::max();

struct Node {
  enum class Kind { empty, set, concat, alternation, repeat, look_ahead, look_ahead_not, assert_begin, assert_end };
  Kind kind = Kind::empty;
  uint32_t set = 0;
  uint32_t min = 0, max = 0;
  std::vector<Node> children;
};

Node make_node(Node::Kind kind, uint32_t set = 0, uint32_t min = 0, uint32_t max = 0) {
  Node n;
  n.kind = kind;
  n.set = set;
  n.min = min;
  n.max = max;
  return n;
}

bool is_ascii_alnum(char32_t c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

}  // namespace

bool CharSet::contains_slow(char32_t cp, unicode::Properties props) const noexcept {
  bool in = (props & any_of) != 0;
  if (!in) {
    for (const auto& [lo, hi] : ranges) {
      if (cp >= lo && cp <= hi) {
        in = true;
        break;
      }
    }
  }
  if (!in) {
    for (auto m : none_of) {
      if ((props & m) == 0) {
        in = true;
        break;
      }
    }
  }
  return in != negated;
}

void CharSet::finish() {
  ascii = {0, 0};
  for (char32_t cp = 0; cp < 128; ++cp) {
    if (contains_slow(cp, unicode::properties(cp))) ascii[cp >> 6] |= uint64_t{1} << (cp & 63);
  }
}

// Recursive-descent parser producing a Node tree and the sets it references, then the compiler
// that lowers the tree to the instruction list.
class RegexCompiler {
 public:
  explicit RegexCompiler(std::string_view pattern) : source_(pattern) {
    size_t pos = 0;
    while (pos < pattern.size()) {
      size_t length = 1;
      char32_t cp = unicode::decode_utf8(pattern, pos, length);
      if (cp == unicode::replacement_character && length == 1 && static_cast<uint8_t>(pattern[pos]) >= 0x80) {
        fail(ErrorCode::invalid_argument, "invalid UTF-8 in pattern");
      }
      cps_.push_back(cp);
      pos += length;
    }
  }

  Regex build() {
    Node root = parse_alternation();
    if (at_ < cps_.size()) fail(ErrorCode::invalid_argument, "unbalanced ')'");
    Regex re;
    re.pattern_ = std::string(source_);
    for (auto& s : sets_) s.finish();
    re.sets_ = std::move(sets_);
    program_.clear();
    emit(root);
    program_.push_back({Regex::Op::match});
    re.program_ = std::move(program_);
    // Start filter.
    std::vector<uint32_t> first;
    bool nullable = first_sets(root, first);
    re.start_anything_ = nullable;
    std::sort(first.begin(), first.end());
    first.erase(std::unique(first.begin(), first.end()), first.end());
    re.start_sets_ = first;
    for (uint32_t s : first) {
      re.start_ascii_[0] |= re.sets_[s].ascii[0];
      re.start_ascii_[1] |= re.sets_[s].ascii[1];
    }
    return re;
  }

 private:
  [[noreturn]] void fail(ErrorCode code, const std::string& what) const {
    throw Error(code, "regex '" + std::string(source_) + "' at character " + std::to_string(at_) + ": " + what);
  }
  bool done() const { return at_ >= cps_.size(); }
  char32_t peek() const { return done() ? 0 : cps_[at_]; }
  char32_t next() {
    if (done()) fail(ErrorCode::invalid_argument, "unexpected end of pattern");
    return cps_[at_++];
  }
  bool accept(char32_t c) {
    if (!done() && cps_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }

  uint32_t add_set(CharSet set) {
    sets_.push_back(std::move(set));
    return static_cast<uint32_t>(sets_.size() - 1);
  }
  Node set_node(CharSet set) { return make_node(Node::Kind::set, add_set(std::move(set))); }

  // A literal code point, with ASCII case folding inside (?i:...).
  CharSet literal_set(char32_t c) const {
    CharSet s;
    s.ranges.push_back({c, c});
    if (case_insensitive_) {
      if (c >= 'a' && c <= 'z') s.ranges.push_back({c - 32, c - 32});
      if (c >= 'A' && c <= 'Z') s.ranges.push_back({c + 32, c + 32});
    }
    return s;
  }

  Node parse_alternation() {
    std::vector<Node> branches;
    branches.push_back(parse_concat());
    while (accept('|')) branches.push_back(parse_concat());
    if (branches.size() == 1) return std::move(branches[0]);
    Node alt = make_node(Node::Kind::alternation);
    alt.children = std::move(branches);
    return alt;
  }

  Node parse_concat() {
    std::vector<Node> items;
    while (!done() && peek() != '|' && peek() != ')') items.push_back(parse_repeat());
    if (items.empty()) return Node{};
    if (items.size() == 1) return std::move(items[0]);
    Node cat = make_node(Node::Kind::concat);
    cat.children = std::move(items);
    return cat;
  }

  uint32_t parse_number() {
    if (done() || peek() < '0' || peek() > '9') fail(ErrorCode::invalid_argument, "expected a number in {n,m}");
    uint64_t v = 0;
    while (!done() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + (next() - '0');
      if (v > 100000) fail(ErrorCode::unsupported, "repetition count above 100000");
    }
    return static_cast<uint32_t>(v);
  }

  Node parse_repeat() {
    Node atom = parse_atom();
    while (!done()) {
      uint32_t min = 0, max = 0;
      const char32_t c = peek();
      if (c == '?') {
        min = 0, max = 1;
      } else if (c == '*') {
        min = 0, max = unbounded;
      } else if (c == '+') {
        min = 1, max = unbounded;
      } else if (c == '{') {
        ++at_;
        min = parse_number();
        max = min;
        if (accept(',')) max = peek() == '}' ? unbounded : parse_number();
        if (!accept('}')) fail(ErrorCode::invalid_argument, "expected '}'");
        if (max < min) fail(ErrorCode::invalid_argument, "{n,m} with m < n");
        --at_;  // so the shared ++at_ below consumes the '}'
      } else {
        break;
      }
      ++at_;
      if (peek() == '?' || peek() == '+') fail(ErrorCode::unsupported, "lazy and possessive quantifiers");
      if (atom.kind == Node::Kind::look_ahead || atom.kind == Node::Kind::look_ahead_not ||
          atom.kind == Node::Kind::assert_begin || atom.kind == Node::Kind::assert_end) {
        fail(ErrorCode::unsupported, "a quantifier on a zero-width assertion");
      }
      Node rep = make_node(Node::Kind::repeat, 0, min, max);
      rep.children.push_back(std::move(atom));
      atom = std::move(rep);
    }
    return atom;
  }

  Node parse_group() {
    // '(' already consumed.
    Node::Kind kind = Node::Kind::concat;  // plain grouping
    const bool saved_ci = case_insensitive_;
    if (accept('?')) {
      if (accept(':')) {
      } else if (accept('=')) {
        kind = Node::Kind::look_ahead;
      } else if (accept('!')) {
        kind = Node::Kind::look_ahead_not;
      } else if (accept('i')) {
        if (!accept(':')) fail(ErrorCode::unsupported, "inline flags other than (?i:...)");
        case_insensitive_ = true;
      } else {
        fail(ErrorCode::unsupported, "group syntax (?" + std::string(1, static_cast<char>(peek())) + "...)");
      }
    }
    Node inner = parse_alternation();
    case_insensitive_ = saved_ci;
    if (!accept(')')) fail(ErrorCode::invalid_argument, "missing ')'");
    if (kind == Node::Kind::concat) return inner;
    Node n = make_node(kind);
    n.children.push_back(std::move(inner));
    return n;
  }

  uint32_t parse_hex(size_t digits_min, size_t digits_max) {
    uint32_t v = 0;
    size_t n = 0;
    while (n < digits_max && !done()) {
      char32_t c = peek();
      uint32_t d;
      if (c >= '0' && c <= '9') {
        d = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        d = c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        d = c - 'A' + 10;
      } else {
        break;
      }
      v = v * 16 + d;
      ++at_;
      ++n;
    }
    if (n < digits_min || v > 0x10FFFF) fail(ErrorCode::invalid_argument, "bad hexadecimal escape");
    return v;
  }

  // Parses the text after a backslash. Either sets `cp` (a single code point) and returns true, or
  // fills `set_item` with a property item and returns false.
  bool parse_escape(char32_t& cp, CharSet& set_item) {
    const char32_t c = next();
    switch (c) {
      case 'r':
        cp = '\r';
        return true;
      case 'n':
        cp = '\n';
        return true;
      case 't':
        cp = '\t';
        return true;
      case 'f':
        cp = '\f';
        return true;
      case 'v':
        cp = '\v';
        return true;
      case '0':
        cp = 0;
        return true;
      case 'x':
        if (accept('{')) {
          cp = parse_hex(1, 6);
          if (!accept('}')) fail(ErrorCode::invalid_argument, "expected '}' after \\x{...");
        } else {
          cp = parse_hex(2, 2);
        }
        return true;
      case 'u':
        cp = parse_hex(4, 4);
        return true;
      case 'U':
        cp = parse_hex(8, 8);
        return true;
      case 's':
        set_item.any_of |= unicode::white_space_bit;
        return false;
      case 'S':
        set_item.none_of.push_back(unicode::white_space_bit);
        return false;
      case 'd':
        set_item.any_of |= unicode::category_bit(unicode::Category::Nd);
        return false;
      case 'D':
        set_item.none_of.push_back(unicode::category_bit(unicode::Category::Nd));
        return false;
      case 'w':
        set_item.any_of |= word_mask();
        return false;
      case 'W':
        set_item.none_of.push_back(word_mask());
        return false;
      case 'p':
      case 'P': {
        std::string name;
        if (accept('{')) {
          while (!done() && peek() != '}') name += static_cast<char>(next() & 0x7F);
          if (!accept('}')) fail(ErrorCode::invalid_argument, "expected '}' after \\p{...");
        } else {
          name = std::string(1, static_cast<char>(next() & 0x7F));
        }
        const unicode::Properties mask = unicode::properties_for_name(name);
        if (mask == 0) fail(ErrorCode::unsupported, "Unicode property \\p{" + name + "}");
        if (c == 'p') {
          set_item.any_of |= mask;
        } else {
          set_item.none_of.push_back(mask);
        }
        return false;
      }
      default:
        if (is_ascii_alnum(c)) fail(ErrorCode::unsupported, std::string("escape \\") + static_cast<char>(c));
        cp = c;  // escaped punctuation or any other literal
        return true;
    }
  }

  static unicode::Properties word_mask() {
    return unicode::letter_mask | unicode::mark_mask | unicode::category_bit(unicode::Category::Nd) |
           unicode::category_bit(unicode::Category::Pc);
  }

  Node parse_class() {
    // '[' already consumed.
    CharSet set;
    set.negated = accept('^');
    bool first = true;
    while (true) {
      if (done()) fail(ErrorCode::invalid_argument, "missing ']'");
      if (peek() == ']' && !first) {
        ++at_;
        break;
      }
      first = false;
      if (peek() == '[') fail(ErrorCode::unsupported, "nested classes and POSIX [:name:] classes");
      char32_t lo = 0;
      CharSet item;
      if (accept('\\')) {
        if (!parse_escape(lo, item)) {
          set.any_of |= item.any_of;
          set.none_of.insert(set.none_of.end(), item.none_of.begin(), item.none_of.end());
          continue;
        }
      } else {
        lo = next();
      }
      char32_t hi = lo;
      if (peek() == '-' && at_ + 1 < cps_.size() && cps_[at_ + 1] != ']') {
        ++at_;
        if (accept('\\')) {
          CharSet bad;
          if (!parse_escape(hi, bad)) fail(ErrorCode::invalid_argument, "a class escape cannot end a range");
        } else {
          hi = next();
        }
        if (hi < lo) fail(ErrorCode::invalid_argument, "range out of order");
      }
      set.ranges.push_back({lo, hi});
      if (case_insensitive_) {
        for (char32_t c = std::max<char32_t>(lo, 'a'); c <= std::min<char32_t>(hi, 'z'); ++c)
          set.ranges.push_back({c - 32, c - 32});
        for (char32_t c = std::max<char32_t>(lo, 'A'); c <= std::min<char32_t>(hi, 'Z'); ++c)
          set.ranges.push_back({c + 32, c + 32});
      }
    }
    return set_node(std::move(set));
  }

  Node parse_atom() {
    const char32_t c = next();
    switch (c) {
      case '(':
        return parse_group();
      case '[':
        return parse_class();
      case '.': {
        CharSet s;
        s.negated = true;
        s.ranges.push_back({'\n', '\n'});
        return set_node(std::move(s));
      }
      case '^':
        return make_node(Node::Kind::assert_begin);
      case '$':
        return make_node(Node::Kind::assert_end);
      case '\\': {
        char32_t cp = 0;
        CharSet item;
        if (parse_escape(cp, item)) return set_node(literal_set(cp));
        return set_node(std::move(item));
      }
      case ')':
      case '*':
      case '+':
      case '?':
      case '{':
        --at_;
        fail(ErrorCode::invalid_argument, "unexpected '" + std::string(1, static_cast<char>(c)) + "'");
      default:
        return set_node(literal_set(c));
    }
  }

  // ---- compilation ----
  uint32_t here() const { return static_cast<uint32_t>(program_.size()); }

  static bool nullable(const Node& n) {
    switch (n.kind) {
      case Node::Kind::set:
        return false;
      case Node::Kind::concat:
        return std::all_of(n.children.begin(), n.children.end(), nullable);
      case Node::Kind::alternation:
        return std::any_of(n.children.begin(), n.children.end(), nullable);
      case Node::Kind::repeat:
        return n.min == 0 || nullable(n.children[0]);
      default:
        return true;
    }
  }

  // Collects the sets a match of `n` can start with; returns whether `n` can match empty.
  static bool first_sets(const Node& n, std::vector<uint32_t>& out) {
    switch (n.kind) {
      case Node::Kind::set:
        out.push_back(n.set);
        return false;
      case Node::Kind::concat:
        for (const auto& child : n.children) {
          if (!first_sets(child, out)) return false;
        }
        return true;
      case Node::Kind::alternation: {
        bool any = false;
        for (const auto& child : n.children) any = first_sets(child, out) || any;
        return any;
      }
      case Node::Kind::repeat:
        return first_sets(n.children[0], out) || n.min == 0;
      default:
        return true;
    }
  }

  void emit(const Node& n) {
    using Op = Regex::Op;
    switch (n.kind) {
      case Node::Kind::empty:
        return;
      case Node::Kind::set:
        program_.push_back({Op::set, n.set});
        return;
      case Node::Kind::concat:
        for (const auto& child : n.children) emit(child);
        return;
      case Node::Kind::alternation: {
        std::vector<uint32_t> jumps;
        for (size_t i = 0; i < n.children.size(); ++i) {
          if (i + 1 < n.children.size()) {
            const uint32_t split = here();
            program_.push_back({Op::split, split + 1, 0});
            emit(n.children[i]);
            jumps.push_back(here());
            program_.push_back({Op::jump, 0});
            program_[split].b = here();
          } else {
            emit(n.children[i]);
          }
        }
        for (uint32_t j : jumps) program_[j].a = here();
        return;
      }
      case Node::Kind::repeat: {
        const Node& child = n.children[0];
        if (child.kind == Node::Kind::set) {
          program_.push_back({Op::repeat, child.set, 0, n.min, n.max});
          return;
        }
        if (n.max == unbounded && nullable(child)) {
          throw Error(ErrorCode::unsupported,
                      "regex '" + std::string(source_) + "': unbounded repetition of a group that can match empty");
        }
        if (n.max != unbounded && n.max > 1000) {
          throw Error(ErrorCode::unsupported, "regex '" + std::string(source_) + "': group repetition above 1000");
        }
        for (uint32_t i = 0; i < n.min; ++i) emit(child);
        if (n.max == unbounded) {
          const uint32_t loop = here();
          program_.push_back({Op::split, loop + 1, 0});
          emit(child);
          program_.push_back({Op::jump, loop});
          program_[loop].b = here();
        } else {
          std::vector<uint32_t> splits;
          for (uint32_t i = n.min; i < n.max; ++i) {
            splits.push_back(here());
            program_.push_back({Op::split, here() + 1, 0});
            emit(child);
          }
          for (uint32_t s : splits) program_[s].b = here();
        }
        return;
      }
      case Node::Kind::look_ahead:
      case Node::Kind::look_ahead_not: {
        const uint32_t at = here();
        program_.push_back({n.kind == Node::Kind::look_ahead ? Op::look_ahead : Op::look_ahead_not, 0});
        emit(n.children[0]);
        program_.push_back({Op::look_end});
        program_[at].a = here();
        return;
      }
      case Node::Kind::assert_begin:
        program_.push_back({Op::assert_begin});
        return;
      case Node::Kind::assert_end:
        program_.push_back({Op::assert_end});
        return;
    }
  }

  std::string_view source_;
  std::vector<char32_t> cps_;
  size_t at_ = 0;
  bool case_insensitive_ = false;
  std::vector<CharSet> sets_;
  std::vector<Regex::Instruction> program_;
};

Regex Regex::compile(std::string_view pattern) { return RegexCompiler(pattern).build(); }

bool Regex::may_start_with_slow(char32_t cp, unicode::Properties props) const noexcept {
  for (uint32_t s : start_sets_) {
    if (sets_[s].contains_slow(cp, props)) return true;
  }
  return false;
}

int64_t Regex::run(const unicode::DecodedText& text, uint32_t begin, uint32_t end, uint32_t pc, uint32_t pos,
                   MatchScratch& scratch) const {
  auto& stack = scratch.stack;
  const size_t base = stack.size();
  const char32_t* cps = text.code_points.data();
  const unicode::Properties* props = text.props.data();
  while (true) {
    const Instruction& in = program_[pc];
    bool ok = true;
    switch (in.op) {
      case Op::set:
        if (pos < end && sets_[in.a].contains(cps[pos], props[pos])) {
          ++pos;
          ++pc;
        } else {
          ok = false;
        }
        break;
      case Op::repeat: {
        const CharSet& set = sets_[in.a];
        uint32_t k = 0;
        while (k < in.max && pos + k < end && set.contains(cps[pos + k], props[pos + k])) ++k;
        if (k < in.min) {
          ok = false;
          break;
        }
        if (k > in.min) stack.push_back({pc, k - 1, pos});
        pos += k;
        ++pc;
        break;
      }
      case Op::split:
        stack.push_back({in.b, MatchScratch::no_count, pos});
        pc = in.a;
        break;
      case Op::jump:
        pc = in.a;
        break;
      case Op::look_ahead:
      case Op::look_ahead_not: {
        const bool matched = run(text, begin, end, pc + 1, pos, scratch) >= 0;
        if (matched == (in.op == Op::look_ahead)) {
          pc = in.a;
        } else {
          ok = false;
        }
        break;
      }
      case Op::look_end:
      case Op::match:
        stack.resize(base);
        return pos;
      case Op::assert_begin:
        if (pos == begin) {
          ++pc;
        } else {
          ok = false;
        }
        break;
      case Op::assert_end:
        if (pos == end) {
          ++pc;
        } else {
          ok = false;
        }
        break;
    }
    if (ok) continue;
    // Backtrack.
    if (stack.size() == base) return -1;
    MatchScratch::Frame& f = stack.back();
    if (f.count == MatchScratch::no_count) {
      pc = f.pc;
      pos = f.pos;
      stack.pop_back();
    } else {
      const Instruction& rep = program_[f.pc];
      pos = f.pos + f.count;
      pc = f.pc + 1;
      if (f.count > rep.min) {
        --f.count;
      } else {
        stack.pop_back();
      }
    }
  }
}

int64_t Regex::match_at(const unicode::DecodedText& text, uint32_t begin, uint32_t end, uint32_t start,
                        MatchScratch& scratch) const {
  return run(text, begin, end, 0, start, scratch);
}

bool Regex::find(const unicode::DecodedText& text, uint32_t begin, uint32_t end, uint32_t from, Span& match,
                 MatchScratch& scratch) const {
  for (uint32_t s = from; s < end; ++s) {
    if (!may_start_with(text.code_points[s], text.props[s])) continue;
    const int64_t e = run(text, begin, end, 0, s, scratch);
    if (e > static_cast<int64_t>(s)) {
      match = {s, static_cast<uint32_t>(e)};
      return true;
    }
  }
  match = {end, end};
  return false;
}

void Regex::split(const unicode::DecodedText& text, uint32_t begin, uint32_t end, std::vector<Span>& out,
                  MatchScratch& scratch) const {
  uint32_t at = begin;
  Span m;
  while (at < end && find(text, begin, end, at, m, scratch)) {
    if (m.begin > at) out.push_back({at, m.begin});
    out.push_back(m);
    at = m.end;
  }
  if (at < end) out.push_back({at, end});
}

}  // namespace latte::tokenizer
