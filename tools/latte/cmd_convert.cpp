// `latte convert`: Hugging Face checkpoint -> GGUF (llama.cpp's names, layouts and metadata), or a
// synthetic model with a released model's shapes and random weights.
#include "command.hpp"

#include "convert/hf_converter.hpp"
#include "convert/progress_meter.hpp"
#include "convert/type_mix.hpp"
#include "model/presets.hpp"
#include "model/random_model.hpp"

#include <latte/error.hpp>
#include <latte/gguf.hpp>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <thread>

namespace {

using latte::Error;
using latte::ErrorCode;

constexpr const char* usage =
    "usage: latte convert MODEL_DIR -o OUT.gguf [options]\n"
    "       latte convert --random --preset NAME -o OUT.gguf [options]\n"
    "  MODEL_DIR            Hugging Face folder: config.json, *.safetensors, tokenizer.json\n"
    "  -o, --output F       the GGUF file to write\n"
    "  --type T             f32 | f16 | bf16 (default) | q8_0 | q4_k | q5_k | q6_k | q4_k_m | q5_k_m | iq4_nl |\n"
    "                       iq4_xs\n"
    "  -t, --threads N      worker threads (default: all)\n"
    "  --vocab-only         write the metadata and tokenizer only\n"
    "  --mtp | --no-mtp     keep or drop the multi-token-prediction blocks (default: as llama.cpp)\n"
    "  --name NAME          general.name (default: the folder's name)\n"
    "  --no-progress        no progress output\n"
    "random models:\n"
    "  --random             random weights instead of a checkpoint\n"
    "  --preset NAME        deepseek-v2-lite | deepseek-v3 | glm-4.7-flash | glm-5 | test-v3 | ...\n"
    "  --layers N           inference blocks (default: the preset's)\n"
    "  --experts N          routed experts per MoE block\n"
    "  --vocab N            vocabulary size\n"
    "  --seed S             random seed (default 1)\n";

int parse_int(const std::string& text, const char* option, int min_value) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < min_value) {
    throw Error(ErrorCode::invalid_argument,
                std::string(option) + " needs an integer >= " + std::to_string(min_value) + ", got '" + text + "'");
  }
  return value;
}

// Narrows a preset to `n_expert` routed experts, keeping the routing groups consistent.
void set_expert_count(latte::ModelConfig& c, int n_expert) {
  c.n_expert = n_expert;
  c.n_expert_used = std::min(c.n_expert_used, n_expert);
  if (c.n_expert_group > 1 && (n_expert % c.n_expert_group != 0 || n_expert / c.n_expert_group < 2)) {
    c.n_expert_group = 1;
    c.n_expert_group_used = 1;
  }
}

int run_random(latte::cli::Args& args, const std::string& output, latte::convert::TypeMix mix, unsigned n_threads,
               bool quiet) {
  const auto preset = args.take({"--preset"});
  if (!preset) throw Error(ErrorCode::invalid_argument, "--random needs --preset NAME");
  const auto layers = args.take({"--layers"});
  const auto experts = args.take({"--experts"});
  const auto vocab = args.take({"--vocab"});
  const auto seed = args.take({"--seed"});
  if (!args.positionals().empty()) throw Error(ErrorCode::invalid_argument, "--random takes no MODEL_DIR");

  latte::ModelConfig config = latte::model_preset(*preset);
  if (layers) latte::set_main_layer_count(config, parse_int(*layers, "--layers", 1));
  if (experts) set_expert_count(config, parse_int(*experts, "--experts", 1));
  if (vocab) config.n_vocab = parse_int(*vocab, "--vocab", 1);
  config.validate();

  const latte::convert::TypeMixContext context{.n_layer = config.n_layer, .n_expert = config.n_expert};
  latte::RandomModelOptions options;
  options.seed = seed ? static_cast<uint64_t>(parse_int(*seed, "--seed", 0)) : 1;
  options.n_threads = n_threads;
  options.tensor_type = [mix, context](std::string_view name, std::span<const uint64_t> ne) {
    return latte::convert::choose_tensor_type(mix, name, ne, context);
  };
  options.extra_metadata = [mix](latte::gguf::Writer& writer) {
    writer.set("general.type", std::string("model"));
    writer.set("general.file_type", latte::convert::llama_file_type(mix));
    writer.set("general.quantization_version", uint32_t{2});
  };
  const auto start = std::chrono::steady_clock::now();
  latte::write_random_model(config, output, options);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!quiet) {
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(output, ec);
    std::fprintf(
        stderr, "wrote %s: %s preset %s, %d blocks, %s in %s (%s/s)\n", output.c_str(),
        std::string(latte::convert::type_mix_name(mix)).c_str(), preset->c_str(), config.n_layer,
        latte::convert::ProgressMeter::format_bytes(static_cast<double>(bytes)).c_str(),
        latte::convert::ProgressMeter::format_duration(seconds).c_str(),
        latte::convert::ProgressMeter::format_bytes(static_cast<double>(bytes) / std::max(seconds, 1e-9)).c_str());
  }
  return 0;
}

int run_convert(std::span<const std::string> argv) {
  latte::cli::Args args(argv);
  if (args.flag({"--help", "-h"})) {
    std::fputs(usage, stdout);
    return 0;
  }
  const auto output = args.take({"--output", "-o"});
  const auto type = args.take({"--type"});
  const auto threads = args.take({"--threads", "-t"});
  const auto name = args.take({"--name"});
  const bool vocab_only = args.flag({"--vocab-only"});
  const bool mtp = args.flag({"--mtp"});
  const bool no_mtp = args.flag({"--no-mtp"});
  const bool no_progress = args.flag({"--no-progress"});
  const bool random = args.flag({"--random"});
  if (!output) throw Error(ErrorCode::invalid_argument, std::string("no output file (-o OUT.gguf)\n") + usage);
  if (mtp && no_mtp) throw Error(ErrorCode::invalid_argument, "give --mtp or --no-mtp, not both");
  const auto mix = latte::convert::parse_type_mix(type.value_or("bf16"));
  const unsigned n_threads = threads ? static_cast<unsigned>(parse_int(*threads, "--threads", 1))
                                     : std::max(1u, std::thread::hardware_concurrency());
  if (random) return run_random(args, *output, mix, n_threads, no_progress);

  const auto positionals = args.positionals();
  if (positionals.size() != 1) {
    throw Error(ErrorCode::invalid_argument, std::string("give one MODEL_DIR\n") + usage);
  }
  latte::convert::ConvertOptions options{
      .model_folder = positionals[0],
      .output_path = *output,
      .mix = mix,
      .n_threads = n_threads,
      .vocab_only = vocab_only,
      .keep_mtp = mtp      ? std::optional(true)
                  : no_mtp ? std::optional(false)
                           : std::nullopt,
      .name = name.value_or(""),
      .progress =
          no_progress ? latte::convert::ProgressMeter::Mode::silent : latte::convert::ProgressMeter::Mode::automatic,
  };
  const auto report = latte::convert::convert_hf_model(options);
  if (!report.has_tokenizer) {
    std::fprintf(stderr, "warning: %s has no tokenizer.json; %s has no tokenizer metadata\n", positionals[0].c_str(),
                 output->c_str());
  }
  if (!no_progress) {
    std::fprintf(
        stderr, "wrote %s: %zu tensors, %s%s\n", output->c_str(), report.n_tensors,
        latte::convert::ProgressMeter::format_bytes(static_cast<double>(report.bytes_written)).c_str(),
        report.skipped.empty()
            ? ""
            : (", skipped " + std::to_string(report.skipped.size()) + " checkpoint tensors (MTP blocks)").c_str());
  }
  return 0;
}

const latte::cli::Registration reg{
    {"convert", "convert a Hugging Face checkpoint (or random weights) to GGUF", run_convert}};

}  // namespace
