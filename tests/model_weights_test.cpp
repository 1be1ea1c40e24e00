// The weight map: expected shapes, the audit of files that do not fit, MTP blocks, both K/V
// layouts (and a mis-laid-out one caught by the backend comparison), quantized weights.
#include "model/presets.hpp"
#include "model/weights.hpp"
#include "support/gguf_rewrite.hpp"
#include "support/random_models.hpp"

#include <latte/error.hpp>
#include <latte/gguf.hpp>
#include <latte/model.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

namespace {

constexpr double kFp32Tolerance = 1e-5;

const latte::detail::TensorSpec* find_spec(const std::vector<latte::detail::TensorSpec>& specs,
                                           const std::string& name) {
  const auto it = std::find_if(specs.begin(), specs.end(), [&](const auto& s) { return s.name == name; });
  return it == specs.end() ? nullptr : &*it;
}

std::vector<float> logits_of(const latte::Model& m, const std::string& backend, const std::vector<latte::Token>& t) {
  return latte::test::all_logits(m, backend, t);
}

}  // namespace

TEST_CASE("expected tensor shapes follow DESIGN.md's ggml layout") {
  const auto specs = latte::detail::expected_tensors(latte::model_preset("deepseek-v3"));
  using V = std::vector<uint64_t>;
  CHECK(find_spec(specs, "blk.0.attn_q_a.weight")->ne == V{7168, 1536});
  CHECK(find_spec(specs, "blk.0.attn_q_b.weight")->ne == V{1536, 128 * 192});
  CHECK(find_spec(specs, "blk.0.attn_kv_a_mqa.weight")->ne == V{7168, 576});
  CHECK(find_spec(specs, "blk.0.attn_k_b.weight")->ne == V{128, 512, 128});
  CHECK(find_spec(specs, "blk.0.attn_v_b.weight")->ne == V{512, 128, 128});
  CHECK(find_spec(specs, "blk.0.attn_kv_b.weight")->ne == V{512, 128 * 256});
  CHECK(find_spec(specs, "blk.0.attn_output.weight")->ne == V{128 * 128, 7168});
  CHECK(find_spec(specs, "blk.3.ffn_gate_exps.weight")->ne == V{7168, 2048, 256});
  CHECK(find_spec(specs, "blk.3.ffn_down_exps.weight")->ne == V{2048, 7168, 256});
  CHECK(find_spec(specs, "blk.3.ffn_gate_inp.weight")->ne == V{7168, 256});
  CHECK(find_spec(specs, "blk.3.exp_probs_b.bias")->ne == V{256});
  CHECK(find_spec(specs, "blk.2.ffn_gate.weight")->ne == V{7168, 18432});
  CHECK(find_spec(specs, "blk.2.ffn_gate_exps.weight") == nullptr);  // dense lead block
  const auto glm = latte::detail::expected_tensors(latte::model_preset("glm-5"));
  CHECK(find_spec(glm, "blk.0.indexer.attn_q_b.weight")->ne == V{2048, 32 * 128});
  CHECK(find_spec(glm, "blk.0.indexer.attn_k.weight")->ne == V{6144, 128});
  CHECK(find_spec(glm, "blk.0.indexer.proj.weight")->ne == V{6144, 32});
  CHECK(find_spec(glm, "blk.78.nextn.eh_proj.weight")->mtp);
  const auto lite = latte::detail::expected_tensors(latte::model_preset("deepseek-v2-lite"));
  CHECK(find_spec(lite, "blk.0.attn_q.weight")->ne == V{2048, 16 * 192});
  CHECK(find_spec(lite, "blk.0.attn_q_a.weight") == nullptr);
}

TEST_CASE("random models of every preset flavour load with a clean audit; MTP blocks are skipped") {
  for (std::string_view flavour : latte::test::kTestFlavours) {
    CAPTURE(flavour);
    const latte::Model m = latte::test::shared_random_model(flavour);
    CHECK(m.audit().ok());
    CHECK(m.audit().unexpected.empty());
    const bool has_mtp = m.config().n_nextn_layer > 0;
    CHECK(m.audit().skipped.empty() != has_mtp);
    for (const auto& s : m.audit().skipped)
      CHECK(s.tensor.rfind("blk." + std::to_string(m.config().n_layer_main()), 0) == 0);
  }
}

TEST_CASE("every tensor problem of a file is listed in one error") {
  const latte::ModelConfig c = latte::model_preset("test-v3");
  auto bytes = latte::random_model_bytes(c);
  const auto good = latte::gguf::File::from_bytes(bytes);
  const auto bad = latte::test::GgufRewrite(good)
                       .drop_tensor("blk.0.attn_norm.weight")                            // missing
                       .drop_tensor("blk.1.attn_k_b.weight")                             // incomplete W_UK/W_UV
                       .rename_tensor("blk.2.ffn_norm.weight", "blk.2.ffn_nrom.weight")  // unexpected + missing
                       .add_tensor("blk.0.mystery.weight", {4, 4})                       // unexpected
                       .bytes();
  // And a config whose expert width no longer matches the tensors: every expert tensor mis-shaped.
  auto wrong = latte::test::GgufRewrite(latte::gguf::File::from_bytes(bad))
                   .set_key("deepseek2.expert_feed_forward_length", latte::gguf::Value(uint32_t{64}))
                   .bytes();
  try {
    (void)latte::Model::from_file(latte::gguf::File::from_bytes(wrong, "broken.gguf"));
    FAIL("the broken file loaded");
  } catch (const latte::Error& e) {
    const std::string msg = e.what();
    CAPTURE(msg);
    CHECK(e.code() == latte::ErrorCode::invalid_file);
    CHECK(msg.find("broken.gguf") != std::string::npos);
    CHECK(msg.find("missing: blk.0.attn_norm.weight") != std::string::npos);
    CHECK(msg.find("missing: blk.2.ffn_norm.weight") != std::string::npos);
    CHECK(msg.find("blk.1.attn_k_b.weight + blk.1.attn_v_b.weight or blk.1.attn_kv_b.weight") != std::string::npos);
    CHECK(msg.find("unexpected: blk.2.ffn_nrom.weight") != std::string::npos);
    CHECK(msg.find("unexpected: blk.0.mystery.weight") != std::string::npos);
    for (int il = 1; il <= 2; ++il) {  // MoE blocks: shared and routed expert tensors
      for (const char* t : {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps", "ffn_gate_shexp", "ffn_down_shexp"}) {
        CHECK(msg.find("wrong shape: blk." + std::to_string(il) + "." + t + ".weight") != std::string::npos);
      }
    }
  }
  // The audit as data, for `latte inspect`.
  const auto audit = latte::audit_weights(latte::gguf::File::from_bytes(bad), c);
  CHECK(audit.missing.size() == 3);
  CHECK(audit.unexpected.size() == 2);
  CHECK(audit.wrong_shape.empty());
}

TEST_CASE("split, fused and combined K/V layouts of one seed give the same logits") {
  const latte::ModelConfig c = latte::model_preset("test-v2-lite");
  const auto split = latte::test::random_model(c, {.seed = 11, .kv_b_layout = latte::KvBLayout::split});
  const auto fused = latte::test::random_model(c, {.seed = 11, .kv_b_layout = latte::KvBLayout::fused});
  const auto both = latte::test::random_model(c, {.seed = 11, .kv_b_layout = latte::KvBLayout::both});
  CHECK(fused.file().find("deepseek2.attention.key_length_mla") == nullptr);  // legacy metadata
  const auto tokens = latte::test::fresh_tokens(12, c.n_vocab);
  for (const std::string backend : {"mla", "standard"}) {
    CAPTURE(backend);
    const auto ref = logits_of(split, backend, tokens);
    CHECK(latte::test::relative_error(logits_of(fused, backend, tokens), ref) <= kFp32Tolerance);
    CHECK(latte::test::relative_error(logits_of(both, backend, tokens), ref) <= kFp32Tolerance);
  }
}

TEST_CASE("an attn_kv_b laid out all-K-then-all-V is caught by comparing the backends") {
  // The file carries correct attn_k_b / attn_v_b (read by mla) and an attn_kv_b (read by standard)
  // whose rows hold every head's K rows first, then every head's V rows.
  const latte::ModelConfig c = latte::model_preset("test-v3");
  const size_t N = static_cast<size_t>(c.n_head), L = static_cast<size_t>(c.kv_lora_rank);
  const size_t P = static_cast<size_t>(c.qk_nope_head_dim), V = static_cast<size_t>(c.v_head_dim);
  latte::RandomModelOptions options{.seed = 5, .kv_b_layout = latte::KvBLayout::both};
  options.transform = [&](std::string_view name, std::span<const uint64_t>, std::span<float> values) {
    if (name.find("attn_kv_b") == std::string_view::npos) return;
    std::vector<float> wrong(values.size());
    for (size_t h = 0; h < N; ++h) {
      for (size_t r = 0; r < P + V; ++r) {
        const size_t to = r < P ? h * P + r : N * P + h * V + (r - P);  // all K rows, then all V rows
        std::copy_n(values.data() + (h * (P + V) + r) * L, L, wrong.data() + to * L);
      }
    }
    std::copy(wrong.begin(), wrong.end(), values.begin());
  };
  const auto model = latte::test::random_model(c, options);
  const auto tokens = latte::test::fresh_tokens(10, c.n_vocab);
  const double disagreement =
      latte::test::relative_error(logits_of(model, "mla", tokens), logits_of(model, "standard", tokens));
  CAPTURE(disagreement);
  CHECK(disagreement > 100 * kFp32Tolerance);
}

namespace {

/// A random `preset` model whose tensors take `options.tensor_type`: both backends agree on it to fp32, and on
/// dense blocks only (where the output is a smooth function of the weights; a MoE router can switch experts on
/// a small perturbation) its logits lie between kFp32Tolerance and `max_distance` from the f32 model's.
void check_quantized_model(const char* preset, const latte::RandomModelOptions& options, double max_distance) {
  const latte::ModelConfig moe = latte::model_preset(preset);
  const auto quantized = latte::test::random_model(moe, options);
  const auto tokens = latte::test::fresh_tokens(9, moe.n_vocab);
  CHECK(latte::test::relative_error(logits_of(quantized, "standard", tokens), logits_of(quantized, "mla", tokens)) <=
        kFp32Tolerance);
  latte::ModelConfig dense = moe;
  dense.n_dense_lead = dense.n_layer_main();
  const double quantization =
      latte::test::relative_error(logits_of(latte::test::random_model(dense, options), "mla", tokens),
                                  logits_of(latte::test::random_model(dense, {.seed = options.seed}), "mla", tokens));
  CAPTURE(quantization);
  CHECK(quantization > kFp32Tolerance);  // close, not equal
  CHECK(quantization < max_distance);
}

}  // namespace

TEST_CASE("quantized weights load, both backends agree on them, and Q8_0 stays close to f32") {
  latte::RandomModelOptions q8{.seed = 3};
  q8.tensor_type = [](std::string_view name, std::span<const uint64_t> ne) {
    const bool matrix = ne.size() >= 2 && name != "token_embd.weight";
    return matrix ? latte::GgmlType::q8_0 : (ne.size() >= 2 ? latte::GgmlType::bf16 : latte::GgmlType::f32);
  };
  const auto quantized = latte::test::random_model(latte::model_preset("test-glm-flash"), q8);
  CHECK(quantized.file().find_tensor("blk.0.attn_kv_a_mqa.weight")->type == latte::GgmlType::q8_0);
  CHECK(quantized.file().find_tensor("blk.1.ffn_down_exps.weight")->type == latte::GgmlType::q8_0);
  check_quantized_model("test-glm-flash", q8, 0.05);  // Q8_0 keeps ~8 bits per weight
}

TEST_CASE("IQ4_XS and IQ4_NL weights load, both backends agree on them, and stay near the f32 model") {
  latte::RandomModelOptions iq4{.seed = 5};
  iq4.tensor_type = [](std::string_view name, std::span<const uint64_t> ne) {
    if (ne.size() < 2 || name == "token_embd.weight")
      return ne.size() >= 2 ? latte::GgmlType::bf16 : latte::GgmlType::f32;
    return ne[0] % 256 == 0 ? latte::GgmlType::iq4_xs : latte::GgmlType::iq4_nl;  // attn_k_b rows: 128 values
  };
  const auto quantized = latte::test::random_model(latte::model_preset("test-v2-lite"), iq4);
  CHECK(quantized.file().find_tensor("blk.0.attn_kv_a_mqa.weight")->type == latte::GgmlType::iq4_xs);
  CHECK(quantized.file().find_tensor("blk.0.attn_k_b.weight")->type == latte::GgmlType::iq4_nl);
  check_quantized_model("test-v2-lite", iq4, 0.3);  // ~4.25 bits per weight: 0.18 measured
}

TEST_CASE("merged ffn_gate_up_exps (per expert: F gate rows, then F up rows) equals separate gate and up") {
  const latte::ModelConfig c = latte::model_preset("test-v2-lite");
  auto bytes = latte::random_model_bytes(c, {.seed = 29});
  const auto separate_file = latte::gguf::File::from_bytes(bytes);
  const size_t F = static_cast<size_t>(c.n_ff_expert), H = static_cast<size_t>(c.n_embd);
  const size_t E = static_cast<size_t>(c.n_expert);
  latte::gguf::Writer w;
  c.write_gguf_metadata(w);
  std::vector<const latte::gguf::TensorInfo*> sources;  // for a merged tensor: its gate tensor
  for (const auto& t : separate_file.tensors()) {
    if (t.name.find("ffn_up_exps") != std::string::npos) continue;
    if (t.name.find("ffn_gate_exps") != std::string::npos) {
      std::string merged = t.name;
      merged.replace(merged.find("ffn_gate_exps"), 13, "ffn_gate_up_exps");
      w.add_tensor(merged, latte::GgmlType::f32, {H, 2 * F, E});
    } else {
      w.add_tensor(t.name, t.type, std::span<const uint64_t>(t.ne.data(), t.n_dims));
    }
    sources.push_back(&t);
  }
  auto merged_bytes = w.write_to_memory([&](size_t i, std::span<std::byte> dst) {
    const auto& t = *sources[i];
    const auto src = separate_file.tensor_data(t);
    if (t.name.find("ffn_gate_exps") == std::string::npos) {
      std::memcpy(dst.data(), src.data(), dst.size());
      return;
    }
    std::string up_name = t.name;
    up_name.replace(up_name.find("ffn_gate_exps"), 13, "ffn_up_exps");
    const auto up = separate_file.tensor_data(*separate_file.find_tensor(up_name));
    const size_t expert_bytes = F * H * sizeof(float);
    for (size_t e = 0; e < E; ++e) {
      std::memcpy(dst.data() + 2 * e * expert_bytes, src.data() + e * expert_bytes, expert_bytes);
      std::memcpy(dst.data() + (2 * e + 1) * expert_bytes, up.data() + e * expert_bytes, expert_bytes);
    }
  });
  const latte::Model separate = latte::Model::from_file(latte::gguf::File::from_bytes(bytes));
  const latte::Model merged = latte::Model::from_file(latte::gguf::File::from_bytes(merged_bytes));
  CHECK(merged.file().find_tensor("blk.1.ffn_gate_up_exps.weight") != nullptr);
  const auto tokens = latte::test::fresh_tokens(8, c.n_vocab);
  CHECK(latte::test::relative_error(logits_of(merged, "mla", tokens), logits_of(separate, "mla", tokens)) <=
        kFp32Tolerance);
}
