// The smallest host program: load a model, tokenize a prompt, generate a continuation, print it.
//
//   latte-embed-example MODEL.gguf "Once upon a time" [N_TOKENS]
//
// Build it against an installed latte with find_package(Latte) and target_link_libraries(... latte::latte).
#include <latte/latte.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL.gguf PROMPT [N_TOKENS]\n", argv[0]);
    return 2;
  }
  const long long n_tokens = argc > 3 ? std::strtoll(argv[3], nullptr, 10) : 32;
  if (n_tokens < 1 || n_tokens > 1 << 30) {
    std::fprintf(stderr, "N_TOKENS must be a whole number from 1 to 2^30 (got %s)\n", argv[3]);
    return 2;
  }
  try {
    const latte::Model model = latte::Model::load(argv[1]);
    const latte::Tokenizer& tokenizer = model.tokenizer();
    const std::vector<latte::Token> prompt = tokenizer.encode(argv[2]);
    const long long positions = static_cast<long long>(prompt.size()) + n_tokens;
    if (positions > 2147483647LL) {
      std::fprintf(stderr, "the prompt and N_TOKENS need %lld positions, more than a session can hold\n", positions);
      return 2;
    }
    latte::Session session(model, {.n_ctx = static_cast<int>(positions)});
    latte::Sampler sampler({.temperature = 0.0f});  // greedy: the same text on every run
    latte::StreamDecoder text(tokenizer);
    session.eval(prompt);
    std::printf("%s", argv[2]);
    for (int i = 0; i < n_tokens; ++i) {
      const latte::Token next = sampler.sample(session.logits());
      if (next == tokenizer.eos()) break;
      std::printf("%s", text.push(next).c_str());
      std::fflush(stdout);
      if (i + 1 < n_tokens) session.eval({&next, 1});
    }
    std::printf("%s\n", text.flush().c_str());
  } catch (const latte::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
