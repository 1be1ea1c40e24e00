// The attention backend registry: built-in backends, host-registered backends, selection rules.
#include "model/presets.hpp"
#include "support/env_scope.hpp"
#include "support/random_models.hpp"

#include <latte/attention.hpp>
#include <latte/error.hpp>
#include <latte/session.hpp>

#include <doctest/doctest.h>

#include <cstdlib>
#include <optional>
#include <string>

namespace {

using latte::test::EnvScope;

/// A host backend: delegates to the built-in mla backend and counts forward calls.
class CountingBackend final : public latte::AttentionBackend {
 public:
  CountingBackend(std::unique_ptr<latte::AttentionBackend> inner, int* calls)
      : inner_(std::move(inner)), calls_(calls) {}
  std::string_view name() const noexcept override { return "counting"; }
  latte::KvLayout kv_layout() const override { return inner_->kv_layout(); }
  void prepare(std::span<const latte::AttentionLayerWeights> layers) override { inner_->prepare(layers); }
  void forward(const latte::AttentionInput& in) override {
    ++*calls_;
    inner_->forward(in);
  }

 private:
  std::unique_ptr<latte::AttentionBackend> inner_;
  int* calls_;
};

}  // namespace

TEST_CASE("the registry lists the built-in backends and rejects unknown names with the list") {
  auto& registry = latte::AttentionRegistry::instance();
  const auto names = registry.names();
  CHECK(std::find(names.begin(), names.end(), "mla") != names.end());
  CHECK(std::find(names.begin(), names.end(), "standard") != names.end());
  const latte::ModelConfig c = latte::model_preset("test-v2-lite");
  try {
    (void)registry.create("flashy", c, latte::Device::cpu());
    FAIL("unknown backend created");
  } catch (const latte::Error& e) {
    CHECK(e.code() == latte::ErrorCode::not_found);
    CHECK(std::string(e.what()).find("available: mla, standard") != std::string::npos);
  }
  try {
    latte::Session s(latte::test::shared_random_model("test-v2-lite"), {.attention = "flashy"});
    FAIL("session with an unknown backend");
  } catch (const latte::Error& e) {
    CHECK(e.code() == latte::ErrorCode::not_found);
    CHECK(std::string(e.what()).find("mla, standard") != std::string::npos);
  }
}

TEST_CASE("a backend registered by the host application runs sessions and can be removed") {
  auto& registry = latte::AttentionRegistry::instance();
  int calls = 0;
  registry.add(
      {.name = "counting",
       .description = "mla, counting forward calls",
       .supports = [](const latte::ModelConfig&, latte::Device d) { return d.is_cpu(); },
       .create = [&calls](const latte::ModelConfig& c, latte::Device d) -> std::unique_ptr<latte::AttentionBackend> {
         return std::make_unique<CountingBackend>(latte::AttentionRegistry::instance().create("mla", c, d), &calls);
       }});
  const auto model = latte::test::shared_random_model("test-v2-lite");
  latte::Session s(model, {.attention = "counting"});
  CHECK(s.backend_name() == "counting");
  s.eval(std::vector<latte::Token>{3, 4, 5});
  CHECK(calls == model.config().n_layer_main());
  latte::Session reference(model, {.attention = "mla"});
  reference.eval(std::vector<latte::Token>{3, 4, 5});
  CHECK(latte::test::relative_error(s.logits(), reference.logits()) == 0.0);
  CHECK(registry.remove("counting") == 1);
  CHECK_THROWS_AS(latte::Session(model, {.attention = "counting"}), latte::Error);
}

TEST_CASE("backend selection: explicit parameter, then LATTE_ATTENTION, then LATTE_MLA_DISABLE, then auto") {
  const latte::ModelConfig c = latte::model_preset("test-v2-lite");
  const auto cpu = latte::Device::cpu();
  const EnvScope no_attention("LATTE_ATTENTION", nullptr);
  const EnvScope no_disable("LATTE_MLA_DISABLE", nullptr);
  CHECK(latte::resolve_attention_backend("auto", c, cpu) == "mla");
  CHECK(latte::resolve_attention_backend("", c, cpu) == "mla");
  {
    const EnvScope disable("LATTE_MLA_DISABLE", "1");
    CHECK(latte::resolve_attention_backend("auto", c, cpu) == "standard");
    CHECK(latte::resolve_attention_backend("mla", c, cpu) == "mla");
    const EnvScope env("LATTE_ATTENTION", "mla");
    CHECK(latte::resolve_attention_backend("auto", c, cpu) == "mla");  // LATTE_ATTENTION before the disable flag
    CHECK(latte::resolve_attention_backend("standard", c, cpu) == "standard");
  }
  {
    const EnvScope zero("LATTE_MLA_DISABLE", "0");
    CHECK(latte::resolve_attention_backend("auto", c, cpu) == "mla");
  }
  {
    const EnvScope env("LATTE_ATTENTION", "standard");
    CHECK(latte::resolve_attention_backend("auto", c, cpu) == "standard");
    CHECK(latte::resolve_attention_backend("mla", c, cpu) == "mla");
  }
  {
    const EnvScope env("LATTE_ATTENTION", "nonsense");
    CHECK_THROWS_AS((void)latte::resolve_attention_backend("auto", c, cpu), latte::Error);
  }
}
