// Conversion speed on a checkpoint with DeepSeek-V2-Lite's real shapes (BF16, synthetic values).
// Skipped by default (it writes gigabytes); run it on a large machine with
//   LATTE_CONVERT_BENCH_DIR=/scratch LATTE_CONVERT_BENCH_LAYERS=8 latte_tests -tc="convert speed*" --no-skip
#include "convert/hf_converter.hpp"
#include "support/hf_checkpoint.hpp"
#include "support/temp_dir.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

TEST_CASE("convert speed on a DeepSeek-V2-Lite-shaped BF16 checkpoint" * doctest::skip()) {
  latte::test::TempDir scratch;
  const char* dir_env = std::getenv("LATTE_CONVERT_BENCH_DIR");
  const std::string dir = dir_env ? std::string(dir_env) : scratch.path();
  const char* layers_env = std::getenv("LATTE_CONVERT_BENCH_LAYERS");
  const char* types_env = std::getenv("LATTE_CONVERT_BENCH_TYPES");
  const std::string model_dir = dir + "/v2-lite-bf16";
  std::filesystem::create_directories(model_dir);

  latte::test::TinyHfSpec spec;  // DeepSeek-V2-Lite's config.json
  spec.architecture = "DeepseekV2ForCausalLM";
  spec.vocab = 102400, spec.hidden = 2048, spec.layers = layers_env ? std::atoi(layers_env) : 4, spec.dense_lead = 1;
  spec.ff = 10944, spec.ff_expert = 1408, spec.n_expert = 64, spec.n_expert_used = 6, spec.n_shared = 2;
  spec.n_group = 1, spec.topk_group = 1, spec.scoring_func = "softmax", spec.e_score_bias = false;
  spec.heads = 16, spec.q_lora = 0, spec.kv_lora = 512, spec.nope = 128, spec.rope = 64, spec.v_head = 128;

  auto start = std::chrono::steady_clock::now();
  latte::test::write_synthetic_hf_checkpoint(model_dir, spec, 7);
  const double write_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("synthetic checkpoint: %d blocks written in %.1f s\n", spec.layers, write_s);

  const std::string types = types_env ? types_env : "bf16,q8_0,q4_k_m";
  for (size_t at = 0; at < types.size();) {
    const size_t end = std::min(types.find(',', at), types.size());
    const std::string type = types.substr(at, end - at);
    at = end + 1;
    const std::string out = dir + "/v2-lite-" + type + ".gguf";
    const auto report = latte::convert::convert_hf_model({.model_folder = model_dir,
                                                          .output_path = out,
                                                          .mix = latte::convert::parse_type_mix(type),
                                                          .n_threads = std::thread::hardware_concurrency(),
                                                          .progress = latte::convert::ProgressMeter::Mode::lines});
    std::printf(
        "%-7s %2d blocks: read %.2f GB, wrote %.2f GB in %.1f s: %.2f GB/s read, %.2f GB/s written (%u threads)\n",
        type.c_str(), spec.layers, static_cast<double>(report.bytes_read) / 1e9,
        static_cast<double>(report.bytes_written) / 1e9, report.seconds,
        static_cast<double>(report.bytes_read) / 1e9 / report.seconds,
        static_cast<double>(report.bytes_written) / 1e9 / report.seconds, std::thread::hardware_concurrency());
    CHECK(report.bytes_written > report.bytes_read / 8);
    std::filesystem::remove(out);
  }
}
