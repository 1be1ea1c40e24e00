// Session::save_state / load_state: a restored session continues exactly as the original would, and
// every kind of bad state file is rejected with an Error that names the problem, leaving the session
// as it was.
#include "model/presets.hpp"
#include "support/random_models.hpp"
#include "support/temp_dir.hpp"
#include "support/test_options.hpp"

#include "core/stream_hash.hpp"

#include <latte/error.hpp>
#include <latte/sampler.hpp>
#include <latte/session.hpp>

#include <doctest/doctest.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace {

latte::Error error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const latte::Error& e) {
    return e;
  }
  FAIL("no latte::Error thrown");
  return latte::Error(latte::ErrorCode::internal, "");
}

bool contains(const latte::Error& e, const std::string& text) {
  return std::string(e.what()).find(text) != std::string::npos;
}

latte::SessionParams params(int n_ctx = 256) { return {.n_ctx = n_ctx, .attention = latte::test::attention_backend()}; }

/// Samples `n` tokens from the session (each fed back), recording the logits seen at every step.
std::vector<latte::Token> generate(latte::Session& s, uint64_t seed, int n, std::vector<float>* logits_seen = nullptr) {
  latte::Sampler sampler({.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = seed});
  sampler.accept(s.tokens());
  std::vector<latte::Token> out;
  for (int i = 0; i < n; ++i) {
    if (logits_seen) logits_seen->insert(logits_seen->end(), s.logits().begin(), s.logits().end());
    const latte::Token t = sampler.sample(s.logits());
    out.push_back(t);
    s.eval(std::span(&t, 1));
  }
  return out;
}

std::vector<float> copy(std::span<const float> s) { return {s.begin(), s.end()}; }
std::vector<latte::Token> copy(std::span<const latte::Token> s) { return {s.begin(), s.end()}; }

void write_file(const std::string& path, std::span<const std::byte> bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

/// A session's observable state, to check that a failed load changed nothing.
struct Snapshot {
  std::vector<latte::Token> tokens;
  std::vector<float> logits;
  explicit Snapshot(const latte::Session& s) : tokens(copy(s.tokens())), logits(copy(s.logits())) {}
  bool operator==(const Snapshot&) const = default;
};

// Field offsets of format version 1 (docs/session-state.md), written here independently of the code.
constexpr size_t kOffsetVersion = 8;
constexpr size_t kOffsetNPast = 40;
constexpr size_t kOffsetBackendBytes = 52;
constexpr size_t kOffsetModelBytes = 56;
constexpr size_t kOffsetHostBytes = 60;
constexpr size_t kFixedHeader = 68;
constexpr uint64_t kHeaderSeed = 0x4c4154544548ull;  // "LATTEH"

size_t header_bytes(std::span<const std::byte> state) {
  uint32_t backend = 0, model = 0;
  std::memcpy(&backend, state.data() + kOffsetBackendBytes, 4);
  std::memcpy(&model, state.data() + kOffsetModelBytes, 4);
  return kFixedHeader + backend + model + 8;
}

/// Rewrites the header checksum after a deliberate header edit (a well-formed but lying header).
void reseal_header(std::vector<std::byte>& state) {
  const size_t n = header_bytes(state);
  const uint64_t sum = latte::detail::hash64_seeded(std::span(state).first(n - 8), kHeaderSeed);
  std::memcpy(state.data() + n - 8, &sum, 8);
}

}  // namespace

TEST_CASE("a restored session samples exactly the tokens the original would have") {
  for (std::string_view flavour : latte::test::kTestFlavours) {
    CAPTURE(flavour);
    const latte::Model model = latte::test::shared_random_model(flavour);
    uint64_t seed = 0;
    const auto prompt = latte::test::fresh_tokens(11, model.config().n_vocab, &seed);
    CAPTURE(seed);
    latte::test::TempDir dir;
    const std::string path = dir.file("chat.latte");

    latte::Session original(model, params());
    original.eval(prompt);
    (void)generate(original, seed + 1, 3);  // state after a prompt and some decoding
    original.save_state(path, "host bytes \x01\x02");

    std::vector<float> original_logits, restored_logits;
    const auto expected = generate(original, seed, 8, &original_logits);

    latte::Session restored(model, params());
    restored.eval(latte::test::fresh_tokens(5, model.config().n_vocab));  // replaced by the load
    CHECK(restored.load_state(path) == "host bytes \x01\x02");
    CHECK(restored.n_past() == 14);
    CHECK(copy(restored.tokens()) == copy(std::span(original.tokens()).first(14)));
    const auto got = generate(restored, seed, 8, &restored_logits);
    CHECK(got == expected);
    CHECK(restored_logits == original_logits);  // bit for bit: the same cache rows and code path
  }
}

TEST_CASE("a state in memory equals the file and keeps every position's logits with logits_all") {
  const latte::Model model = latte::test::shared_random_model("test-v3");
  const auto prompt = latte::test::fresh_tokens(9, model.config().n_vocab);
  latte::SessionParams all = params();
  all.logits_all = true;
  latte::Session s(model, all);
  s.eval(prompt);
  latte::test::TempDir dir;
  s.save_state(dir.file("s.latte"));
  const auto bytes = s.save_state_to_memory();
  CHECK(latte::test::read_binary_file(dir.file("s.latte")) == bytes);

  latte::Session restored(model, all);
  CHECK(restored.load_state_from_memory(bytes).empty());
  for (int i = 0; i < 9; ++i) CHECK(copy(restored.logits(i)) == copy(s.logits(i)));

  // A session without logits_all restores the last logits (and, from this file, every row).
  latte::Session last_only(model, params());
  last_only.load_state_from_memory(bytes);
  CHECK(copy(last_only.logits()) == copy(s.logits()));

  // An empty session round-trips too; logits() then says no eval has run.
  latte::Session empty(model, params());
  latte::Session target(model, params());
  target.eval(prompt);
  target.load_state_from_memory(empty.save_state_to_memory());
  CHECK(target.n_past() == 0);
  CHECK(error_of([&] { (void)target.logits(); }).code() == latte::ErrorCode::invalid_argument);
}

TEST_CASE("a state from another model or another backend layout is rejected") {
  const latte::Model v3 = latte::test::shared_random_model("test-v3");
  const latte::Model v3_other_weights = latte::test::random_model("test-v3", {.seed = 77});
  const latte::Model lite = latte::test::shared_random_model("test-v2-lite");
  CHECK(v3.fingerprint() != v3_other_weights.fingerprint());

  latte::Session target(v3, params());
  target.eval(latte::test::fresh_tokens(6, 512));
  const Snapshot before(target);

  for (const latte::Model* other : {&v3_other_weights, &lite}) {
    latte::Session s(*other, params());
    s.eval(latte::test::fresh_tokens(4, 512));
    const latte::Error e = error_of([&] { target.load_state_from_memory(s.save_state_to_memory(), "other.latte"); });
    CHECK(e.code() == latte::ErrorCode::invalid_file);
    CHECK(contains(e, "other.latte: saved from another model"));
    CHECK(Snapshot(target) == before);
  }

  const std::string other_backend = latte::test::attention_backend() == "mla" ? "standard" : "mla";
  latte::Session s(v3, {.n_ctx = 256, .attention = other_backend});
  s.eval(latte::test::fresh_tokens(4, 512));
  const latte::Error e = error_of([&] { target.load_state_from_memory(s.save_state_to_memory()); });
  CHECK(e.code() == latte::ErrorCode::invalid_file);
  CHECK(contains(e, "saved with attention backend '" + other_backend + "'"));
  CHECK(contains(e, "values per token"));
  CHECK(Snapshot(target) == before);

  // Too many tokens for this session's n_ctx.
  latte::Session big(v3, params());
  big.eval(latte::test::fresh_tokens(20, 512));
  latte::Session small(v3, params(10));
  small.eval(latte::test::fresh_tokens(3, 512));
  const Snapshot small_before(small);
  const latte::Error overflow = error_of([&] { small.load_state_from_memory(big.save_state_to_memory()); });
  CHECK(overflow.code() == latte::ErrorCode::context_overflow);
  CHECK(contains(overflow, "n_ctx 10"));
  CHECK(Snapshot(small) == small_before);
}

TEST_CASE("truncated, corrupted and lying state files are rejected and change nothing") {
  const latte::Model model = latte::test::shared_random_model("test-glm-dsa");  // indexer keys too
  latte::Session source(model, params());
  source.eval(latte::test::fresh_tokens(7, model.config().n_vocab));
  const std::vector<std::byte> good = source.save_state_to_memory("abc");
  const size_t header = header_bytes(good);

  latte::Session target(model, params());
  target.eval(latte::test::fresh_tokens(5, model.config().n_vocab));
  const Snapshot before(target);
  const auto rejected = [&](std::span<const std::byte> bytes) {
    const latte::Error e = error_of([&] { target.load_state_from_memory(bytes, "bad.latte"); });
    CHECK(Snapshot(target) == before);
    return e;
  };

  SUBCASE("truncated anywhere") {
    for (size_t keep : {size_t{0}, size_t{5}, size_t{8}, size_t{30}, kFixedHeader, header - 1, header, header + 40,
                        good.size() / 2, good.size() - 9, good.size() - 1}) {
      CAPTURE(keep);
      const latte::Error e = rejected(std::span(good).first(keep));
      CHECK(e.code() == latte::ErrorCode::invalid_file);
      CHECK(contains(e, "bad.latte: "));
      CHECK((contains(e, "truncated") || (keep < 8 && contains(e, "shorter than the magic"))));
    }
    // Trailing garbage is reported as such.
    std::vector<std::byte> longer = good;
    longer.push_back(std::byte{0});
    CHECK(contains(rejected(longer), "1 unexpected bytes after the state's checksum"));
  }

  SUBCASE("a flipped byte anywhere") {
    std::mt19937_64 rng(std::random_device{}());
    std::vector<size_t> positions = {0,          7,      kOffsetVersion, kOffsetNPast, kOffsetHostBytes + 3,
                                     header - 1, header, good.size() - 1};
    for (int i = 0; i < 40; ++i) positions.push_back(rng() % good.size());
    for (size_t pos : positions) {
      CAPTURE(pos);
      std::vector<std::byte> bad = good;
      bad[pos] ^= std::byte{static_cast<unsigned char>(1u << (rng() % 8))};
      const latte::Error e = rejected(bad);
      CHECK(e.code() == latte::ErrorCode::invalid_file);
      if (pos < 8) {
        CHECK(contains(e, "not a latte session state"));
      } else if (pos < 12) {
        CHECK(contains(e, "format version"));
      } else if (pos < header) {
        CHECK((contains(e, "corrupt header") || contains(e, "truncated")));
      } else {
        CHECK(contains(e, "corrupt: the checksum of the"));
      }
    }
  }

  SUBCASE("absurd lengths behind a valid header checksum") {
    std::vector<std::byte> bad = good;
    const uint64_t huge = uint64_t{1} << 62;
    std::memcpy(bad.data() + kOffsetHostBytes, &huge, 8);
    reseal_header(bad);
    latte::Error e = rejected(bad);
    CHECK(e.code() == latte::ErrorCode::invalid_file);
    CHECK(contains(e, "4611686018427387904 bytes of host data (more than the file holds)"));

    bad = good;
    const uint32_t many = 200;  // fits n_ctx, but the file holds 7 tokens
    std::memcpy(bad.data() + kOffsetNPast, &many, 4);
    reseal_header(bad);
    e = rejected(bad);
    CHECK(contains(e, "truncated or corrupt: the header describes 200 tokens"));

    const uint32_t too_many = 0xFFFFFFF0u;
    std::memcpy(bad.data() + kOffsetNPast, &too_many, 4);
    reseal_header(bad);
    e = rejected(bad);
    CHECK(e.code() == latte::ErrorCode::context_overflow);

    bad = good;
    const uint32_t long_name = 1u << 30;
    std::memcpy(bad.data() + kOffsetBackendBytes, &long_name, 4);
    e = rejected(bad);
    CHECK(contains(e, "backend name length 1073741824 (byte offset 52) exceeds 256"));
  }

  SUBCASE("another format version") {
    std::vector<std::byte> bad = good;
    const uint32_t version = 2;
    std::memcpy(bad.data() + kOffsetVersion, &version, 4);
    CHECK(contains(rejected(bad), "session state format version 2 (byte offset 8); this build reads version 1"));
  }

  SUBCASE("files that are missing or not state files") {
    latte::test::TempDir dir;
    CHECK(error_of([&] { target.load_state(dir.file("missing.latte")); }).code() == latte::ErrorCode::not_found);
    CHECK(Snapshot(target) == before);
    latte::test::write_text_file(dir.file("text.latte"), "hello, this is not a state file at all");
    const latte::Error e = error_of([&] { target.load_state(dir.file("text.latte")); });
    CHECK(contains(e, "text.latte: not a latte session state"));
    CHECK(error_of([&] { target.load_state(dir.path()); }).code() == latte::ErrorCode::io);
    write_file(dir.file("cut.latte"), std::span(good).first(good.size() - 3));
    CHECK(contains(error_of([&] { target.load_state(dir.file("cut.latte")); }), "cut.latte: truncated"));
    CHECK(Snapshot(target) == before);
    // Saving into a directory that does not exist names the path.
    const latte::Error save = error_of([&] { target.save_state(dir.file("no/such/dir.latte")); });
    CHECK(save.code() == latte::ErrorCode::io);
    CHECK(contains(save, "no/such/dir.latte"));
  }
}
