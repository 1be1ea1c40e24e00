// The --type rule: per-tensor element types pinned against docs/convert.md (llama.cpp's converter and
// llama_tensor_get_type). Expected types are worked out by hand from the documented rule.
#include "convert/type_mix.hpp"

#include <latte/error.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace {

using latte::GgmlType;
using latte::convert::TypeMix;

struct Case {
  const char* name;
  std::vector<uint64_t> ne;
  GgmlType want;
};

void check_cases(TypeMix mix, latte::convert::TypeMixContext context, const std::vector<Case>& cases) {
  for (const auto& c : cases) {
    CAPTURE(c.name);
    CHECK(latte::type_name(latte::convert::choose_tensor_type(mix, c.name, c.ne, context)) == latte::type_name(c.want));
  }
}

}  // namespace

TEST_CASE("q4_k_m mix on DeepSeek-V2-Lite shapes gives ffn_down layers 0-2, 5, 8, ..., 20, 23-26 Q6_K") {
  // 27 layers: n/8 = 3, 7n/8 = 23, so layers < 3, >= 23 and those with (i - 3) % 3 == 2 get more bits.
  const latte::convert::TypeMixContext v2_lite{.n_layer = 27, .n_expert = 64};
  check_cases(TypeMix::q4_k_m, v2_lite,
              {
                  {"token_embd.weight", {2048, 102400}, GgmlType::q4_k},
                  {"output.weight", {2048, 102400}, GgmlType::q6_k},
                  {"output_norm.weight", {2048}, GgmlType::f32},
                  {"blk.0.attn_norm.weight", {2048}, GgmlType::f32},
                  {"blk.0.attn_q.weight", {2048, 3072}, GgmlType::q4_k},
                  {"blk.0.attn_kv_a_mqa.weight", {2048, 576}, GgmlType::q4_k},
                  {"blk.0.attn_kv_a_norm.weight", {512}, GgmlType::f32},
                  {"blk.0.attn_k_b.weight", {128, 512, 16}, GgmlType::q5_0},  // 128 columns: Q4_K -> Q5_0
                  {"blk.0.attn_v_b.weight", {512, 128, 16}, GgmlType::q4_k},
                  {"blk.0.attn_output.weight", {2048, 2048}, GgmlType::q4_k},
                  {"blk.0.ffn_down.weight", {10944, 2048}, GgmlType::q8_0},  // Q6_K, 10944 % 256 != 0
                  {"blk.0.ffn_gate.weight", {2048, 10944}, GgmlType::q4_k},
                  {"blk.4.ffn_down_exps.weight", {1408, 2048, 64}, GgmlType::q5_0},  // Q4_K, 1408 % 256 != 0
                  {"blk.5.ffn_down_exps.weight", {1408, 2048, 64}, GgmlType::q8_0},  // Q6_K, 1408 % 256 != 0
                  {"blk.5.ffn_gate_exps.weight", {2048, 1408, 64}, GgmlType::q4_k},
                  {"blk.5.ffn_up_exps.weight", {2048, 1408, 64}, GgmlType::q4_k},
                  {"blk.5.ffn_gate_inp.weight", {2048, 64}, GgmlType::f32},
                  {"blk.12.ffn_down_shexp.weight", {2816, 2048}, GgmlType::q4_k},
                  {"blk.20.ffn_down_shexp.weight", {2816, 2048}, GgmlType::q6_k},
                  {"blk.22.ffn_down_shexp.weight", {2816, 2048}, GgmlType::q4_k},
                  {"blk.23.ffn_down_shexp.weight", {2816, 2048}, GgmlType::q6_k},
                  {"blk.26.ffn_down_shexp.weight", {2816, 2048}, GgmlType::q6_k},
              });
}

TEST_CASE("q4_k_m mix on DeepSeek-V3 and GLM-5 shapes") {
  // 61 layers: n/8 = 7, 7n/8 = 53.
  const latte::convert::TypeMixContext v3{.n_layer = 61, .n_expert = 256};
  check_cases(TypeMix::q4_k_m, v3,
              {
                  {"blk.0.ffn_down.weight", {18432, 7168}, GgmlType::q6_k},
                  {"blk.3.attn_q_a.weight", {7168, 1536}, GgmlType::q4_k},
                  {"blk.3.attn_q_a_norm.weight", {1536}, GgmlType::f32},
                  {"blk.3.attn_q_b.weight", {1536, 24576}, GgmlType::q4_k},
                  {"blk.3.attn_k_b.weight", {128, 512, 128}, GgmlType::q5_0},
                  {"blk.3.exp_probs_b.bias", {256}, GgmlType::f32},
                  {"blk.7.ffn_down_exps.weight", {2048, 7168, 256}, GgmlType::q4_k},
                  {"blk.9.ffn_down_exps.weight", {2048, 7168, 256}, GgmlType::q6_k},
                  {"blk.10.ffn_down_exps.weight", {2048, 7168, 256}, GgmlType::q4_k},
                  {"blk.51.ffn_down_exps.weight", {2048, 7168, 256}, GgmlType::q6_k},
                  {"blk.52.ffn_down_exps.weight", {2048, 7168, 256}, GgmlType::q4_k},
                  {"blk.53.ffn_down_exps.weight", {2048, 7168, 256}, GgmlType::q6_k},
                  {"blk.60.ffn_down_exps.weight", {2048, 7168, 256}, GgmlType::q6_k},
              });
  const latte::convert::TypeMixContext glm5{.n_layer = 79, .n_expert = 256};
  check_cases(TypeMix::q4_k_m, glm5,
              {
                  {"blk.3.indexer.proj.weight", {6144, 32}, GgmlType::f32},
                  {"blk.3.indexer.k_norm.weight", {128}, GgmlType::f32},
                  {"blk.3.indexer.k_norm.bias", {128}, GgmlType::f32},
                  {"blk.3.indexer.attn_k.weight", {6144, 128}, GgmlType::q4_k},
                  {"blk.3.indexer.attn_q_b.weight", {2048, 4096}, GgmlType::q4_k},
                  {"blk.3.attn_k_b.weight", {192, 512, 64}, GgmlType::q5_0},
                  {"blk.78.nextn.eh_proj.weight", {12288, 6144}, GgmlType::q4_k},
                  {"blk.78.nextn.enorm.weight", {6144}, GgmlType::f32},
              });
}

TEST_CASE("q5_k_m, pure K and IQ4, q8_0 and float mixes") {
  const latte::convert::TypeMixContext v2_lite{.n_layer = 27, .n_expert = 64};
  check_cases(TypeMix::q5_k_m, v2_lite,
              {
                  {"token_embd.weight", {2048, 102400}, GgmlType::q5_k},
                  {"output.weight", {2048, 102400}, GgmlType::q6_k},
                  {"blk.4.ffn_down_exps.weight", {1408, 2048, 64}, GgmlType::q5_1},  // Q5_K -> Q5_1
                  {"blk.2.ffn_down_shexp.weight", {2816, 2048}, GgmlType::q6_k},
              });
  check_cases(TypeMix::q4_k, v2_lite,
              {
                  {"output.weight", {2048, 102400}, GgmlType::q4_k},
                  {"blk.2.ffn_down_shexp.weight", {2816, 2048}, GgmlType::q4_k},
                  {"blk.0.attn_k_b.weight", {128, 512, 16}, GgmlType::q5_0},
                  {"blk.0.attn_norm.weight", {2048}, GgmlType::f32},
              });
  check_cases(TypeMix::q6_k, v2_lite, {{"blk.0.attn_k_b.weight", {128, 512, 16}, GgmlType::q8_0}});
  check_cases(TypeMix::q8_0, v2_lite,
              {
                  {"token_embd.weight", {2048, 102400}, GgmlType::q8_0},
                  {"blk.0.attn_k_b.weight", {128, 512, 16}, GgmlType::q8_0},
                  {"blk.0.attn_k_b.weight", {40, 512, 16}, GgmlType::f16},  // 40 % 32 != 0
                  {"blk.5.ffn_gate_inp.weight", {2048, 64}, GgmlType::f32},
              });
  check_cases(TypeMix::bf16, v2_lite,
              {
                  {"token_embd.weight", {2048, 102400}, GgmlType::bf16},
                  {"blk.0.attn_norm.weight", {2048}, GgmlType::f32},
                  {"blk.3.exp_probs_b.bias", {64}, GgmlType::f32},
              });
  check_cases(TypeMix::f32, v2_lite, {{"output.weight", {2048, 102400}, GgmlType::f32}});
  check_cases(TypeMix::iq4_xs, v2_lite,
              {
                  {"output.weight", {2048, 102400}, GgmlType::iq4_xs},
                  {"blk.4.ffn_down_exps.weight", {1408, 2048, 64}, GgmlType::iq4_nl},  // IQ4_XS -> IQ4_NL
                  {"blk.0.attn_k_b.weight", {40, 512, 16}, GgmlType::f16},             // 40 % 32 != 0
                  {"blk.0.attn_norm.weight", {2048}, GgmlType::f32},
              });
  check_cases(TypeMix::iq4_nl, v2_lite, {{"blk.0.attn_k_b.weight", {128, 512, 16}, GgmlType::iq4_nl}});
}

TEST_CASE("q4_k_m mix follows llama.cpp's 8-expert special cases") {
  const latte::convert::TypeMixContext eight{.n_layer = 4, .n_expert = 8};
  check_cases(TypeMix::q4_k_m, eight,
              {
                  {"blk.1.attn_output.weight", {512, 256}, GgmlType::q5_k},
                  {"blk.1.attn_kv_b.weight", {512, 512}, GgmlType::q8_0},
              });
  const latte::convert::TypeMixContext many{.n_layer = 16, .n_expert = 64};
  check_cases(TypeMix::q4_k_m, many,
              {
                  {"blk.1.attn_output.weight", {512, 256}, GgmlType::q4_k},
                  {"blk.1.attn_kv_b.weight", {512, 512}, GgmlType::q6_k},
                  {"blk.3.attn_kv_b.weight", {512, 512}, GgmlType::q4_k},
              });
}

TEST_CASE("type mix names parse, print and map to llama.cpp file types") {
  CHECK(latte::convert::parse_type_mix("Q4_K_M") == TypeMix::q4_k_m);
  CHECK(latte::convert::type_mix_name(TypeMix::q5_k_m) == "q5_k_m");
  CHECK(latte::convert::llama_file_type(TypeMix::q4_k_m) == 15);
  CHECK(latte::convert::llama_file_type(TypeMix::bf16) == 32);
  CHECK(latte::convert::llama_file_type(TypeMix::q8_0) == 7);
  CHECK(latte::convert::llama_file_type(TypeMix::iq4_nl) == 25);
  CHECK(latte::convert::llama_file_type(TypeMix::iq4_xs) == 30);
  CHECK(latte::convert::parse_type_mix("IQ4_XS") == TypeMix::iq4_xs);
  CHECK_THROWS_AS(latte::convert::parse_type_mix("q3_k"), latte::Error);
  const std::vector<uint64_t> ne{1408, 2048, 64};
  CHECK_THROWS_AS(latte::convert::choose_tensor_type(TypeMix::q4_k_m, "ffn_down_exps.weight", ne, {.n_layer = 27}),
                  latte::Error);
  CHECK_THROWS_AS(latte::convert::choose_tensor_type(TypeMix::q4_k_m, "blk.27.ffn_down.weight", ne, {.n_layer = 27}),
                  latte::Error);
}
