#include "support/hf_checkpoint.hpp"

#include "support/safetensors_writer.hpp"
#include "support/temp_dir.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>

namespace latte::test {
namespace {

// Rounds to what `dtype` stores, independently of the library's conversions.
float round_to(const std::string& dtype, float v) {
  if (dtype == "BF16") return std::bit_cast<float>(static_cast<uint32_t>(to_bf16_bits(v)) << 16);
  if (dtype == "F16") {
    const uint16_t h = to_f16_bits(v);
    const int e = (h >> 10) & 31, m = h & 1023;
    const double mag = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
    return static_cast<float>((h & 0x8000) ? -mag : mag);
  }
  return v;
}

// Largest E4M3 value not above |v| / scale, as an encoded byte, with the value it decodes to.
std::pair<uint8_t, float> to_e4m3(float v) {
  uint8_t best = 0;
  float best_value = 0.0f;
  for (int bits = 0; bits < 128; ++bits) {
    if (bits == 0x7F) continue;  // NaN
    const int e = (bits >> 3) & 15, m = bits & 7;
    const float mag = static_cast<float>(e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10));
    if (std::fabs(mag - std::fabs(v)) < std::fabs(best_value - std::fabs(v))) {
      best = static_cast<uint8_t>(bits);
      best_value = mag;
    }
  }
  if (v < 0) return {static_cast<uint8_t>(best | 0x80), -best_value};
  return {best, best_value};
}

struct Builder {
  const TinyHfSpec& spec;
  std::mt19937& rng;
  std::map<std::string, HfTensor> tensors;
  std::vector<std::pair<std::string, std::string>> order;                               // name, "plain" / "fp8"
  std::map<std::string, std::pair<std::vector<uint64_t>, std::vector<std::byte>>> raw;  // fp8 bytes
  // Streaming mode (benchmarks): BF16 values straight into this writer, nothing kept.
  SafetensorsWriter* stream = nullptr;
  uint64_t stream_state = 0x9E3779B97F4A7C15ull;

  // Uniform values of standard deviation `scale` from a xorshift64* stream, as BF16 bytes.
  void stream_bf16(const std::string& name, std::vector<uint64_t> shape, float scale, float offset) {
    uint64_t n = 1;
    for (auto d : shape) n *= d;
    std::vector<std::byte> bytes(2 * n);
    const float a = scale * 1.7320508f;  // uniform [-a, a) has standard deviation a / sqrt(3)
    for (uint64_t i = 0; i < n; ++i) {
      stream_state ^= stream_state >> 12;
      stream_state ^= stream_state << 25;
      stream_state ^= stream_state >> 27;
      const uint64_t r = stream_state * 0x2545F4914F6CDD1Dull;
      const float u = static_cast<float>(r >> 40) * 0x1.0p-24f;  // [0, 1)
      const uint16_t bits = to_bf16_bits(offset + a * (2.0f * u - 1.0f));
      bytes[2 * i] = static_cast<std::byte>(bits & 0xFF);
      bytes[2 * i + 1] = static_cast<std::byte>(bits >> 8);
    }
    stream->add_raw(name, "BF16", std::move(shape), std::move(bytes));
  }

  void add(const std::string& name, std::vector<uint64_t> shape, float scale, bool fp8_allowed = true) {
    if (stream) return stream_bf16(name, std::move(shape), scale, 0.0f);
    uint64_t n = 1;
    for (auto d : shape) n *= d;
    std::normal_distribution<float> dist(0.0f, scale);
    HfTensor t{shape, std::vector<float>(n)};
    const bool as_fp8 = spec.fp8 && fp8_allowed && shape.size() == 2;
    if (as_fp8) {
      // Block scales in [0.5, 2); each value is an exact E4M3 value times its block's scale.
      const uint64_t rows = shape[0], cols = shape[1], b = static_cast<uint64_t>(spec.fp8_block);
      const uint64_t srows = (rows + b - 1) / b, scols = (cols + b - 1) / b;
      std::uniform_real_distribution<float> sdist(0.5f, 2.0f);
      std::vector<float> scales(srows * scols);
      for (auto& s : scales) s = sdist(rng);
      std::vector<std::byte> bytes(n);
      for (uint64_t r = 0; r < rows; ++r) {
        for (uint64_t c = 0; c < cols; ++c) {
          const float s = scales[(r / b) * scols + c / b];
          const auto [bits, q] = to_e4m3(dist(rng) * 16.0f);
          bytes[r * cols + c] = static_cast<std::byte>(bits);
          t.values[r * cols + c] = q * s;
        }
      }
      raw[name] = {shape, std::move(bytes)};
      tensors[name + "_scale_inv"] = HfTensor{{srows, scols}, scales};
      order.emplace_back(name, "fp8");
      order.emplace_back(name + "_scale_inv", "scale");
    } else {
      for (auto& v : t.values) v = round_to(spec.dtype, dist(rng));
      order.emplace_back(name, "plain");
    }
    tensors[name] = std::move(t);
  }

  void add_norm(const std::string& name, uint64_t n) {
    if (stream) return stream_bf16(name, {n}, 0.25f, 1.0f);
    std::uniform_real_distribution<float> dist(0.5f, 1.5f);
    HfTensor t{{n}, std::vector<float>(n)};
    for (auto& v : t.values) v = round_to(spec.dtype, dist(rng));
    tensors[name] = std::move(t);
    order.emplace_back(name, "plain");
  }

  void add_block(int il) {
    const auto H = static_cast<uint64_t>(spec.hidden), N = static_cast<uint64_t>(spec.heads);
    const auto Lq = static_cast<uint64_t>(spec.q_lora), L = static_cast<uint64_t>(spec.kv_lora);
    const auto P = static_cast<uint64_t>(spec.nope), R = static_cast<uint64_t>(spec.rope);
    const auto V = static_cast<uint64_t>(spec.v_head);
    const std::string p = "model.layers." + std::to_string(il) + ".";
    const float w = 1.0f / std::sqrt(static_cast<float>(H));
    add_norm(p + "input_layernorm.weight", H);
    if (Lq) {
      add(p + "self_attn.q_a_proj.weight", {Lq, H}, w);
      add_norm(p + "self_attn.q_a_layernorm.weight", Lq);
      add(p + "self_attn.q_b_proj.weight", {N * (P + R), Lq}, w);
    } else {
      add(p + "self_attn.q_proj.weight", {N * (P + R), H}, w);
    }
    add(p + "self_attn.kv_a_proj_with_mqa.weight", {L + R, H}, w);
    add_norm(p + "self_attn.kv_a_layernorm.weight", L);
    add(p + "self_attn.kv_b_proj.weight", {N * (P + V), L}, w);
    add(p + "self_attn.o_proj.weight", {H, N * V}, w);
    if (spec.indexer) {
      const auto Ih = static_cast<uint64_t>(spec.index_heads), Id = static_cast<uint64_t>(spec.index_dim);
      add(p + "self_attn.indexer.wq_b.weight", {Ih * Id, Lq}, w);
      add(p + "self_attn.indexer.wk.weight", {Id, H}, w);
      add_norm(p + "self_attn.indexer.k_norm.weight", Id);
      add(p + "self_attn.indexer.k_norm.bias", {Id}, 0.1f, false);
      add(p + "self_attn.indexer.weights_proj.weight", {Ih, H}, w, false);
    }
    add_norm(p + "post_attention_layernorm.weight", H);
    if (il < spec.dense_lead) {
      const auto F = static_cast<uint64_t>(spec.ff);
      add(p + "mlp.gate_proj.weight", {F, H}, w);
      add(p + "mlp.up_proj.weight", {F, H}, w);
      add(p + "mlp.down_proj.weight", {H, F}, w);
    } else {
      const auto E = static_cast<uint64_t>(spec.n_expert), Fe = static_cast<uint64_t>(spec.ff_expert);
      add(p + "mlp.gate.weight", {E, H}, w, false);
      if (spec.e_score_bias) add(p + "mlp.gate.e_score_correction_bias", {E}, 0.1f, false);
      for (uint64_t e = 0; e < E; ++e) {
        const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
        add(x + "gate_proj.weight", {Fe, H}, w);
        add(x + "up_proj.weight", {Fe, H}, w);
        add(x + "down_proj.weight", {H, Fe}, w);
      }
      if (spec.n_shared) {
        const uint64_t Fs = Fe * static_cast<uint64_t>(spec.n_shared);
        add(p + "mlp.shared_experts.gate_proj.weight", {Fs, H}, w);
        add(p + "mlp.shared_experts.up_proj.weight", {Fs, H}, w);
        add(p + "mlp.shared_experts.down_proj.weight", {H, Fs}, w);
      }
    }
    if (il >= spec.layers) {  // MTP block extras
      add(p + "eh_proj.weight", {H, 2 * H}, w);
      add_norm(p + "enorm.weight", H);
      add_norm(p + "hnorm.weight", H);
      add(p + "embed_tokens.weight", {static_cast<uint64_t>(spec.vocab), H}, 1.0f, false);
      add(p + "shared_head.head.weight", {static_cast<uint64_t>(spec.vocab), H}, w, false);
      add_norm(p + "shared_head.norm.weight", H);
    }
  }
};

}  // namespace

std::string tiny_hf_config_json(const TinyHfSpec& s) {
  std::ostringstream j;
  j << "{\n  \"architectures\": [\"" << s.architecture << "\"],\n";
  j << "  \"vocab_size\": " << s.vocab << ", \"hidden_size\": " << s.hidden << ", \"num_hidden_layers\": " << s.layers
    << ",\n  \"intermediate_size\": " << s.ff << ", \"moe_intermediate_size\": " << s.ff_expert
    << ", \"n_routed_experts\": " << s.n_expert << ", \"n_shared_experts\": " << s.n_shared
    << ", \"num_experts_per_tok\": " << s.n_expert_used << ",\n  \"n_group\": " << s.n_group
    << ", \"topk_group\": " << s.topk_group << ", \"routed_scaling_factor\": 2.5, \"norm_topk_prob\": true,"
    << " \"first_k_dense_replace\": " << s.dense_lead << ", \"moe_layer_freq\": 1,\n";
  if (!s.scoring_func.empty())
    j << "  \"scoring_func\": \"" << s.scoring_func << "\", \"topk_method\": \"noaux_tc\",\n";
  j << "  \"num_attention_heads\": " << s.heads << ", \"num_key_value_heads\": " << s.heads << ", \"q_lora_rank\": ";
  if (s.q_lora)
    j << s.q_lora;
  else
    j << "null";
  j << ", \"kv_lora_rank\": " << s.kv_lora << ", \"qk_nope_head_dim\": " << s.nope
    << ", \"qk_rope_head_dim\": " << s.rope << ", \"v_head_dim\": " << s.v_head << ",\n";
  j << "  \"rms_norm_eps\": 1e-06, \"rope_theta\": 10000, \"max_position_embeddings\": 4096,\n";
  if (s.yarn) {
    j << "  \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 40, \"original_max_position_embeddings\": 128,"
      << " \"beta_fast\": 32, \"beta_slow\": 1, \"mscale\": 0.707, \"mscale_all_dim\": 0.707},\n";
  } else {
    j << "  \"rope_scaling\": null,\n";
  }
  if (s.indexer) {
    j << "  \"index_n_heads\": " << s.index_heads << ", \"index_head_dim\": " << s.index_dim
      << ", \"index_topk\": " << s.index_topk << ",\n";
  }
  if (s.fp8) {
    j << "  \"quantization_config\": {\"activation_scheme\": \"dynamic\", \"fmt\": \"e4m3\", \"quant_method\": \"fp8\","
      << " \"weight_block_size\": [" << s.fp8_block << ", " << s.fp8_block << "]},\n";
  }
  j << "  \"num_nextn_predict_layers\": " << s.nextn << ",\n";
  j << "  \"tie_word_embeddings\": " << (s.tie_embeddings ? "true" : "false") << ",\n";
  j << "  \"torch_dtype\": \"bfloat16\"\n}\n";
  return j.str();
}

void write_synthetic_hf_checkpoint(const std::string& folder, const TinyHfSpec& spec, uint64_t seed) {
  std::mt19937 unused_rng(0);
  Builder b{spec, unused_rng, {}, {}, {}};
  b.stream_state ^= seed * 0xD1B54A32D192ED03ull;
  const auto H = static_cast<uint64_t>(spec.hidden), Vocab = static_cast<uint64_t>(spec.vocab);
  const int n_shards = spec.layers + spec.nextn + 1;
  auto shard_path = [&](int k) {
    char text[64];
    std::snprintf(text, sizeof text, "/model-%05d-of-%05d.safetensors", k + 1, n_shards);
    return folder + text;
  };
  {
    SafetensorsWriter w;
    b.stream = &w;
    b.add("model.embed_tokens.weight", {Vocab, H}, 1.0f, false);
    b.add_norm("model.norm.weight", H);
    if (!spec.tie_embeddings) b.add("lm_head.weight", {Vocab, H}, 1.0f / std::sqrt(static_cast<float>(H)), false);
    w.write(shard_path(0));
  }
  for (int il = 0; il < spec.layers + spec.nextn; ++il) {
    SafetensorsWriter w;
    b.stream = &w;
    b.add_block(il);
    w.write(shard_path(il + 1));
  }
  write_text_file(folder + "/config.json", tiny_hf_config_json(spec));
}

void write_tiny_hf_tokenizer(const std::string& folder) {
  // Ids 0-1 special, 2-27 single letters, 28-30 merges.
  std::string vocab = "{";
  for (int i = 0; i < 26; ++i)
    vocab += std::string(i ? "," : "") + "\"" + static_cast<char>('a' + i) + "\":" + std::to_string(2 + i);
  vocab += ",\"ab\":28,\"abc\":29,\"de\":30}";
  write_text_file(
      folder + "/tokenizer.json",
      "{\"version\":\"1.0\",\"added_tokens\":["
      "{\"id\":0,\"content\":\"<s>\",\"special\":true},{\"id\":1,\"content\":\"</s>\",\"special\":true}],"
      "\"normalizer\":null,"
      "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true},"
      "\"model\":{\"type\":\"BPE\",\"vocab\":" +
          vocab + ",\"merges\":[\"a b\",\"ab c\",\"d e\"]}}");
  write_text_file(folder + "/tokenizer_config.json",
                  "{\"add_bos_token\":true,\"add_eos_token\":false,\"bos_token\":\"<s>\",\"eos_token\":\"</s>\","
                  "\"chat_template\":\"{% for m in messages %}{{ m['content'] }}{% endfor %}\"}");
}

std::map<std::string, HfTensor> write_tiny_hf_checkpoint(const std::string& folder, const TinyHfSpec& spec,
                                                         std::mt19937& rng) {
  Builder b{spec, rng, {}, {}, {}};
  const auto H = static_cast<uint64_t>(spec.hidden), Vocab = static_cast<uint64_t>(spec.vocab);
  b.add("model.embed_tokens.weight", {Vocab, H}, 1.0f, false);
  for (int il = 0; il < spec.layers + spec.nextn; ++il) b.add_block(il);
  b.add_norm("model.norm.weight", H);
  if (!spec.tie_embeddings) b.add("lm_head.weight", {Vocab, H}, 1.0f / std::sqrt(static_cast<float>(H)), false);

  // Distribute over shards round-robin by tensor (a weight stays with its scale).
  const int n_shards = std::max(1, spec.shards);
  std::vector<SafetensorsWriter> writers(static_cast<size_t>(n_shards));
  std::vector<std::pair<std::string, int>> placement;
  int shard = 0;
  for (const auto& [name, kind] : b.order) {
    if (kind != "scale") shard = (shard + 1) % n_shards;
    auto& w = writers[static_cast<size_t>(shard)];
    placement.emplace_back(name, shard);
    const HfTensor& t = b.tensors.at(name);
    if (kind == "fp8") {
      const auto& [shape, bytes] = b.raw.at(name);
      w.add_raw(name, "F8_E4M3", shape, bytes);
    } else if (kind == "scale" || spec.dtype == "F32") {
      w.add_f32(name, t.shape, t.values);
    } else if (spec.dtype == "BF16") {
      w.add_bf16(name, t.shape, t.values);
    } else {
      w.add_f16(name, t.shape, t.values);
    }
  }
  auto shard_name = [&](int k) {
    if (n_shards == 1) return std::string("model.safetensors");
    char text[64];
    std::snprintf(text, sizeof text, "model-%05d-of-%05d.safetensors", k + 1, n_shards);
    return std::string(text);
  };
  for (int k = 0; k < n_shards; ++k) writers[static_cast<size_t>(k)].write(folder + "/" + shard_name(k));
  if (n_shards > 1) {
    std::string index = "{\"metadata\": {}, \"weight_map\": {";
    for (size_t i = 0; i < placement.size(); ++i) {
      index += (i ? ", \"" : "\"") + placement[i].first + "\": \"" + shard_name(placement[i].second) + "\"";
    }
    write_text_file(folder + "/model.safetensors.index.json", index + "}}");
  }
  write_text_file(folder + "/config.json", tiny_hf_config_json(spec));
  for (auto it = b.tensors.begin(); it != b.tensors.end();) {
    it = it->first.ends_with("_scale_inv") ? b.tensors.erase(it) : std::next(it);
  }
  return std::move(b.tensors);
}

}  // namespace latte::test
