// config.json settings that change what a checkpoint computes. rope_interleave false is converted:
// transformers' DeepseekV3 and Glm4MoeLite then rotate q_pe / k_pe with rotate_half, pairing dims
// (i, i + R/2). The test makes such a checkpoint from an oracle fixture by moving every rope row from
// the pairs (2i, 2i + 1) to the half-split pairs, so that transformers computes the same model from
// it, and latte's conversion of it must reproduce the fixture's transformers logits. Settings latte
// cannot state (another activation, attention biases, the setting on classes that do not read it, a
// half-split indexer RoPE, blocks that reuse another block's indexer selection) are refused by name.
#include "convert/hf_config.hpp"
#include "convert/hf_converter.hpp"
#include "support/random_models.hpp"
#include "support/safetensors.hpp"
#include "support/safetensors_writer.hpp"
#include "support/temp_dir.hpp"
#include "support/test_options.hpp"

#include <latte/error.hpp>
#include <latte/gguf.hpp>
#include <latte/model.hpp>
#include <latte/session.hpp>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

using nlohmann::json;

// Rows [offset, offset + R) of every `period` rows of a row-major [rows, cols] tensor of `elem` bytes
// per value, from interleaved order (rope dim 2i, 2i + 1 in rows offset + 2i, offset + 2i + 1) to
// half-split order (row offset + i holds dim 2i, row offset + R/2 + i holds dim 2i + 1).
std::vector<std::byte> to_half_split(std::span<const std::byte> data, uint64_t rows, uint64_t row_bytes,
                                     uint64_t period, uint64_t offset, uint64_t rope) {
  REQUIRE(data.size() == rows * row_bytes);
  REQUIRE(rows % period == 0);
  std::vector<std::byte> out(data.begin(), data.end());
  for (uint64_t block = 0; block < rows / period; ++block) {
    const uint64_t base = block * period + offset;
    for (uint64_t i = 0; i < rope / 2; ++i) {
      std::memcpy(&out[(base + i) * row_bytes], &data[(base + 2 * i) * row_bytes], row_bytes);
      std::memcpy(&out[(base + rope / 2 + i) * row_bytes], &data[(base + 2 * i + 1) * row_bytes], row_bytes);
    }
  }
  return out;
}

// The fixture at `src` rewritten into `dst` with half-split rope rows; config.json gets `changes`.
void write_half_split_checkpoint(const std::string& src, const std::string& dst, const json& changes) {
  json config = json::parse(latte::test::read_text_file(src + "/config.json"));
  const auto N = config["num_attention_heads"].get<uint64_t>(), P = config["qk_nope_head_dim"].get<uint64_t>();
  const auto R = config["qk_rope_head_dim"].get<uint64_t>(), L = config["kv_lora_rank"].get<uint64_t>();
  const latte::test::Safetensors in(src + "/model.safetensors");
  latte::test::SafetensorsWriter out;
  int moved = 0;
  for (const auto& [name, t] : in.tensors()) {
    REQUIRE(t.dtype == "BF16");
    std::vector<std::byte> bytes(t.data.begin(), t.data.end());
    const bool is_q = name.ends_with("self_attn.q_b_proj.weight") || name.ends_with("self_attn.q_proj.weight");
    const bool is_kv_a = name.ends_with("self_attn.kv_a_proj_with_mqa.weight");
    if (is_q || is_kv_a) {
      REQUIRE(t.shape.size() == 2);
      REQUIRE(t.shape[0] == (is_q ? N * (P + R) : L + R));
      bytes = to_half_split(t.data, t.shape[0], t.shape[1] * 2, is_q ? P + R : L + R, is_q ? P : L, R);
      ++moved;
    }
    out.add_raw(name, "BF16", t.shape, std::move(bytes));
  }
  REQUIRE(moved >= 2 * config["num_hidden_layers"].get<int>());
  out.write(dst + "/model.safetensors");
  config.update(changes);
  latte::test::write_text_file(dst + "/config.json", config.dump(2));
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
    latte::test::write_text_file(dst + "/" + f, latte::test::read_text_file(src + "/" + f));
  }
}

std::string convert(const std::string& folder, const std::string& out) {
  latte::convert::convert_hf_model({.model_folder = folder,
                                    .output_path = out,
                                    .mix = latte::convert::TypeMix::f32,
                                    .n_threads = 2,
                                    .progress = latte::convert::ProgressMeter::Mode::silent});
  return out;
}

// The float values of every tensor of a GGUF file by name.
std::map<std::string, std::vector<float>> tensor_values(const std::string& path) {
  const auto file = latte::gguf::File::open(path);
  std::map<std::string, std::vector<float>> out;
  for (const auto& info : file.tensors()) {
    REQUIRE(info.type == latte::GgmlType::f32);
    const auto bytes = file.tensor_data(info);
    std::vector<float> v(info.n_elements());
    std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
    out[info.name] = std::move(v);
  }
  return out;
}

}  // namespace

TEST_CASE("a rope_interleave false checkpoint converts to the model transformers computes from it") {
  const std::string root = latte::test::data_path("oracle");
  const std::string backend = latte::test::attention_backend();
  for (const std::string flavour : {"deepseek-v3", "glm-4.7-flash"}) {
    CAPTURE(flavour);
    latte::test::TempDir dir;
    const latte::test::Safetensors ref(root + "/" + flavour + "/reference.safetensors");
    const auto prompt = ref.ints("prompt");

    // Half-split rows, said: the same model as the fixture, so transformers' logits.
    write_half_split_checkpoint(root + "/" + flavour, dir.path(), json{{"rope_interleave", false}});
    const std::string half = convert(dir.path(), dir.file("half.gguf"));
    const latte::Model model = latte::Model::load(half);
    const double error =
        latte::test::relative_error(latte::test::all_logits(model, backend, prompt), ref.floats("logits"));
    CHECK(error <= 1e-5);
    // ... and every tensor is the one the fixture itself converts to.
    const std::string plain = convert(root + "/" + flavour, dir.file("plain.gguf"));
    const auto a = tensor_values(half), b = tensor_values(plain);
    CHECK(a.size() == b.size());
    for (const auto& [name, values] : b) {
      CAPTURE(name);
      REQUIRE(a.count(name));
      CHECK(a.at(name) == values);
    }

    // Control: the same rows with the setting left out (interleaved) are another model.
    latte::test::TempDir other;
    write_half_split_checkpoint(root + "/" + flavour, other.path(), json::object());
    const latte::Model wrong = latte::Model::load(convert(other.path(), other.file("wrong.gguf")));
    const double wrong_error =
        latte::test::relative_error(latte::test::all_logits(wrong, backend, prompt), ref.floats("logits"));
    CHECK(wrong_error > 1e-3);
    std::printf("rope_interleave false, %-13s %-8s logits error %.3g (left out: %.3g)\n", flavour.c_str(),
                backend.c_str(), error, wrong_error);
  }
}

TEST_CASE("config.json settings that latte cannot state are refused by name") {
  const std::string root = latte::test::data_path("oracle");
  const auto refuse = [](json config, const json& changes, const std::string& key) {
    config.update(changes);
    try {
      (void)latte::convert::read_hf_config(config.dump(), "config.json");
      FAIL("accepted " << changes.dump());
    } catch (const latte::Error& e) {
      CHECK(e.code() == latte::ErrorCode::unsupported);
      CHECK_MESSAGE(std::string(e.what()).find("\"" + key + "\"") != std::string::npos, e.what());
    }
  };
  const auto accept = [](json config, const json& changes) {
    config.update(changes);
    CHECK_NOTHROW((void)latte::convert::read_hf_config(config.dump(), "config.json"));
  };
  const json v2 = json::parse(latte::test::read_text_file(root + "/deepseek-v2-lite/config.json"));
  const json v3 = json::parse(latte::test::read_text_file(root + "/deepseek-v3/config.json"));
  const json glm5 = json::parse(latte::test::read_text_file(root + "/glm-5-sparse/config.json"));

  accept(v3, json::object());
  accept(v3, {{"hidden_act", "silu"}, {"attention_bias", false}, {"rope_interleave", true}});
  CHECK(latte::convert::read_hf_config(v3.dump(), "config.json").rope_half_split == false);
  {
    json c = v3;
    c["rope_interleave"] = false;
    CHECK(latte::convert::read_hf_config(c.dump(), "config.json").rope_half_split);
  }
  refuse(v3, {{"hidden_act", "gelu"}}, "hidden_act");
  refuse(v3, {{"attention_bias", true}}, "attention_bias");
  // transformers' DeepseekV2 and GlmMoeDsa have no such setting: a false one is not guessed at
  refuse(v2, {{"rope_interleave", false}}, "rope_interleave");
  accept(v2, {{"rope_interleave", true}});
  refuse(glm5, {{"rope_interleave", false}}, "rope_interleave");

  accept(glm5, json::object());
  accept(glm5, {{"indexer_rope_interleave", true}, {"indexer_types", {"full", "full"}}});
  accept(glm5, {{"use_index_cache", true}, {"index_topk_freq", 1}, {"index_topk_pattern", "FF"}});
  accept(glm5, {{"use_index_cache", false}, {"index_topk_freq", 4}});
  refuse(glm5, {{"indexer_rope_interleave", false}}, "indexer_rope_interleave");
  refuse(glm5, {{"indexer_types", {"full", "shared"}}}, "indexer_types");
  refuse(glm5, {{"use_index_cache", true}, {"index_topk_freq", 4}}, "index_topk_freq");
  refuse(glm5, {{"use_index_cache", true}, {"index_topk_pattern", "FS"}}, "index_topk_pattern");
  refuse(glm5, {{"use_index_cache", true}, {"index_topk_pattern", {"F", "S"}}}, "index_topk_pattern");
}
