// Writes the fuzzers' seed corpora with latte's own writers: GGUF files from gguf::Writer and the
// random-model writer (in tiny configurations of both architectures), safetensors files from the test
// writer, tokenizer inputs (texts, and id sequences the tokenizer produced), chat templates with
// conversations from tests/data/chat_templates, and session states from Session::save_state.
//
//   make_fuzz_seeds OUT_DIR  -> OUT_DIR/{gguf,model_config,tokenizer,chat_template,safetensors,session_state}/
#include "fuzz/fuzz_models.hpp"
#include "support/safetensors_writer.hpp"

#include <latte/chat.hpp>
#include <latte/gguf.hpp>
#include <latte/model.hpp>
#include <latte/session.hpp>
#include <latte/tokenizer.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

void write_seed(const fs::path& dir, const std::string& name, std::span<const std::byte> bytes) {
  fs::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + (dir / name).string());
}

void write_seed(const fs::path& dir, const std::string& name, std::string_view text) {
  write_seed(dir, name, std::as_bytes(std::span(text.data(), text.size())));
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Small tensors of several element types with metadata of every value type.
void gguf_seeds(const fs::path& dir) {
  using latte::GgmlType;
  for (uint32_t alignment : {32u, 64u}) {
    latte::gguf::Writer w;
    w.set_alignment(alignment);
    w.set("general.architecture", std::string("deepseek2"));
    w.set("general.name", std::string("seed"));
    w.set("k.u8", uint8_t{7});
    w.set("k.i8", int8_t{-7});
    w.set("k.u16", uint16_t{700});
    w.set("k.i16", int16_t{-700});
    w.set("k.u32", uint32_t{70000});
    w.set("k.i32", int32_t{-70000});
    w.set("k.u64", uint64_t{1} << 40);
    w.set("k.i64", int64_t{-1} << 40);
    w.set("k.f32", 0.5f);
    w.set("k.f64", 0.25);
    w.set("k.bool", true);
    w.set("tokenizer.ggml.tokens", latte::gguf::Array(std::vector<std::string>{"a", "b", "ab", "<s>"}));
    w.set("tokenizer.ggml.scores", latte::gguf::Array(std::vector<float>{0.f, -1.f, -2.f, -3.f}));
    w.set("tokenizer.ggml.token_type", latte::gguf::Array(std::vector<int32_t>{1, 1, 1, 3}));
    w.set("k.bools", latte::gguf::Array(std::vector<bool>{true, false, true}));
    w.add_tensor("t.f32", GgmlType::f32, {4, 3});
    w.add_tensor("t.f16", GgmlType::f16, {8});
    w.add_tensor("t.q8_0", GgmlType::q8_0, {32, 2});
    w.add_tensor("t.q4_k", GgmlType::q4_k, {256});
    const auto bytes = w.write_to_memory([](size_t index, std::span<std::byte> dst) {
      for (size_t i = 0; i < dst.size(); ++i) dst[i] = static_cast<std::byte>((i * 31 + index * 7) & 0x3f);
    });
    write_seed(dir, "types_align" + std::to_string(alignment) + ".gguf", bytes);
  }
  latte::gguf::Writer empty;
  empty.set("general.architecture", std::string("glm-dsa"));
  write_seed(dir, "metadata_only.gguf", empty.write_to_memory([](size_t, std::span<std::byte>) {}));
}

// Tiny valid models: every tensor the architecture expects, a few KB each.
std::vector<std::vector<std::byte>> model_seeds() {
  std::vector<std::vector<std::byte>> out;
  for (const char* preset : {"test-v3", "test-v2-lite", "test-glm-dsa"}) {
    for (latte::KvBLayout layout : {latte::KvBLayout::split, latte::KvBLayout::fused}) {
      out.push_back(latte::fuzz::tiny_model_bytes(preset, layout));
    }
  }
  return out;
}

// States saved by sessions of the state fuzzer's model: empty, after a prompt, after a prompt and
// decoded tokens, with logits of every token, with host data.
void state_seeds(const fs::path& dir) {
  const latte::Model model = latte::fuzz::state_fuzz_model();
  const std::vector<latte::Token> prompt{1, 5, 9, 30, 2, 7};
  int n = 0;
  for (bool all : {false, true}) {
    latte::Session s(model,
                     {.n_ctx = latte::fuzz::kStateFuzzContext, .attention = "mla", .logits_all = all, .n_threads = 1});
    write_seed(dir, "state_" + std::to_string(n++), s.save_state_to_memory());
    s.eval(prompt);
    write_seed(dir, "state_" + std::to_string(n++), s.save_state_to_memory(all ? "host data" : ""));
    const latte::Token next = 3;
    s.eval(std::span(&next, 1));
    write_seed(dir, "state_" + std::to_string(n++), s.save_state_to_memory());
  }
}

void tokenizer_seeds(const fs::path& dir, const fs::path& data) {
  const latte::Tokenizer tok =
      latte::Tokenizer::from_gguf(latte::gguf::File::open((data / "deepseek-v3-vocab.gguf").string()));
  std::vector<std::string> texts;
  const std::string cases = read_text(data / "ggml-vocab-deepseek-llm.gguf.inp");
  const std::string separator = "\n__ggml_vocab_test__\n";
  for (size_t start = 0; start < cases.size();) {
    const size_t end = std::min(cases.find(separator, start), cases.size());
    texts.push_back(cases.substr(start, end - start));
    start = end + separator.size();
  }
  texts.push_back("<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜>Hello!<｜end▁of▁sentence｜>");
  texts.push_back(std::string("bad utf-8: \xc3\x28 \xe2\x82 \xf0\x9f\x98 end"));
  int n = 0;
  for (const std::string& text : texts) {
    for (uint8_t flags : {0, 6}) {
      write_seed(dir, "encode_" + std::to_string(n++), std::string(1, static_cast<char>(flags)) + text);
    }
    std::vector<latte::Token> ids = tok.encode(text, {.add_special = true, .parse_special = true});
    std::string image(1, '\x03');
    image.append(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(latte::Token));
    write_seed(dir, "decode_" + std::to_string(n++), image);
  }
}

void chat_seeds(const fs::path& dir, const fs::path& data) {
  const fs::path templates = data / "chat_templates";
  const nlohmann::json conversations = nlohmann::json::parse(read_text(templates / "conversations.json"));
  int n = 0;
  for (const auto& entry : fs::directory_iterator(templates)) {
    const nlohmann::json doc = nlohmann::json::parse(read_text(entry.path()));
    if (!doc.contains("chat_template")) continue;
    for (const nlohmann::json& conversation : conversations["conversations"]) {
      std::string image = doc["chat_template"].get<std::string>() + "\xff" + "plain";
      for (const nlohmann::json& message : conversation["messages"]) {
        image += "\xff" + message["role"].get<std::string>() + "\xff" + message["content"].get<std::string>();
      }
      write_seed(dir, "chat_" + std::to_string(n++), image);
    }
  }
}

void safetensors_seeds(const fs::path& dir) {
  const std::vector<float> values{1.f, -2.f, 3.5f, 0.f, 1e-3f, -7.f};
  latte::test::SafetensorsWriter w;
  w.add_f32("model.norm.weight", {6}, values);
  w.add_bf16("model.layers.0.mlp.weight", {2, 3}, values);
  w.add_f16("lm_head.weight", {3, 2}, values);
  w.set_metadata("format", "pt");
  write_seed(dir, "three_dtypes.safetensors", w.image());
  latte::test::SafetensorsWriter fp8;
  fp8.add_raw("w", "F8_E4M3", {2, 2}, std::vector<std::byte>(4, std::byte{0x38}));
  fp8.add_raw("w_scale_inv", "F32", {1}, std::vector<std::byte>(4, std::byte{0}));
  fp8.add_raw("scalar", "I64", {}, std::vector<std::byte>(8, std::byte{1}));
  write_seed(dir, "fp8_scalar.safetensors", fp8.image());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  try {
    const fs::path out = argv[1];
    const fs::path data = LATTE_FUZZ_TESTDATA_DIR;
    gguf_seeds(out / "gguf");
    int n = 0;
    for (const auto& bytes : model_seeds()) {
      write_seed(out / "model_config", "model_" + std::to_string(n) + ".gguf", bytes);
      write_seed(out / "gguf", "model_" + std::to_string(n++) + ".gguf", bytes);
    }
    tokenizer_seeds(out / "tokenizer", data);
    chat_seeds(out / "chat_template", data);
    safetensors_seeds(out / "safetensors");
    state_seeds(out / "session_state");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_fuzz_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
