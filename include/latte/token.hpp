// The token id type shared by the tokenizer, the model, the session and the sampler.
//
//   std::vector<latte::Token> ids = model.tokenizer().encode("Hello");
//   latte::Token next = sampler.sample(session.logits());
#pragma once

#include <cstdint>

namespace latte {

/// A vocabulary index. Valid ids are 0 <= id < n_vocab; anything else is rejected with an Error.
using Token = int32_t;

}  // namespace latte
