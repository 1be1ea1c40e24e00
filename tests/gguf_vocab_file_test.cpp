// Reading a real GGUF written by llama.cpp's converter: the DeepSeek LLM vocabulary file. Expected
// values were read from the file with a separate standard-library Python parser of the format.
#include <doctest/doctest.h>

#include "support/test_options.hpp"

#include <latte/gguf.hpp>

#include <cstdint>
#include <numeric>

TEST_CASE("gguf reader reads the DeepSeek LLM vocabulary file written by llama.cpp") {
  const auto f = latte::gguf::File::open(latte::test::data_path("ggml-vocab-deepseek-llm.gguf"));
  CHECK(f.version() == 3);
  CHECK(f.file_size() == 3970167);
  CHECK(f.metadata().size() == 23);
  CHECK(f.tensors().empty());
  CHECK(f.alignment() == 32);

  CHECK(f.metadata()[0].key == "general.architecture");
  CHECK(f.metadata()[22].key == "tokenizer.ggml.add_eos_token");
  CHECK(f.get<std::string>("general.architecture") == "llama");
  CHECK(f.get<std::string>("general.name") == "deepseek-llm");
  CHECK(f.get<uint32_t>("llama.block_count") == 30);
  CHECK(f.get<uint32_t>("llama.vocab_size") == 102400);
  CHECK(f.get<float>("llama.rope.freq_base") == 10000.0f);
  CHECK(f.get<float>("llama.attention.layer_norm_rms_epsilon") == 1e-6f);
  CHECK(f.get<std::string>("tokenizer.ggml.model") == "gpt2");
  CHECK(f.get<std::string>("tokenizer.ggml.pre") == "deepseek-llm");
  CHECK(f.get<uint32_t>("tokenizer.ggml.bos_token_id") == 100000);
  CHECK(f.get<uint32_t>("tokenizer.ggml.eos_token_id") == 100001);
  CHECK(f.get<bool>("tokenizer.ggml.add_bos_token") == true);
  CHECK(f.get<bool>("tokenizer.ggml.add_eos_token") == false);

  const auto& tokens = f.get_strings("tokenizer.ggml.tokens");
  REQUIRE(tokens.size() == 102400);
  CHECK(&tokens == &f.get_strings("tokenizer.ggml.tokens"));  // a reference, not a copy
  CHECK(tokens[0] == "!");
  CHECK(tokens[1] == "\"");
  CHECK(tokens[100] == "\xc2\xa7");
  CHECK(tokens[1000] == "ty");
  CHECK(tokens[50000] ==
        "\xc4\xa0"
        "Acer");
  CHECK(tokens[100000] ==
        "<\xef\xbd\x9c"
        "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>");
  CHECK(tokens[100001] ==
        "<\xef\xbd\x9c"
        "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>");
  CHECK(tokens[102399] == "[PAD102399]");
  const size_t token_bytes =
      std::accumulate(tokens.begin(), tokens.end(), size_t{0}, [](size_t n, const auto& t) { return n + t.size(); });
  CHECK(token_bytes == 934635);

  const auto types = f.get_array<int32_t>("tokenizer.ggml.token_type");
  REQUIRE(types.size() == 102400);
  CHECK(std::count(types.begin(), types.end(), 1) == 100000);
  CHECK(std::count(types.begin(), types.end(), 3) == 2);
  CHECK(std::count(types.begin(), types.end(), 4) == 2398);
  CHECK(types[100000] == 3);
  CHECK(types[102399] == 4);

  const auto& merges = f.get_strings("tokenizer.ggml.merges");
  REQUIRE(merges.size() == 99757);
  CHECK(merges[0] == "\xc4\xa0 \xc4\xa0");
  CHECK(merges[1] == "\xc4\xa0 t");
  CHECK(merges[5000] == "F I");
  CHECK(merges[99756] == "\xc3\xa7\xc2\xb2\xc4\xba \xc3\xa8\xc4\xa8\xc4\xbe");
  const size_t merge_bytes =
      std::accumulate(merges.begin(), merges.end(), size_t{0}, [](size_t n, const auto& m) { return n + m.size(); });
  CHECK(merge_bytes == 1007683);
}
