#include "support/decision_replay.hpp"

#include "support/random_models.hpp"

#include <latte/error.hpp>

namespace latte::test {

std::vector<float> run_steps(CpuStepRun& run, std::span<const Token> prompt, std::span<const Token> decode,
                             detail::ForcedDecisions* forced) {
  std::vector<float> out = run.eval(prompt, forced);
  for (size_t i = 0; i < decode.size(); ++i) {
    const auto l = run.eval(decode.subspan(i, 1), forced);
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

std::vector<double> position_errors(std::span<const float> a, std::span<const float> b, int vocab) {
  if (a.size() != b.size() || vocab <= 0 || a.size() % static_cast<size_t>(vocab) != 0) {
    throw Error(ErrorCode::invalid_argument, "position_errors: logits of different sizes");
  }
  std::vector<double> out(a.size() / static_cast<size_t>(vocab));
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = relative_error(a.subspan(i * static_cast<size_t>(vocab), static_cast<size_t>(vocab)),
                            b.subspan(i * static_cast<size_t>(vocab), static_cast<size_t>(vocab)));
  }
  return out;
}

}  // namespace latte::test
