// libFuzzer harness: the DeepSeek-V3 tokenizer (tests/data/deepseek-v3-vocab.gguf) on arbitrary
// input. The first byte picks the operation:
//   even: encode the remaining bytes (bit 1: add_special, bit 2: parse_special) and check that
//         decoding the ids gives the text back (byte-level BPE loses nothing when neither option
//         is on), and that every id is in the vocabulary;
//   odd:  decode the remaining bytes read as little-endian int32 ids (any value, out-of-range ones
//         included: they must give latte::Error), and check that StreamDecoder's pieces add up to
//         decode()'s text.
#include <latte/error.hpp>
#include <latte/gguf.hpp>
#include <latte/tokenizer.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace {

const latte::Tokenizer& tokenizer() {
  static const latte::Tokenizer tok = latte::Tokenizer::from_gguf(latte::gguf::File::open(LATTE_FUZZ_VOCAB_GGUF));
  return tok;
}

void encode_round_trip(const latte::Tokenizer& tok, uint8_t flags, std::string_view text) {
  const latte::EncodeOptions options{.add_special = (flags & 2) != 0, .parse_special = (flags & 4) != 0};
  const std::vector<latte::Token> ids = tok.encode(text, options);
  for (latte::Token id : ids) {
    if (id < 0 || id >= tok.n_vocab()) __builtin_trap();
  }
  const std::string back = tok.decode(ids);
  if (!options.add_special && !options.parse_special && back != text) __builtin_trap();
}

void decode_ids(const latte::Tokenizer& tok, uint8_t flags, const uint8_t* data, size_t size) {
  std::vector<latte::Token> ids(size / sizeof(int32_t));
  if (!ids.empty()) std::memcpy(ids.data(), data, ids.size() * sizeof(int32_t));
  // Mostly in-range ids: fold all but the ids whose top bit is set into the vocabulary.
  for (latte::Token& id : ids) {
    if (id >= 0) id %= tok.n_vocab() + 16;
  }
  const latte::DecodeOptions options{.render_special = (flags & 2) != 0};
  std::string whole;
  bool whole_ok = true;
  try {
    whole = tok.decode(ids, options);
  } catch (const latte::Error&) {
    whole_ok = false;
  }
  latte::StreamDecoder stream(tok, options);
  std::string pieces;
  bool stream_ok = true;
  for (latte::Token id : ids) {
    try {
      pieces += stream.push(id);
    } catch (const latte::Error&) {
      stream_ok = false;
      break;
    }
  }
  pieces += stream.flush();
  if (whole_ok != stream_ok) __builtin_trap();  // both reject exactly the out-of-range ids
  if (whole_ok && pieces != whole) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const latte::Tokenizer& tok = tokenizer();
  const uint8_t flags = data[0];
  try {
    if ((flags & 1) == 0) {
      encode_round_trip(tok, flags, std::string_view(reinterpret_cast<const char*>(data + 1), size - 1));
    } else {
      decode_ids(tok, flags, data + 1, size - 1);
    }
  } catch (const latte::Error&) {
  }
  return 0;
}
