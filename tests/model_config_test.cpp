// ModelConfig: metadata round trips, llama.cpp's defaults, and errors naming the key at fault.
#include "model/presets.hpp"
#include "support/gguf_rewrite.hpp"

#include <latte/error.hpp>
#include <latte/gguf.hpp>
#include <latte/model.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <string>

namespace {

std::vector<std::byte> metadata_only(const latte::ModelConfig& c,
                                     latte::ModelConfig::KvMetadata kv = latte::ModelConfig::KvMetadata::mla) {
  latte::gguf::Writer w;
  c.write_gguf_metadata(w, kv);
  return w.write_to_memory([](size_t, std::span<std::byte>) {});
}

latte::gguf::File file_of(std::vector<std::byte> bytes) { return latte::gguf::File::from_bytes(bytes, "test.gguf"); }

/// The Error from_gguf throws for the file, or fails the test.
latte::Error config_error(const std::vector<std::byte>& bytes) {
  try {
    (void)latte::ModelConfig::from_gguf(file_of(bytes));
  } catch (const latte::Error& e) {
    return e;
  }
  FAIL("from_gguf accepted the file");
  return latte::Error(latte::ErrorCode::internal, "");
}

}  // namespace

TEST_CASE("every preset's config round-trips through GGUF metadata, in both K/V conventions") {
  for (std::string_view name : latte::model_preset_names()) {
    CAPTURE(name);
    const latte::ModelConfig c = latte::model_preset(name);
    CHECK_NOTHROW(c.validate());
    CHECK(latte::ModelConfig::from_gguf(file_of(metadata_only(c))) == c);
    CHECK(latte::ModelConfig::from_gguf(file_of(metadata_only(c, latte::ModelConfig::KvMetadata::legacy))) == c);
  }
}

TEST_CASE("the MLA metadata convention stores latent widths in key_length / value_length") {
  const latte::ModelConfig c = latte::model_preset("deepseek-v3");
  const auto f = file_of(metadata_only(c));
  CHECK(f.get<uint32_t>("deepseek2.attention.key_length") == 576);
  CHECK(f.get<uint32_t>("deepseek2.attention.value_length") == 512);
  CHECK(f.get<uint32_t>("deepseek2.attention.key_length_mla") == 192);
  CHECK(f.get<uint32_t>("deepseek2.attention.value_length_mla") == 128);
  CHECK(f.get<uint32_t>("deepseek2.attention.head_count_kv") == 1);
}

TEST_CASE("absent optional keys take llama.cpp's defaults") {
  latte::ModelConfig c = latte::model_preset("test-v3");
  const auto full = file_of(metadata_only(c));
  const auto bytes = latte::test::GgufRewrite(full)
                         .drop_key("deepseek2.expert_gating_func")
                         .drop_key("deepseek2.expert_weights_scale")
                         .drop_key("deepseek2.expert_weights_norm")
                         .drop_key("deepseek2.expert_group_count")
                         .drop_key("deepseek2.expert_group_used_count")
                         .drop_key("deepseek2.rope.scaling.type")
                         .bytes();
  const latte::ModelConfig read = latte::ModelConfig::from_gguf(file_of(bytes));
  CHECK(read.expert_gating == latte::ExpertGating::softmax);  // DeepSeek-V2 / V2.5 files
  CHECK(read.expert_weights_scale == 1.0f);
  CHECK(read.expert_weights_norm == false);
  CHECK(read.n_expert_group == 1);
  CHECK(read.rope_scaling.type == latte::RopeScalingType::none);

  const auto glm = file_of(metadata_only(latte::model_preset("test-glm-dsa")));
  const auto glm_bytes = latte::test::GgufRewrite(glm).drop_key("glm-dsa.expert_gating_func").bytes();
  CHECK(latte::ModelConfig::from_gguf(file_of(glm_bytes)).expert_gating == latte::ExpertGating::sigmoid);
}

TEST_CASE("a missing required key is reported by name") {
  const auto full = file_of(metadata_only(latte::model_preset("test-v2-lite")));
  for (const char* key : {"deepseek2.attention.kv_lora_rank", "deepseek2.embedding_length", "deepseek2.expert_count",
                          "deepseek2.attention.layer_norm_rms_epsilon", "deepseek2.rope.dimension_count"}) {
    CAPTURE(key);
    const latte::Error e = config_error(latte::test::GgufRewrite(full).drop_key(key).bytes());
    CHECK(e.code() == latte::ErrorCode::invalid_file);
    CHECK(std::string(e.what()).find(key) != std::string::npos);
  }
  const latte::Error idx =
      config_error(latte::test::GgufRewrite(file_of(metadata_only(latte::model_preset("test-glm-dsa"))))
                       .drop_key("glm-dsa.attention.indexer.top_k")
                       .bytes());
  CHECK(std::string(idx.what()).find("glm-dsa.attention.indexer.top_k") != std::string::npos);
}

TEST_CASE("a key of the wrong type is reported with its name") {
  const auto full = file_of(metadata_only(latte::model_preset("test-v2-lite")));
  const latte::Error e =
      config_error(latte::test::GgufRewrite(full)
                       .set_key("deepseek2.attention.head_count", latte::gguf::Value(std::string("four")))
                       .bytes());
  CHECK(e.code() == latte::ErrorCode::invalid_file);
  CHECK(std::string(e.what()).find("deepseek2.attention.head_count") != std::string::npos);
}

TEST_CASE("an unknown architecture is unsupported, and the error lists the supported ones") {
  latte::gguf::Writer w;
  w.set("general.architecture", std::string("llama"));
  const auto bytes = w.write_to_memory([](size_t, std::span<std::byte>) {});
  const latte::Error e = config_error(bytes);
  CHECK(e.code() == latte::ErrorCode::unsupported);
  const std::string msg = e.what();
  CHECK(msg.find("'llama'") != std::string::npos);
  CHECK(msg.find("deepseek2, glm-dsa") != std::string::npos);
}

TEST_CASE("inconsistent values are all listed in one error") {
  latte::ModelConfig c = latte::model_preset("test-v3");
  c.n_expert_used = 20;     // more than the 16 experts
  c.n_expert_group = 3;     // does not divide 16
  c.qk_rope_head_dim = 63;  // odd
  try {
    c.validate();
    FAIL("validate accepted the config");
  } catch (const latte::Error& e) {
    const std::string msg = e.what();
    CHECK(e.code() == latte::ErrorCode::invalid_file);
    CHECK(msg.find("3 problems") != std::string::npos);
    CHECK(msg.find("expert_used_count (20)") != std::string::npos);
    CHECK(msg.find("expert_group_count (3)") != std::string::npos);
    CHECK(msg.find("rope.dimension_count must be even") != std::string::npos);
  }
}

TEST_CASE("files without the *_mla keys read the head widths from key_length and value_length") {
  const latte::ModelConfig c = latte::model_preset("test-glm-flash");
  const auto bytes = metadata_only(c, latte::ModelConfig::KvMetadata::legacy);
  const auto f = file_of(bytes);
  CHECK(f.find("deepseek2.attention.key_length_mla") == nullptr);
  CHECK(f.get<uint32_t>("deepseek2.attention.key_length") == 256);
  const auto read = latte::ModelConfig::from_gguf(f);
  CHECK(read.qk_nope_head_dim == 192);
  CHECK(read.v_head_dim == 256);
}
