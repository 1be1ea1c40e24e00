// Test helper: writes a random-weight model of a named preset to a GGUF file, optionally with every
// weight matrix (2-D and 3-D tensors but the embedding) in a ggml type such as q8_0 or q4_K.
//   latte_write_test_model test-v3 out.gguf [split|fused|both] [TYPE] [MAIN_LAYERS]
#include "model/presets.hpp"
#include "model/random_model.hpp"

#include <latte/error.hpp>
#include <latte/quant.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s PRESET OUT.gguf [split|fused|both] [TYPE] [MAIN_LAYERS]\n", argv[0]);
    return 2;
  }
  try {
    latte::RandomModelOptions options{.seed = 2024};
    const std::string layout = argc > 3 ? argv[3] : "split";
    options.kv_b_layout = layout == "fused"  ? latte::KvBLayout::fused
                          : layout == "both" ? latte::KvBLayout::both
                                             : latte::KvBLayout::split;
    if (argc > 4) {
      const latte::GgmlType type = latte::parse_type_name(argv[4]);
      options.tensor_type = [type](std::string_view name, std::span<const uint64_t> ne) {
        return ne.size() >= 2 && name != "token_embd.weight" ? type : latte::GgmlType::f32;
      };
    }
    latte::ModelConfig config = latte::model_preset(argv[1]);
    if (argc > 5) latte::set_main_layer_count(config, std::atoi(argv[5]));
    options.n_threads = std::max(2u, std::thread::hardware_concurrency());
    latte::write_random_model(config, argv[2], options);
  } catch (const latte::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
