// Truncating a CUDA session and continuing with other tokens equals a fresh session fed the kept
// tokens and the new ones: the dropped rows (attention cache and, for glm-dsa, indexer keys) must not
// be read. The bounds and the control are check_truncation's (gpu_test_support.hpp); measured flips at
// single positions: 0.015 and 0.098.
#include "gpu_test_support.hpp"
#include "model/presets.hpp"
#include "support/random_models.hpp"

#include <latte/gguf.hpp>
#include <latte/model.hpp>
#include <latte/session.hpp>

#include <doctest/doctest.h>

#include <span>
#include <string>

TEST_CASE("a truncated CUDA session continued with new tokens equals a fresh one, both backends") {
  for (const char* flavour : {"test-v2-lite", "test-glm-dsa"}) {
    const latte::ModelConfig config = latte::model_preset(flavour);
    const auto bytes = latte::random_model_bytes(config, {.seed = 31});
    const latte::Model model = latte::Model::from_file(
        latte::gguf::File::from_bytes(bytes, std::string(flavour) + ".gguf"), {.device = latte::Device::cuda(0)});
    const auto first = latte::test::fresh_tokens(30, config.n_vocab);
    const auto other = latte::test::fresh_tokens(18, config.n_vocab);
    const std::span<const latte::Token> all(first);
    for (const char* backend : {"mla", "standard"}) {
      CAPTURE(flavour);
      CAPTURE(backend);
      latte::test::gpu::check_truncation(model, backend, all, 12, other, std::string(flavour) + " " + backend);
    }
  }
}
