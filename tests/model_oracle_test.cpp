// latte's CPU forward pass against Hugging Face transformers (the oracle fixtures in
// tests/data/oracle: random-weight checkpoints of every supported family with the float32 logits
// and greedy continuations transformers computed for them). The HF checkpoint is mapped onto GGUF
// tensor names here, independently of latte's converter, with both K/V layouts written.
//
// The fixture generator rounds the weights to bf16 but keeps the rotary inv_freq buffer in float32
// (rounding it too would shift the references by ~3e-4, growing with the position).
#include "model/kv_b.hpp"
#include "support/oracle_checkpoint.hpp"
#include "support/random_models.hpp"
#include "support/safetensors.hpp"
#include "support/test_options.hpp"

#include <latte/gguf.hpp>
#include <latte/model.hpp>
#include <latte/quant.hpp>
#include <latte/session.hpp>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

namespace {

// Both sides compute in float32 from the same bf16-exact weights, in different orders.
constexpr double kOracleTolerance = 1e-5;

using latte::test::config_from_hf;
using latte::test::gguf_from_checkpoint;
using latte::test::read_json;

}  // namespace

TEST_CASE("the CPU forward pass matches transformers on every oracle flavour") {
  const std::string root = latte::test::data_path("oracle");
  const std::string backend = latte::test::attention_backend();
  for (const char* flavour : {"deepseek-v2-lite", "deepseek-v3", "glm-4.7-flash", "glm-5-dense", "glm-5-sparse"}) {
    CAPTURE(flavour);
    const std::string dir = root + "/" + flavour;
    const latte::ModelConfig config = config_from_hf(read_json(dir + "/config.json"));
    auto bytes = gguf_from_checkpoint(dir, config);
    const latte::Model model = latte::Model::from_file(latte::gguf::File::from_bytes(bytes, flavour));
    const latte::test::Safetensors ref(dir + "/reference.safetensors");
    const auto prompt = ref.ints("prompt");
    const auto expected = ref.floats("logits");

    const auto logits = latte::test::all_logits(model, backend, prompt);
    const double error = latte::test::relative_error(logits, expected);

    // Greedy continuation: the prompt once, then one token per eval.
    latte::Session s(model, {.n_ctx = 64, .attention = backend});
    s.eval(prompt);
    std::vector<int32_t> greedy;
    for (int i = 0; i < 16; ++i) {
      const auto l = s.logits();
      const latte::Token next = static_cast<latte::Token>(std::max_element(l.begin(), l.end()) - l.begin());
      greedy.push_back(next);
      s.eval(std::span(&next, 1));
    }
    std::printf("oracle %-17s %-8s logits error %.3g (greedy %s)\n", flavour, backend.c_str(), error,
                greedy == ref.ints("greedy") ? "equal" : "different");
    CHECK(error <= kOracleTolerance);
    CHECK(greedy == ref.ints("greedy"));
  }
}
