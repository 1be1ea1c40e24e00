// `latte convert` on tiny checkpoints written by the test: every GGUF tensor equals its source weights
// under llama.cpp's layout transforms (experts stacked, kv_b split with k_b transposed per head), and
// the metadata states the model as llama.cpp's converter does.
#include "convert/hf_converter.hpp"
#include "support/hf_checkpoint.hpp"
#include "support/temp_dir.hpp"

#include <latte/error.hpp>
#include <latte/gguf.hpp>
#include <latte/quant.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <random>

namespace {

using latte::test::HfTensor;
using latte::test::TinyHfSpec;

struct Expected {
  std::vector<uint64_t> ne;
  std::vector<float> values;  // GGUF memory order (ne[0] fastest)
};

// What llama.cpp's converter writes for the spec, computed here from the HF weights.
std::map<std::string, Expected> expected_tensors(const TinyHfSpec& s, const std::map<std::string, HfTensor>& hf,
                                                 bool keep_mtp) {
  std::map<std::string, Expected> out;
  auto plain = [&](const std::string& gguf, const std::string& name) {
    const HfTensor& t = hf.at(name);
    out[gguf] = Expected{std::vector<uint64_t>(t.shape.rbegin(), t.shape.rend()), t.values};
  };
  const auto H = static_cast<uint64_t>(s.hidden), N = static_cast<uint64_t>(s.heads);
  const auto L = static_cast<uint64_t>(s.kv_lora), P = static_cast<uint64_t>(s.nope),
             V = static_cast<uint64_t>(s.v_head);
  plain("token_embd.weight", "model.embed_tokens.weight");
  plain("output_norm.weight", "model.norm.weight");
  if (!s.tie_embeddings) plain("output.weight", "lm_head.weight");
  const int blocks = s.layers + (keep_mtp ? s.nextn : 0);
  for (int il = 0; il < blocks; ++il) {
    const std::string p = "model.layers." + std::to_string(il) + ".", b = "blk." + std::to_string(il) + ".";
    plain(b + "attn_norm.weight", p + "input_layernorm.weight");
    if (s.q_lora) {
      plain(b + "attn_q_a.weight", p + "self_attn.q_a_proj.weight");
      plain(b + "attn_q_a_norm.weight", p + "self_attn.q_a_layernorm.weight");
      plain(b + "attn_q_b.weight", p + "self_attn.q_b_proj.weight");
    } else {
      plain(b + "attn_q.weight", p + "self_attn.q_proj.weight");
    }
    plain(b + "attn_kv_a_mqa.weight", p + "self_attn.kv_a_proj_with_mqa.weight");
    plain(b + "attn_kv_a_norm.weight", p + "self_attn.kv_a_layernorm.weight");
    const auto& kv_b = hf.at(p + "self_attn.kv_b_proj.weight").values;  // [N (P + V), L]
    Expected k_b{{P, L, N}, std::vector<float>(P * L * N)}, v_b{{L, V, N}, std::vector<float>(L * V * N)};
    for (uint64_t h = 0; h < N; ++h) {
      for (uint64_t l = 0; l < L; ++l) {
        for (uint64_t q = 0; q < P; ++q) k_b.values[(h * L + l) * P + q] = kv_b[(h * (P + V) + q) * L + l];
        for (uint64_t v = 0; v < V; ++v) v_b.values[(h * V + v) * L + l] = kv_b[(h * (P + V) + P + v) * L + l];
      }
    }
    out[b + "attn_k_b.weight"] = k_b;
    out[b + "attn_v_b.weight"] = v_b;
    plain(b + "attn_output.weight", p + "self_attn.o_proj.weight");
    if (s.indexer) {
      plain(b + "indexer.attn_q_b.weight", p + "self_attn.indexer.wq_b.weight");
      plain(b + "indexer.attn_k.weight", p + "self_attn.indexer.wk.weight");
      plain(b + "indexer.k_norm.weight", p + "self_attn.indexer.k_norm.weight");
      plain(b + "indexer.k_norm.bias", p + "self_attn.indexer.k_norm.bias");
      plain(b + "indexer.proj.weight", p + "self_attn.indexer.weights_proj.weight");
    }
    plain(b + "ffn_norm.weight", p + "post_attention_layernorm.weight");
    if (il < s.dense_lead) {
      for (const char* w : {"gate", "up", "down"}) plain(b + "ffn_" + w + ".weight", p + "mlp." + w + "_proj.weight");
    } else {
      plain(b + "ffn_gate_inp.weight", p + "mlp.gate.weight");
      if (s.e_score_bias) plain(b + "exp_probs_b.bias", p + "mlp.gate.e_score_correction_bias");
      for (const char* w : {"gate", "up", "down"}) {
        Expected stacked;
        for (int e = 0; e < s.n_expert; ++e) {
          const HfTensor& t = hf.at(p + "mlp.experts." + std::to_string(e) + "." + w + "_proj.weight");
          stacked.values.insert(stacked.values.end(), t.values.begin(), t.values.end());
          stacked.ne = {t.shape[1], t.shape[0], static_cast<uint64_t>(s.n_expert)};
        }
        out[b + "ffn_" + w + "_exps.weight"] = stacked;
        if (s.n_shared) plain(b + "ffn_" + w + "_shexp.weight", p + "mlp.shared_experts." + w + "_proj.weight");
      }
    }
    if (il >= s.layers) {
      plain(b + "nextn.eh_proj.weight", p + "eh_proj.weight");
      plain(b + "nextn.enorm.weight", p + "enorm.weight");
      plain(b + "nextn.hnorm.weight", p + "hnorm.weight");
      plain(b + "nextn.embed_tokens.weight", p + "embed_tokens.weight");
      plain(b + "nextn.shared_head_head.weight", p + "shared_head.head.weight");
      plain(b + "nextn.shared_head_norm.weight", p + "shared_head.norm.weight");
    }
  }
  (void)H;
  return out;
}

// Converts and checks every tensor against `expected`, each within `tolerance` of the source value
// relative to the tensor's largest magnitude (0 = exact).
void check_conversion(const std::string& gguf_path, const std::map<std::string, Expected>& expected, double tolerance) {
  const auto file = latte::gguf::File::open(gguf_path);
  std::map<std::string, bool> seen;
  for (const auto& info : file.tensors()) {
    CAPTURE(info.name);
    const auto it = expected.find(info.name);
    REQUIRE_MESSAGE(it != expected.end(), "unexpected tensor " << info.name);
    seen[info.name] = true;
    const Expected& want = it->second;
    std::vector<uint64_t> ne(info.ne.begin(), info.ne.begin() + info.n_dims);
    CHECK(ne == want.ne);
    REQUIRE(info.n_elements() == want.values.size());
    std::vector<float> got(want.values.size());
    latte::dequantize_rows(info.type, file.tensor_data(info).data(), got.data(), static_cast<int64_t>(info.n_rows()),
                           static_cast<int64_t>(info.ne[0]));
    double max_abs = 0, max_err = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      max_abs = std::max(max_abs, std::fabs(static_cast<double>(want.values[i])));
      max_err = std::max(max_err, std::fabs(static_cast<double>(got[i]) - want.values[i]));
    }
    CHECK(max_err <= tolerance * max_abs);
  }
  CHECK(seen.size() == expected.size());
  for (const auto& [name, e] : expected) CHECK_MESSAGE(seen.count(name), "missing tensor " << name);
}

latte::convert::ConvertReport convert(const std::string& folder, const std::string& out, latte::convert::TypeMix mix,
                                      std::optional<bool> keep_mtp = std::nullopt) {
  return latte::convert::convert_hf_model({.model_folder = folder,
                                           .output_path = out,
                                           .mix = mix,
                                           .n_threads = 3,
                                           .keep_mtp = keep_mtp,
                                           .name = "tiny",
                                           .progress = latte::convert::ProgressMeter::Mode::silent});
}

}  // namespace

TEST_CASE("convert writes a tiny DeepSeek-V3 checkpoint in llama.cpp's layout and metadata") {
  std::mt19937 rng(std::random_device{}());
  latte::test::TempDir dir;
  const TinyHfSpec spec;  // V3-like: q_lora, sigmoid + bias, groups, YaRN
  const auto hf = latte::test::write_tiny_hf_checkpoint(dir.path(), spec, rng);
  const std::string out = dir.file("v3.gguf");
  const auto report = convert(dir.path(), out, latte::convert::TypeMix::f32);
  check_conversion(out, expected_tensors(spec, hf, false), 0.0);

  const auto f = latte::gguf::File::open(out);
  CHECK(f.get<std::string>("general.architecture") == "deepseek2");
  CHECK(f.get<std::string>("general.name") == "tiny");
  CHECK(f.get<uint32_t>("general.file_type") == 0);
  CHECK(f.get<uint32_t>("general.quantization_version") == 2);
  CHECK(f.get<uint32_t>("deepseek2.block_count") == 3);
  CHECK(f.get<uint32_t>("deepseek2.embedding_length") == 64);
  CHECK(f.get<uint32_t>("deepseek2.leading_dense_block_count") == 1);
  CHECK(f.get<uint32_t>("deepseek2.expert_count") == 4);
  CHECK(f.get<uint32_t>("deepseek2.expert_used_count") == 2);
  CHECK(f.get<uint32_t>("deepseek2.expert_shared_count") == 1);
  CHECK(f.get<uint32_t>("deepseek2.expert_group_count") == 2);
  CHECK(f.get<uint32_t>("deepseek2.expert_gating_func") == 2);
  CHECK(f.get<float>("deepseek2.expert_weights_scale") == 2.5f);
  CHECK(f.get<bool>("deepseek2.expert_weights_norm"));
  CHECK(f.get<uint32_t>("deepseek2.attention.head_count") == 2);
  CHECK(f.get<uint32_t>("deepseek2.attention.head_count_kv") == 1);
  CHECK(f.get<uint32_t>("deepseek2.attention.key_length") == 32 + 8);
  CHECK(f.get<uint32_t>("deepseek2.attention.value_length") == 32);
  CHECK(f.get<uint32_t>("deepseek2.attention.key_length_mla") == 16 + 8);
  CHECK(f.get<uint32_t>("deepseek2.attention.value_length_mla") == 24);
  CHECK(f.get<uint32_t>("deepseek2.attention.q_lora_rank") == 48);
  CHECK(f.get<uint32_t>("deepseek2.attention.kv_lora_rank") == 32);
  CHECK(f.get<uint32_t>("deepseek2.rope.dimension_count") == 8);
  CHECK(f.get<std::string>("deepseek2.rope.scaling.type") == "yarn");
  CHECK(f.get<float>("deepseek2.rope.scaling.factor") == 40.0f);
  CHECK(f.get<uint32_t>("deepseek2.rope.scaling.original_context_length") == 128);
  CHECK(f.get<float>("deepseek2.rope.scaling.yarn_log_multiplier") == doctest::Approx(0.0707f));
  CHECK(f.find("deepseek2.nextn_predict_layers") == nullptr);
  CHECK(report.n_tensors == f.tensors().size());
  // Norms, router and bias stay F32 in every mix.
  CHECK(f.find_tensor("blk.1.ffn_gate_inp.weight")->type == latte::GgmlType::f32);
}

TEST_CASE("convert handles a DeepSeek-V2-Lite-like BF16 checkpoint without q_lora, softmax gating, F16 out") {
  std::mt19937 rng(std::random_device{}());
  latte::test::TempDir dir;
  TinyHfSpec spec;
  spec.architecture = "DeepseekV2ForCausalLM";
  spec.q_lora = 0;
  spec.scoring_func = "";  // V2-Lite's config says softmax; without the key deepseek2 means softmax too
  spec.e_score_bias = false;
  spec.n_group = 1;
  spec.topk_group = 1;
  spec.n_shared = 2;
  spec.dtype = "BF16";
  spec.shards = 3;
  const auto hf = latte::test::write_tiny_hf_checkpoint(dir.path(), spec, rng);
  const std::string out = dir.file("v2l.gguf");
  convert(dir.path(), out, latte::convert::TypeMix::f16);
  // BF16 values are exact in F16 except below F16's normal range (2^-14), where F16 keeps 2^-24 steps.
  check_conversion(out, expected_tensors(spec, hf, false), 1e-5);
  const auto f = latte::gguf::File::open(out);
  CHECK(f.get<uint32_t>("deepseek2.expert_gating_func") == 1);
  CHECK(f.find("deepseek2.attention.q_lora_rank") == nullptr);
  CHECK(f.find_tensor("blk.0.attn_q.weight")->type == latte::GgmlType::f16);
  CHECK(f.find_tensor("blk.0.attn_norm.weight")->type == latte::GgmlType::f32);
  CHECK(f.get<uint32_t>("general.file_type") == 1);
}

TEST_CASE("convert dequantizes DeepSeek-V3 fp8 block-scaled weights and drops its MTP block like llama.cpp") {
  std::mt19937 rng(std::random_device{}());
  latte::test::TempDir dir;
  TinyHfSpec spec;
  spec.fp8 = true;
  spec.nextn = 1;
  const auto hf = latte::test::write_tiny_hf_checkpoint(dir.path(), spec, rng);
  const std::string out = dir.file("v3.gguf");
  const auto report = convert(dir.path(), out, latte::convert::TypeMix::f32);
  // Every value of the MTP block 3 was skipped, not converted.
  CHECK(!report.skipped.empty());
  for (const auto& name : report.skipped) CHECK(name.starts_with("model.layers.3."));
  // fp8 * scale is exact in fp32 for these magnitudes.
  check_conversion(out, expected_tensors(spec, hf, false), 1e-7);
  const auto f = latte::gguf::File::open(out);
  CHECK(f.get<uint32_t>("deepseek2.block_count") == 3);

  const std::string with_mtp = dir.file("v3-mtp.gguf");
  convert(dir.path(), with_mtp, latte::convert::TypeMix::f32, true);
  check_conversion(with_mtp, expected_tensors(spec, hf, true), 1e-7);
  const auto g = latte::gguf::File::open(with_mtp);
  CHECK(g.get<uint32_t>("deepseek2.block_count") == 4);
  CHECK(g.get<uint32_t>("deepseek2.nextn_predict_layers") == 1);
}

TEST_CASE("convert writes GLM-5 (glm-dsa) with its indexer and keeps the MTP block") {
  std::mt19937 rng(std::random_device{}());
  latte::test::TempDir dir;
  TinyHfSpec spec;
  spec.architecture = "GlmMoeDsaForCausalLM";
  spec.indexer = true;
  spec.nextn = 1;
  spec.scoring_func = "";  // GLM configs leave it out: sigmoid
  spec.yarn = false;
  spec.nope = 24;
  spec.v_head = 32;
  const auto hf = latte::test::write_tiny_hf_checkpoint(dir.path(), spec, rng);
  const std::string out = dir.file("glm5.gguf");
  convert(dir.path(), out, latte::convert::TypeMix::bf16);
  check_conversion(out, expected_tensors(spec, hf, true), 1.0 / 128);  // bf16 rounding: 2^-8 relative
  const auto f = latte::gguf::File::open(out);
  CHECK(f.get<std::string>("general.architecture") == "glm-dsa");
  CHECK(f.get<uint32_t>("glm-dsa.block_count") == 4);
  CHECK(f.get<uint32_t>("glm-dsa.nextn_predict_layers") == 1);
  CHECK(f.get<uint32_t>("glm-dsa.attention.indexer.head_count") == 4);
  CHECK(f.get<uint32_t>("glm-dsa.attention.indexer.key_length") == 16);
  CHECK(f.get<uint32_t>("glm-dsa.attention.indexer.top_k") == 8);
  CHECK(f.get<uint32_t>("glm-dsa.expert_gating_func") == 2);
  CHECK(f.find("glm-dsa.rope.scaling.type") == nullptr);
  CHECK(f.find_tensor("blk.2.indexer.proj.weight")->type == latte::GgmlType::f32);
  CHECK(f.find_tensor("blk.2.indexer.attn_k.weight")->type == latte::GgmlType::bf16);
  CHECK(f.find_tensor("blk.3.nextn.eh_proj.weight") != nullptr);
}

TEST_CASE("convert to q8_0 stays within Q8_0's rounding of every source value") {
  std::mt19937 rng(std::random_device{}());
  latte::test::TempDir dir;
  TinyHfSpec spec;
  spec.architecture = "Glm4MoeLiteForCausalLM";
  spec.nextn = 1;
  spec.scoring_func = "";
  const auto hf = latte::test::write_tiny_hf_checkpoint(dir.path(), spec, rng);
  const std::string out = dir.file("flash.gguf");
  convert(dir.path(), out, latte::convert::TypeMix::q8_0);
  // Q8_0: per 32 values d = amax/127 stored as fp16 (relative error 2^-11); |x - q d| <= d/2 + 127 d 2^-11.
  check_conversion(out, expected_tensors(spec, hf, true), (0.5 + 127.0 / 2048) / 127);
  const auto f = latte::gguf::File::open(out);
  CHECK(f.get<uint32_t>("deepseek2.nextn_predict_layers") == 1);
  CHECK(f.get<uint32_t>("deepseek2.expert_gating_func") == 2);
  CHECK(f.find_tensor("blk.1.ffn_down_exps.weight")->type == latte::GgmlType::q8_0);
  CHECK(f.find_tensor("blk.1.attn_k_b.weight")->type == latte::GgmlType::f16);  // P = 16 is not a multiple of 32
  CHECK(f.get<uint32_t>("general.file_type") == 7);
}

TEST_CASE("convert rejects unknown architectures, missing, mis-shaped and unexpected tensors") {
  std::mt19937 rng(std::random_device{}());
  const auto expect_error = [](const std::string& folder, latte::ErrorCode code, const std::string& part) {
    latte::test::TempDir out;
    try {
      convert(folder, out.file("x.gguf"), latte::convert::TypeMix::f32);
      FAIL("converted a bad checkpoint");
    } catch (const latte::Error& e) {
      CHECK(e.code() == code);
      CHECK_MESSAGE(std::string(e.what()).find(part) != std::string::npos, std::string(e.what()));
    }
  };
  {
    latte::test::TempDir dir;
    TinyHfSpec spec;
    spec.architecture = "LlamaForCausalLM";
    latte::test::write_tiny_hf_checkpoint(dir.path(), spec, rng);
    expect_error(dir.path(), latte::ErrorCode::unsupported, "LlamaForCausalLM");
  }
  {
    // The checkpoint has no lm_head.weight but the config does not tie the embeddings.
    latte::test::TempDir dir;
    TinyHfSpec spec;
    spec.tie_embeddings = true;
    latte::test::write_tiny_hf_checkpoint(dir.path(), spec, rng);
    spec.tie_embeddings = false;
    latte::test::write_text_file(dir.file("config.json"), latte::test::tiny_hf_config_json(spec));
    expect_error(dir.path(), latte::ErrorCode::not_found, "lm_head.weight");
  }
  {
    // kv_lora_rank 40 in the config against 32 in the weights.
    latte::test::TempDir dir;
    TinyHfSpec spec;
    latte::test::write_tiny_hf_checkpoint(dir.path(), spec, rng);
    spec.kv_lora = 40;
    latte::test::write_text_file(dir.file("config.json"), latte::test::tiny_hf_config_json(spec));
    expect_error(dir.path(), latte::ErrorCode::invalid_file, "kv_a_proj_with_mqa");
  }
  {
    // A block the config does not know about.
    latte::test::TempDir dir;
    TinyHfSpec spec;
    spec.layers = 4;
    latte::test::write_tiny_hf_checkpoint(dir.path(), spec, rng);
    spec.layers = 3;
    latte::test::write_text_file(dir.file("config.json"), latte::test::tiny_hf_config_json(spec));
    expect_error(dir.path(), latte::ErrorCode::invalid_file, "model.layers.3.");
  }
  {
    latte::test::TempDir dir;
    expect_error(dir.path(), latte::ErrorCode::not_found, "config.json");
  }
}

TEST_CASE("convert imports the tokenizer and --vocab-only writes metadata without tensors") {
  std::mt19937 rng(std::random_device{}());
  latte::test::TempDir dir;
  TinyHfSpec spec;
  spec.tie_embeddings = true;
  const auto hf = latte::test::write_tiny_hf_checkpoint(dir.path(), spec, rng);
  latte::test::write_tiny_hf_tokenizer(dir.path());
  const std::string out = dir.file("full.gguf");
  const auto report = convert(dir.path(), out, latte::convert::TypeMix::f32);
  CHECK(report.has_tokenizer);
  check_conversion(out, expected_tensors(spec, hf, false), 0.0);  // tied: no output.weight
  const auto f = latte::gguf::File::open(out);
  CHECK(f.find_tensor("output.weight") == nullptr);
  CHECK(f.get<std::string>("tokenizer.ggml.model") == "gpt2");
  const auto& tokens = f.get_strings("tokenizer.ggml.tokens");
  REQUIRE(tokens.size() == static_cast<size_t>(spec.vocab));  // padded to vocab_size
  CHECK(tokens[29] == "abc");
  CHECK(tokens[40] == "[PAD40]");
  CHECK(f.get<uint32_t>("tokenizer.ggml.bos_token_id") == 0);

  const std::string vocab_only = dir.file("vocab.gguf");
  latte::convert::convert_hf_model({.model_folder = dir.path(),
                                    .output_path = vocab_only,
                                    .vocab_only = true,
                                    .progress = latte::convert::ProgressMeter::Mode::silent});
  const auto v = latte::gguf::File::open(vocab_only);
  CHECK(v.tensors().empty());
  CHECK(v.get<std::string>("general.architecture") == "deepseek2");
  CHECK(v.get<uint32_t>("deepseek2.block_count") == 3);
  CHECK(v.get_strings("tokenizer.ggml.tokens") == tokens);

  latte::test::TempDir bare;
  latte::test::write_tiny_hf_checkpoint(bare.path(), spec, rng);
  CHECK_THROWS_AS(latte::convert::convert_hf_model({.model_folder = bare.path(),
                                                    .output_path = bare.file("v.gguf"),
                                                    .vocab_only = true,
                                                    .progress = latte::convert::ProgressMeter::Mode::silent}),
                  latte::Error);
}

TEST_CASE("convert to q4_k_m applies the type rule and stays within K-quant error of the source") {
  std::mt19937 rng(std::random_device{}());
  latte::test::TempDir dir;
  TinyHfSpec spec;  // rows of 256 so that the K types apply; P = 32 falls back to Q5_0
  spec.hidden = 256, spec.q_lora = 256, spec.kv_lora = 256, spec.nope = 32, spec.rope = 32, spec.v_head = 32;
  spec.ff = 512, spec.ff_expert = 256, spec.vocab = 256;
  const auto hf = latte::test::write_tiny_hf_checkpoint(dir.path(), spec, rng);
  const std::string out = dir.file("q4km.gguf");
  convert(dir.path(), out, latte::convert::TypeMix::q4_k_m);
  // Q4_K: 8 sub-blocks of 32 with 6-bit scales and mins; |error| <= (max - min) / 30 of a sub-block
  // (up to 2/30 = 6.7% of the largest magnitude when a sub-block spans [-max, max]) plus the rounding of
  // the 6-bit scale and min (up to half a step of each), so 8% was seen exceeded (8.05%) on random data;
  // 12% keeps a margin (Q5_0, Q6_K are finer). A layout error would be of the order of the values.
  check_conversion(out, expected_tensors(spec, hf, false), 0.12);
  const auto f = latte::gguf::File::open(out);
  const auto type_of = [&](const char* name) { return latte::type_name(f.find_tensor(name)->type); };
  CHECK(type_of("token_embd.weight") == "q4_K");
  CHECK(type_of("output.weight") == "q6_K");
  CHECK(type_of("blk.0.ffn_down.weight") == "q4_K");  // 3 blocks: use_more_bits for block 2 only
  CHECK(type_of("blk.1.ffn_down_exps.weight") == "q4_K");
  CHECK(type_of("blk.2.ffn_down_exps.weight") == "q6_K");
  CHECK(type_of("blk.2.ffn_down_shexp.weight") == "q6_K");
  CHECK(type_of("blk.1.attn_k_b.weight") == "q5_0");
  CHECK(type_of("blk.1.attn_v_b.weight") == "q4_K");
  CHECK(type_of("blk.1.ffn_gate_inp.weight") == "f32");
  CHECK(type_of("blk.1.attn_kv_a_norm.weight") == "f32");
  CHECK(f.get<uint32_t>("general.file_type") == 15);
}
