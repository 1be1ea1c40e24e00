// The two attention backends give the same logits on every flavour, and a prefill followed by
// single-token decodes gives the same logits as one long prefill.
#include "support/random_models.hpp"
#include "support/test_options.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <string>

namespace {

constexpr double kFp32Tolerance = 1e-5;  // normalised error of fp32 computations in different orders
constexpr int kPrefill = 40;
constexpr int kDecode = 8;

}  // namespace

TEST_CASE("mla and standard backends agree on every flavour, prefill then decode") {
  for (std::string_view flavour : latte::test::kTestFlavours) {
    CAPTURE(flavour);
    const latte::Model model = latte::test::shared_random_model(flavour);
    uint64_t seed = 0;
    const auto tokens = latte::test::fresh_tokens(kPrefill + kDecode, model.config().n_vocab, &seed);
    CAPTURE(seed);
    const std::span<const latte::Token> prefill(tokens.data(), kPrefill), decode(tokens.data() + kPrefill, kDecode);

    const auto mla = latte::test::prefill_then_decode(model, "mla", prefill, decode);
    const auto standard = latte::test::prefill_then_decode(model, "standard", prefill, decode);
    const double backends = latte::test::relative_error(mla, standard);

    // One long prefill, every position's logits: positions kPrefill-1 .. end are the steps above.
    const auto all = latte::test::all_logits(model, latte::test::attention_backend(), tokens);
    const size_t n_vocab = static_cast<size_t>(model.config().n_vocab);
    const std::span<const float> tail(all.data() + (kPrefill - 1) * n_vocab, (kDecode + 1) * n_vocab);
    const auto& stepped = latte::test::attention_backend() == "standard" ? standard : mla;
    const double chunking = latte::test::relative_error(stepped, tail);

    std::printf("%-15s mla vs standard %.3g   prefill+decode vs one prefill (%s) %.3g\n", std::string(flavour).c_str(),
                backends, latte::test::attention_backend().c_str(), chunking);
    CHECK(backends <= kFp32Tolerance);
    CHECK(chunking <= kFp32Tolerance);
  }
}
