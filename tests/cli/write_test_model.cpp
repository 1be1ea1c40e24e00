// Test helper: writes a random-weight model of a named preset to a GGUF file, optionally with every
// weight matrix (2-D and 3-D tensors but the embedding) in a ggml type such as q8_0 or q4_K.
//   latte_write_test_model test-v3 out.gguf [split|fused|both][+bytes] [TYPE] [MAIN_LAYERS]
// "+bytes" adds a byte-level BPE vocabulary without merges: ids 0..255 are the bytes, 256 is the BOS
// "<bos>" (added by encode), the rest up to n_vocab unused padding.
#include "model/presets.hpp"
#include "model/random_model.hpp"
#include "tokenizer/byte_level.hpp"

#include <latte/error.hpp>
#include <latte/gguf.hpp>
#include <latte/quant.hpp>
#include <latte/tokenizer.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s PRESET OUT.gguf [split|fused|both] [TYPE] [MAIN_LAYERS]\n", argv[0]);
    return 2;
  }
  try {
    latte::RandomModelOptions options{.seed = 2024};
    std::string layout = argc > 3 ? argv[3] : "split";
    const bool byte_vocab = layout.ends_with("+bytes");
    if (byte_vocab) layout.resize(layout.size() - 6);
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
    if (byte_vocab) {
      std::vector<std::string> tokens;
      std::vector<int32_t> types;
      for (int b = 0; b < 256; ++b) {
        tokens.push_back(latte::tokenizer::bytes_to_byte_level(std::string(1, static_cast<char>(b))));
        types.push_back(static_cast<int32_t>(latte::TokenType::normal));
      }
      tokens.push_back("<bos>");
      types.push_back(static_cast<int32_t>(latte::TokenType::control));
      while (static_cast<int>(tokens.size()) < config.n_vocab) {
        tokens.push_back("[PAD" + std::to_string(tokens.size()) + "]");
        types.push_back(static_cast<int32_t>(latte::TokenType::unused));
      }
      options.extra_metadata = [tokens, types](latte::gguf::Writer& w) {
        w.set("tokenizer.ggml.model", std::string("gpt2"));
        w.set("tokenizer.ggml.tokens", latte::gguf::Array(tokens));
        w.set("tokenizer.ggml.token_type", latte::gguf::Array(types));
        w.set("tokenizer.ggml.merges", latte::gguf::Array(std::vector<std::string>{}));
        w.set("tokenizer.ggml.bos_token_id", uint32_t{256});
        w.set("tokenizer.ggml.add_bos_token", true);
      };
    }
    options.n_threads = std::max(2u, std::thread::hardware_concurrency());
    latte::write_random_model(config, argv[2], options);
  } catch (const latte::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
