// End to end against transformers: `latte convert` of the oracle checkpoints (tests/data/oracle:
// random-weight Hugging Face checkpoints of every supported family, with the float32 logits and
// greedy continuations transformers computed) loads in latte and reproduces those logits. This pins
// the converter's names, layouts, transforms and metadata to the model the checkpoint describes.
#include "convert/hf_converter.hpp"
#include "support/random_models.hpp"
#include "support/safetensors.hpp"
#include "support/temp_dir.hpp"
#include "support/test_options.hpp"

#include <latte/gguf.hpp>
#include <latte/model.hpp>
#include <latte/session.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>

namespace {

// Both sides compute in float32 from the same bf16-exact weights, in different orders.
constexpr double oracle_tolerance = 1e-5;


}  // namespace

TEST_CASE("latte convert of transformers checkpoints reproduces transformers' logits on every family") {
  const std::string root = latte::test::data_path("oracle");
  const std::string backend = latte::test::attention_backend();
  latte::test::TempDir dir;
  for (const std::string flavour :
       {"deepseek-v2-lite", "deepseek-v3", "glm-4.7-flash", "glm-5-dense", "glm-5-sparse"}) {
    for (const auto mix : {latte::convert::TypeMix::bf16, latte::convert::TypeMix::f32}) {
      const std::string mix_name(latte::convert::type_mix_name(mix));
      CAPTURE(flavour);
      CAPTURE(mix_name);
      const std::string out = dir.file(flavour + ".gguf");
      const auto report = latte::convert::convert_hf_model({.model_folder = root + "/" + flavour,
                                                            .output_path = out,
                                                            .mix = mix,
                                                            .n_threads = 2,
                                                            .progress = latte::convert::ProgressMeter::Mode::silent});
      CHECK(report.has_tokenizer);
      const latte::Model model = latte::Model::load(out);
      const latte::test::Safetensors ref(root + "/" + flavour + "/reference.safetensors");
      const auto prompt = ref.ints("prompt");
      const double error =
          latte::test::relative_error(latte::test::all_logits(model, backend, prompt), ref.floats("logits"));

      latte::Session s(model, {.n_ctx = 64, .attention = backend});
      s.eval(prompt);
      std::vector<int32_t> greedy;
      for (int i = 0; i < 16; ++i) {
        const auto l = s.logits();
        const latte::Token next = static_cast<latte::Token>(std::max_element(l.begin(), l.end()) - l.begin());
        greedy.push_back(next);
        s.eval(std::span(&next, 1));
      }
      std::printf("converted %-17s %-5s %-8s logits error %.3g (greedy %s)\n", flavour.c_str(), mix_name.c_str(),
                  backend.c_str(), error, greedy == ref.ints("greedy") ? "equal" : "different");
      CHECK(error <= oracle_tolerance);
      CHECK(greedy == ref.ints("greedy"));
    }
  }
}
