// The hostile-input catalogue: files that declare absurd sizes, calls with out-of-range arguments,
// absurd sampler parameters, and the inputs the fuzzers (tests/fuzz) once crashed on. Each must give
// a latte::Error whose message says what is wrong and where — never a crash, an abort, a huge
// allocation or a silently wrong result.
#include "convert/safetensors.hpp"
#include "model/presets.hpp"
#include "support/allocation_counter.hpp"
#include "support/gguf_image.hpp"
#include "support/random_models.hpp"
#include "support/safetensors_writer.hpp"
#include "support/temp_dir.hpp"
#include "support/test_options.hpp"

#include <latte/chat.hpp>
#include <latte/error.hpp>
#include <latte/gguf.hpp>
#include <latte/model.hpp>
#include <latte/sampler.hpp>
#include <latte/session.hpp>
#include <latte/tokenizer.hpp>

#include <doctest/doctest.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace {

using latte::ErrorCode;
using latte::test::GgufBytes;

constexpr uint32_t kTypeU32 = 4;
constexpr uint32_t kTypeString = 8;
constexpr uint32_t kTypeArray = 9;

// Runs `f`, which must throw latte::Error; returns it (fails the test otherwise).
latte::Error error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const latte::Error& e) {
    return e;
  }
  FAIL("no latte::Error was thrown");
  return latte::Error(ErrorCode::internal, "unreachable");
}

void check_error(const latte::Error& e, ErrorCode code, const std::vector<std::string>& parts) {
  const std::string what = e.what();
  CHECK_MESSAGE(e.code() == code, what);
  for (const std::string& part : parts) CHECK_MESSAGE(what.find(part) != std::string::npos, what);
}

GgufBytes gguf_header(uint64_t n_tensors, uint64_t n_kv) {
  GgufBytes b;
  b.raw("GGUF").u32(3).u64(n_tensors).u64(n_kv);
  return b;
}

// Parses `image` expecting Error(invalid_file) with every part of `parts`, and checks that parsing
// allocated in proportion to the image (one copy of it plus bookkeeping), not to what it declares.
void check_rejected_gguf(const std::vector<std::byte>& image, const std::vector<std::string>& parts) {
  latte::test::AllocationCounter allocations;
  const latte::Error e = error_of([&] { (void)latte::gguf::File::from_bytes(image, "hostile.gguf"); });
  check_error(e, ErrorCode::invalid_file, parts);
  CHECK(std::string(e.what()).find("hostile.gguf") != std::string::npos);
  CHECK_MESSAGE(allocations.largest() <= image.size() + 65536, allocations.largest());
  CHECK_MESSAGE(allocations.total() <= 16 * image.size() + 65536, allocations.total());
}

}  // namespace

TEST_CASE("a GGUF file declaring 2^40 tensors is rejected before anything is allocated for them") {
  check_rejected_gguf(gguf_header(uint64_t{1} << 40, 0).bytes, {"tensor count", "1099511627776 tensors cannot fit"});
}

TEST_CASE("a GGUF file declaring 2^60 metadata entries is rejected before allocating") {
  check_rejected_gguf(gguf_header(0, uint64_t{1} << 60).bytes, {"metadata count", "cannot fit"});
}

TEST_CASE("a GGUF string of 2^62 bytes is rejected before allocating") {
  GgufBytes b = gguf_header(0, 1);
  b.str("general.name").u32(kTypeString).u64(uint64_t{1} << 62).raw("tiny");
  check_rejected_gguf(b.bytes, {"key 'general.name' value", "string length 4611686018427387904 exceeds"});
}

TEST_CASE("a GGUF key of 2^62 bytes is rejected before allocating") {
  GgufBytes b = gguf_header(0, 1);
  b.u64(uint64_t{1} << 62).raw("key").u32(kTypeU32).u32(7);
  check_rejected_gguf(b.bytes, {"metadata entry #0 key", "string length 4611686018427387904 exceeds"});
}

TEST_CASE("GGUF arrays of 2^60 numbers or strings are rejected before allocating") {
  GgufBytes numbers = gguf_header(0, 1);
  numbers.str("test.numbers").u32(kTypeArray).u32(kTypeU32).u64(uint64_t{1} << 60).u32(1).u32(2);
  check_rejected_gguf(numbers.bytes, {"key 'test.numbers' array length", "array of 1152921504606846976 elements"});
  GgufBytes strings = gguf_header(0, 1);
  strings.str("tokenizer.ggml.tokens").u32(kTypeArray).u32(kTypeString).u64(uint64_t{1} << 60).str("a");
  check_rejected_gguf(strings.bytes,
                      {"key 'tokenizer.ggml.tokens'", "array of 1152921504606846976 strings cannot fit"});
}

TEST_CASE("a GGUF array of many empty strings costs memory in proportion to the file") {
  // 2^20 strings of length 0 (8 bytes each in the file): legal, and the parse must not allocate
  // more than a small multiple of the 8 MiB it really reads.
  constexpr uint64_t n = uint64_t{1} << 20;
  GgufBytes b = gguf_header(0, 1);
  b.str("tokenizer.ggml.tokens").u32(kTypeArray).u32(kTypeString).u64(n);
  b.bytes.resize(b.bytes.size() + n * 8, std::byte{0});
  latte::test::AllocationCounter allocations;
  const auto file = latte::gguf::File::from_bytes(b.bytes, "many-strings.gguf");
  CHECK(file.get_strings("tokenizer.ggml.tokens").size() == n);
  CHECK_MESSAGE(allocations.total() <= 8 * b.bytes.size(), allocations.total());
}

TEST_CASE("GGUF tensor dimensions whose product overflows are rejected") {
  GgufBytes b = gguf_header(1, 0);
  b.str("t").u32(4).u64(uint64_t{1} << 20).u64(uint64_t{1} << 20).u64(uint64_t{1} << 20).u64(uint64_t{1} << 20);
  b.u32(0).u64(0);  // f32, offset 0
  check_rejected_gguf(b.bytes, {"tensor 't' ne[3]", "element count overflows"});
  GgufBytes bytes = gguf_header(1, 0);
  bytes.str("t").u32(2).u64(uint64_t{1} << 31).u64(uint64_t{1} << 31).u32(0).u64(0);  // 2^62 f32: 2^64 bytes
  check_rejected_gguf(bytes.bytes, {"tensor 't'", "data size in bytes overflows"});
}

TEST_CASE("reading a real vocabulary file allocates in proportion to its size") {
  const std::string path = latte::test::data_path("deepseek-v3-vocab.gguf");
  const auto size = std::filesystem::file_size(path);
  latte::test::AllocationCounter allocations;
  const auto file = latte::gguf::File::open(path);
  CHECK(file.get_strings("tokenizer.ggml.tokens").size() > 100000);
  CHECK_MESSAGE(allocations.total() <= 4 * size, allocations.total() << " bytes for a file of " << size);
}

TEST_CASE("model metadata with absurd sizes is rejected with the key named") {
  // A config that validates on its own, written without tensors: loading must list what is missing
  // (in bounded memory) rather than trust the sizes.
  latte::ModelConfig config = latte::model_preset("test-v3");
  const auto image_with = [&](const std::function<void(latte::gguf::Writer&)>& edit) {
    latte::gguf::Writer w;
    config.write_gguf_metadata(w);
    edit(w);
    return w.write_to_memory([](size_t, std::span<std::byte>) {});
  };
  const auto load = [](const std::vector<std::byte>& image) {
    (void)latte::Model::from_file(latte::gguf::File::from_bytes(image, "hostile-model.gguf"));
  };
  SUBCASE("2^31 - 1 blocks") {
    const auto image = image_with([](latte::gguf::Writer& w) { w.set("deepseek2.block_count", uint32_t{INT32_MAX}); });
    latte::test::AllocationCounter allocations;
    check_error(error_of([&] { load(image); }), ErrorCode::invalid_file,
                {"hostile-model.gguf", "block_count 2147483647 needs tensors for every block"});
    CHECK_MESSAGE(allocations.total() <= (uint64_t{64} << 20), allocations.total());
  }
  SUBCASE("a block count beyond int") {
    const auto image = image_with([](latte::gguf::Writer& w) { w.set("deepseek2.block_count", uint64_t{1} << 40); });
    check_error(error_of([&] { load(image); }), ErrorCode::invalid_file, {"deepseek2.block_count"});
  }
  SUBCASE("a negative head count") {
    const auto image = image_with([](latte::gguf::Writer& w) { w.set("deepseek2.attention.head_count", int32_t{-4}); });
    check_error(error_of([&] { load(image); }), ErrorCode::invalid_file, {"head_count"});
  }
  SUBCASE("head and width products beyond int") {
    const auto image = image_with([](latte::gguf::Writer& w) {
      w.set("deepseek2.attention.head_count", uint32_t{1} << 30);
      w.set("deepseek2.embedding_length", uint32_t{1} << 30);
    });
    latte::test::AllocationCounter allocations;
    check_error(error_of([&] { load(image); }), ErrorCode::invalid_file, {"hostile-model.gguf"});
    CHECK_MESSAGE(allocations.total() <= (uint64_t{64} << 20), allocations.total());
  }
}

TEST_CASE("sessions reject out-of-range token ids and context overflow before running") {
  const latte::Model model = latte::test::shared_random_model("test-v2-lite");
  const int n_vocab = model.config().n_vocab;
  latte::Session s(model, {.n_ctx = 8, .attention = latte::test::attention_backend(), .n_threads = 1});
  for (latte::Token bad : {-1, n_vocab, INT32_MAX, INT32_MIN}) {
    const std::vector<latte::Token> tokens{1, bad};
    check_error(error_of([&] { s.eval(tokens); }), ErrorCode::invalid_argument,
                {"token id " + std::to_string(bad), "at index 1", std::to_string(n_vocab)});
  }
  CHECK(s.n_past() == 0);
  const std::vector<latte::Token> nine(9, 1);
  check_error(error_of([&] { s.eval(nine); }), ErrorCode::context_overflow, {"9 new tokens exceed n_ctx 8"});
  s.eval(std::vector<latte::Token>{1, 2, 3, 4, 5, 6});
  check_error(error_of([&] {
                s.eval(std::vector<latte::Token>{1, 2, 3});
              }),
              ErrorCode::context_overflow, {"6 cached + 3 new tokens exceed n_ctx 8"});
  CHECK(s.n_past() == 6);
  check_error(error_of([&] { s.truncate(7); }), ErrorCode::invalid_argument, {"truncate(7)"});
  check_error(error_of([&] { s.truncate(-1); }), ErrorCode::invalid_argument, {"truncate(-1)"});
  check_error(error_of([&] { (void)s.logits(6); }), ErrorCode::invalid_argument, {"logits(6)"});
  check_error(error_of([&] { (void)s.logits(-1); }), ErrorCode::invalid_argument, {"logits(-1)"});
  for (int n_ctx : {0, -1, INT_MIN}) {
    check_error(error_of([&] { latte::Session(model, {.n_ctx = n_ctx}); }), ErrorCode::invalid_argument,
                {"n_ctx must be at least 1"});
  }
  check_error(error_of([&] { latte::Session(model, {.attention = "no-such-backend"}); }), ErrorCode::not_found,
              {"no-such-backend"});
  // a thread count no machine has fails at once (it would start that many spinning threads)
  for (int n_threads : {-1, latte::max_threads + 1, 100000, INT_MAX}) {
    check_error(error_of([&] { latte::Session(model, {.n_threads = n_threads}); }), ErrorCode::invalid_argument,
                {"n_threads must be in 0..1024", "(got " + std::to_string(n_threads) + ")"});
  }
}

TEST_CASE("a session with the largest n_ctx allocates only what its tokens use") {
  const latte::Model model = latte::test::shared_random_model("test-v2-lite");
  latte::test::AllocationCounter allocations;
  latte::Session s(model, {.n_ctx = INT_MAX, .attention = latte::test::attention_backend(), .n_threads = 1});
  s.eval(std::vector<latte::Token>{1, 2, 3});
  CHECK(s.n_ctx() == INT_MAX);
  CHECK_MESSAGE(allocations.total() <= (uint64_t{256} << 20), allocations.total());
}

TEST_CASE("absurd sampler parameters are rejected naming the field") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    latte::SamplerParams params;
    const char* field;
  };
  std::vector<Case> cases;
  for (float t : {-1.0f, nan, inf}) cases.push_back({{.temperature = t}, "temperature"});
  for (int32_t k : {-1, INT32_MIN}) cases.push_back({{.top_k = k}, "top_k"});
  for (float p : {0.0f, -0.5f, 1.5f, nan}) cases.push_back({{.top_p = p}, "top_p"});
  for (float p : {-0.1f, 1.1f, nan}) cases.push_back({{.min_p = p}, "min_p"});
  for (float p : {0.0f, 2.0f, nan}) cases.push_back({{.typical_p = p}, "typical_p"});
  for (float r : {0.0f, -1.0f, inf, nan}) cases.push_back({{.repeat_penalty = r}, "repeat_penalty"});
  for (float f : {inf, -inf, nan}) cases.push_back({{.frequency_penalty = f}, "frequency_penalty"});
  for (float f : {inf, nan}) cases.push_back({{.presence_penalty = f}, "presence_penalty"});
  for (int32_t n : {-2, INT32_MIN}) cases.push_back({{.penalty_last_n = n}, "penalty_last_n"});
  cases.push_back({{.logit_bias = {{-1, 1.0f}}}, "logit_bias"});
  cases.push_back({{.logit_bias = {{3, nan}}}, "logit_bias"});
  cases.push_back({{.logit_bias = {{3, inf}}}, "logit_bias"});
  for (const Case& c : cases) {
    check_error(error_of([&] { latte::Sampler s(c.params); }), ErrorCode::invalid_argument, {c.field});
  }
}

TEST_CASE("a sampler rejects logits it cannot draw from") {
  latte::Sampler s({.seed = 1});
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  check_error(error_of([&] { (void)s.sample({}); }), ErrorCode::invalid_argument, {});
  check_error(error_of([&] { (void)s.sample(std::vector<float>{0.f, nan, 1.f}); }), ErrorCode::invalid_argument, {});
  check_error(error_of([&] { (void)s.sample(std::vector<float>{0.f, inf}); }), ErrorCode::invalid_argument, {});
  check_error(error_of([&] { (void)s.sample(std::vector<float>{-inf, -inf}); }), ErrorCode::invalid_argument, {});
  latte::Sampler biased({.logit_bias = {{7, 1.0f}}});
  check_error(error_of([&] { (void)biased.sample(std::vector<float>{0.f, 1.f}); }), ErrorCode::invalid_argument, {"7"});
  check_error(error_of([&] { s.accept(-5); }), ErrorCode::invalid_argument, {"-5"});
  latte::Sampler penalised({.repeat_penalty = 1.5f});
  penalised.accept(9);  // a history token outside the next call's vocabulary
  check_error(error_of([&] {
                (void)penalised.sample(std::vector<float>{0.f, 1.f});
              }),
              ErrorCode::invalid_argument, {"9"});
}

TEST_CASE("the tokenizer rejects out-of-range ids naming the id and the vocabulary size") {
  const auto tok =
      latte::Tokenizer::from_gguf(latte::gguf::File::open(latte::test::data_path("deepseek-v3-vocab.gguf")));
  const int n = tok.n_vocab();
  for (latte::Token bad : {-1, n, INT32_MAX, INT32_MIN}) {
    const std::vector<latte::Token> ids{0, bad};
    check_error(error_of([&] { (void)tok.decode(ids); }), ErrorCode::invalid_argument,
                {std::to_string(bad), std::to_string(n)});
    latte::StreamDecoder stream(tok);
    check_error(error_of([&] { (void)stream.push(bad); }), ErrorCode::invalid_argument, {std::to_string(bad)});
    check_error(error_of([&] { (void)tok.token_to_piece(bad); }), ErrorCode::invalid_argument, {std::to_string(bad)});
  }
}

TEST_CASE("chat templates reject unknown roles, names and templates") {
  const auto tmpl = latte::ChatTemplate::named("deepseek-v3");
  const std::vector<latte::ChatMessage> messages{{"user", "hi"}, {"tool", "{}"}};
  check_error(error_of([&] { (void)tmpl.apply(messages, true); }), ErrorCode::invalid_argument, {"1", "tool"});
  check_error(error_of([&] { (void)latte::ChatTemplate::named("no-such-format"); }), ErrorCode::invalid_argument,
              {"no-such-format"});
  check_error(error_of([&] { (void)latte::ChatTemplate::detect("{{ messages }}"); }), ErrorCode::unsupported,
              {"{{ messages }}"});
}

TEST_CASE("safetensors files declaring absurd sizes are rejected") {
  const auto parse = [](const std::vector<std::byte>& image) {
    (void)latte::safetensors::File::from_bytes(image, "hostile.safetensors");
  };
  std::vector<std::byte> huge_header(16, std::byte{0});
  latte::test::patch<uint64_t>(huge_header, 0, uint64_t{1} << 62);
  check_error(error_of([&] { parse(huge_header); }), ErrorCode::invalid_file, {"hostile.safetensors"});
  const std::vector<std::byte> overflowing = latte::test::safetensors_image(
      R"({"t":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,0]}})", {});
  check_error(error_of([&] { parse(overflowing); }), ErrorCode::invalid_file, {"hostile.safetensors", "'t'"});
  const std::vector<std::byte> past_end = latte::test::safetensors_image(
      R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[18446744073709551608,18446744073709551615]}})", {});
  check_error(error_of([&] { parse(past_end); }), ErrorCode::invalid_file, {"hostile.safetensors", "'t'"});
}

TEST_CASE("inputs the fuzzers once crashed on now give latte::Error") {
  // tests/fuzz/regressions/<harness>/<input>: every saved crasher is replayed through its parser.
  const std::filesystem::path root = std::filesystem::path(LATTE_SOURCE_DIR) / "tests/fuzz/regressions";
  REQUIRE(std::filesystem::is_directory(root));
  for (const auto& harness : std::filesystem::directory_iterator(root)) {
    if (!harness.is_directory()) continue;  // the README
    for (const auto& input : std::filesystem::directory_iterator(harness.path())) {
      const std::vector<std::byte> bytes = latte::test::read_binary_file(input.path().string());
      const std::string name = harness.path().filename().string();
      INFO(input.path().string());
      if (name == "gguf" || name == "model_config") {
        const latte::Error e = error_of([&] {
          latte::gguf::File file = latte::gguf::File::from_bytes(bytes, "crasher.gguf");
          const latte::ModelConfig config = latte::ModelConfig::from_gguf(file);
          (void)latte::Model::from_file(std::move(file));
        });
        CHECK(std::string(e.what()).find("crasher.gguf") != std::string::npos);
      } else if (name == "safetensors") {
        const latte::Error e =
            error_of([&] { (void)latte::safetensors::File::from_bytes(bytes, "crasher.safetensors"); });
        CHECK(std::string(e.what()).find("crasher.safetensors") != std::string::npos);
      } else {
        FAIL("no replay for harness " << name);
      }
    }
  }
}
