// Tiny Hugging Face checkpoints for converter tests: config.json plus safetensors shards with random
// weights for a small DeepSeek-V2/V3, GLM-4.7-Flash or GLM-5 shaped model. The weights are returned
// too (as fp32, after any rounding to the stored dtype), so tests can check what the converter wrote.
//
//   latte::test::TinyHfSpec spec;  spec.architecture = "DeepseekV3ForCausalLM";
//   auto ckpt = latte::test::write_tiny_hf_checkpoint(dir.path(), spec, rng);
#pragma once

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace latte::test {

/// Shape and storage of a tiny checkpoint. Defaults: a DeepSeek-V3-like model.
struct TinyHfSpec {
  std::string architecture = "DeepseekV3ForCausalLM";
  int vocab = 96, hidden = 64, layers = 3, dense_lead = 1;
  int ff = 96, ff_expert = 32, n_expert = 4, n_expert_used = 2, n_shared = 1;
  int n_group = 2, topk_group = 1;
  int heads = 2, q_lora = 48, kv_lora = 32, nope = 16, rope = 8, v_head = 24;  // q_lora 0: no q compression
  int nextn = 0;             ///< MTP blocks stored after the trunk (num_nextn_predict_layers)
  bool e_score_bias = true;  ///< mlp.gate.e_score_correction_bias
  bool indexer = false;      ///< GLM-5 DSA indexer tensors in every block
  int index_heads = 4, index_dim = 16, index_topk = 8;
  std::string scoring_func = "sigmoid";  ///< "" to leave it out
  bool yarn = true;                      ///< rope_scaling yarn with mscale_all_dim 0.707
  std::string dtype = "F32";             ///< "F32", "BF16" or "F16" for every tensor
  bool fp8 = false;                      ///< 2-D projection weights stored F8_E4M3 with weight_scale_inv
  int fp8_block = 16;                    ///< weight_block_size [fp8_block, fp8_block]
  int shards = 1;                        ///< > 1: model-0000k-of-0000n.safetensors + index json
  bool tie_embeddings = false;           ///< leave out lm_head.weight and set tie_word_embeddings
};

/// One checkpoint tensor: torch shape (outermost first) and its values as the file stores them.
struct HfTensor {
  std::vector<uint64_t> shape;
  std::vector<float> values;  ///< exactly representable in the stored dtype (fp8: dequantized)
};

/// Writes config.json and the safetensors files into `folder`; returns every weight by HF name
/// (fp8 weights: their dequantized values; the *_scale_inv tensors are not listed).
std::map<std::string, HfTensor> write_tiny_hf_checkpoint(const std::string& folder, const TinyHfSpec& spec,
                                                         std::mt19937& rng);

/// Writes a checkpoint of any size for speed measurements: BF16 values (uniform, fast to generate)
/// streamed one block per shard, nothing kept in memory. spec.dtype and spec.fp8 are ignored.
void write_synthetic_hf_checkpoint(const std::string& folder, const TinyHfSpec& spec, uint64_t seed);

/// Writes a small byte-level BPE tokenizer.json (GPT-2 pre-tokenizer, 2 special tokens, a few
/// merges) and tokenizer_config.json (add_bos_token true, a chat template) into `folder`.
void write_tiny_hf_tokenizer(const std::string& folder);

/// The config.json text for `spec`.
std::string tiny_hf_config_json(const TinyHfSpec& spec);

}  // namespace latte::test
