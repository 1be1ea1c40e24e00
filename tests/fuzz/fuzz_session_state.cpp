// libFuzzer harness: Session::load_state_from_memory on arbitrary bytes, into a session of a tiny
// model (fuzz_models.hpp). A state that loads must leave a usable session: it is checked against
// what it claims (tokens within n_ctx and the vocabulary) and one more token is evaluated on top of
// the restored cache. Only latte::Error may escape.
#include "fuzz_models.hpp"

#include <latte/error.hpp>
#include <latte/session.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace {

latte::Session& session() {
  static latte::Session s(latte::fuzz::state_fuzz_model(),
                          {.n_ctx = latte::fuzz::kStateFuzzContext, .attention = "mla", .n_threads = 1});
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  latte::Session& s = session();
  s.reset();
  try {
    const std::string host =
        s.load_state_from_memory(std::as_bytes(std::span<const uint8_t>(data, size)), "fuzz.state");
    if (s.n_past() < 0 || s.n_past() > s.n_ctx()) __builtin_trap();
    if (s.tokens().size() != static_cast<size_t>(s.n_past())) __builtin_trap();
    for (latte::Token t : s.tokens()) {
      if (t < 0 || t >= s.model().config().n_vocab) __builtin_trap();
    }
    if (s.n_past() < s.n_ctx()) {
      const latte::Token next = 1;
      s.eval(std::span(&next, 1));
      if (s.logits().size() != static_cast<size_t>(s.model().config().n_vocab)) __builtin_trap();
    }
  } catch (const latte::Error&) {
  }
  return 0;
}
