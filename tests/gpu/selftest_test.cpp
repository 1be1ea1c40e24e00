// The GPU self-test on this machine's first GPU: it runs, every case passes, it is fast, and
// ensure_selftest caches its verdict per architecture/driver under $XDG_CACHE_HOME/latte.
#include "diagnostics/selftest_cases.hpp"
#include "model/presets.hpp"
#include "model/random_model.hpp"
#include "support/temp_dir.hpp"

#include <latte/diagnostics.hpp>
#include <latte/error.hpp>
#include <latte/gguf.hpp>
#include <latte/model.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>

TEST_CASE("the GPU self-test passes on this device in under 30 s") {
  const auto t0 = std::chrono::steady_clock::now();
  const latte::diagnostics::SelftestResult r = latte::diagnostics::run_selftest(latte::Device::cuda(0));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s(%.1f s)\n", r.table.c_str(), seconds);
  REQUIRE(r.ran);
  CHECK(r.passed);
  CHECK(r.table.find("MISMATCH") == std::string::npos);
  CHECK(seconds < 30.0);
}

TEST_CASE("the GPU self-test at a model's shapes covers every kernel family and passes") {
  // A MoE model with an indexer (f32 weights) and a quantized test-v3 (k-quant and legacy blocks).
  latte::RandomModelOptions quantized{.seed = 9};
  quantized.tensor_type = [](std::string_view name, std::span<const uint64_t> ne) {
    if (ne.size() < 2 || ne[0] % 32 != 0) return latte::GgmlType::f32;
    if (name.find("ffn_down_exps") != std::string_view::npos) return latte::GgmlType::q8_0;
    if (ne[0] % 256 != 0) return latte::GgmlType::f32;
    if (name.find("_exps") != std::string_view::npos) return latte::GgmlType::q4_k;
    return name.starts_with("token_embd") ? latte::GgmlType::q6_k : latte::GgmlType::q5_0;
  };
  for (const auto& [preset, options] :
       {std::pair{"test-glm-dsa", latte::RandomModelOptions{.seed = 4}}, std::pair{"test-v3", quantized}}) {
    const auto bytes = latte::random_model_bytes(latte::model_preset(preset), options);
    const latte::Model model = latte::Model::from_file(latte::gguf::File::from_bytes(bytes, "m.gguf"));
    const auto t0 = std::chrono::steady_clock::now();
    const latte::diagnostics::SelftestResult r = latte::diagnostics::run_selftest(latte::Device::cuda(0), model);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s(%.1f s)\n", r.table.c_str(), seconds);
    REQUIRE(r.ran);
    CHECK(r.passed);
    CHECK(seconds < 30.0);
    const auto plan = latte::diagnostics::detail::selftest_plan(latte::diagnostics::detail::selftest_target(model));
    for (const auto& c : plan.cases) {
      INFO(c.name);
      CHECK(r.table.find(c.name) != std::string::npos);
    }
    CHECK(r.table.find(" 0 mismatched") != std::string::npos);
  }
}

TEST_CASE("ensure_selftest caches a pass per architecture and driver") {
  latte::test::TempDir dir;
  const char* old = std::getenv("XDG_CACHE_HOME");
  const std::string saved = old ? old : "";
  ::setenv("XDG_CACHE_HOME", dir.path().c_str(), 1);
  ::unsetenv("LATTE_NO_SELFTEST");
  latte::diagnostics::detail::forget_verified_devices();
  latte::diagnostics::ensure_selftest(latte::Device::cuda(0));
  int found = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path() + "/latte")) {
    const std::string name = e.path().filename().string();
    CHECK(name.starts_with("selftest-sm"));
    std::ifstream in(e.path());
    std::ostringstream s;
    s << in.rdbuf();
    CHECK(s.str().find("\"passed\": true") != std::string::npos);
    ++found;
  }
  CHECK(found == 1);
  latte::diagnostics::ensure_selftest(latte::Device::cuda(0));  // cached: returns at once
  if (old) {
    ::setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  } else {
    ::unsetenv("XDG_CACHE_HOME");
  }
  ::setenv("LATTE_NO_SELFTEST", "1", 1);  // as main() set it for the other cases
}

TEST_CASE("a CUDA Model::load refuses a device whose self-test failed, naming the kernel") {
  latte::test::TempDir dir;
  const char* old = std::getenv("XDG_CACHE_HOME");
  const std::string saved = old ? old : "";
  ::setenv("XDG_CACHE_HOME", dir.path().c_str(), 1);
  std::filesystem::create_directories(dir.path() + "/latte");
  // A cached failing verdict for this architecture/driver (as a wrong kernel would leave it).
  const std::string file = dir.path() + "/latte/selftest-" + latte::diagnostics::detail::selftest_identity(0) + ".json";
  std::ofstream(file) << R"({"passed": false, "table": ")"
                      << "rms_norm f32                 7x7168                 rel err 0.5        bound 1e-05    "
                         "MISMATCH\\n\"}\n";
  const auto bytes = latte::random_model_bytes(latte::model_preset("test-v3"), {.seed = 5});
  auto load = [&] {
    return latte::Model::from_file(latte::gguf::File::from_bytes(bytes, "test-v3.gguf"),
                                   {.device = latte::Device::cuda(0)});
  };
  latte::diagnostics::detail::forget_verified_devices();  // an earlier case may have verified device 0
  CHECK_NOTHROW(load());                                  // LATTE_NO_SELFTEST=1 (set by main) skips the check
  ::unsetenv("LATTE_NO_SELFTEST");
  std::string message;
  try {
    (void)load();
  } catch (const latte::Error& e) {
    message = e.what();
  }
  ::setenv("LATTE_NO_SELFTEST", "1", 1);
  if (old) {
    ::setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  } else {
    ::unsetenv("XDG_CACHE_HOME");
  }
  INFO(message);
  CHECK(message.find("self-test failed") != std::string::npos);
  CHECK(message.find("in rms_norm f32") != std::string::npos);
  CHECK(message.find("latte diagnose --selftest") != std::string::npos);
}
