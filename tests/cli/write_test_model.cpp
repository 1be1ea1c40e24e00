// Test helper: writes a random-weight model of a named preset to a GGUF file.
//   latte_write_test_model test-v3 out.gguf [split|fused|both]
#include "model/presets.hpp"
#include "model/random_model.hpp"

#include <latte/error.hpp>

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s PRESET OUT.gguf [split|fused|both]\n", argv[0]);
    return 2;
  }
  try {
    latte::RandomModelOptions options{.seed = 2024};
    const std::string layout = argc > 3 ? argv[3] : "split";
    options.kv_b_layout = layout == "fused"  ? latte::KvBLayout::fused
                          : layout == "both" ? latte::KvBLayout::both
                                             : latte::KvBLayout::split;
    latte::write_random_model(latte::model_preset(argv[1]), argv[2], options);
  } catch (const latte::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
