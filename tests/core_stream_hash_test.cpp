// StreamHash64 (state checksums) and the model fingerprint built on it.
#include "model/presets.hpp"
#include "support/random_models.hpp"

#include "core/stream_hash.hpp"
#include "model/fingerprint.hpp"

#include <latte/gguf.hpp>

#include <doctest/doctest.h>

#include <random>
#include <set>
#include <vector>

namespace {

std::vector<std::byte> random_bytes(size_t n, std::mt19937_64& rng) {
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(rng() & 0xFF);
  return out;
}

}  // namespace

TEST_CASE("StreamHash64 does not depend on how the stream is cut") {
  std::mt19937_64 rng(std::random_device{}());
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{31}, size_t{32}, size_t{33}, size_t{1000}, size_t{4099}}) {
    CAPTURE(n);
    const auto bytes = random_bytes(n, rng);
    const uint64_t whole = latte::detail::hash64(bytes);
    for (int trial = 0; trial < 8; ++trial) {
      latte::detail::StreamHash64 h;
      size_t at = 0;
      while (at < n) {
        const size_t len = std::min<size_t>(n - at, rng() % 45);
        h.update(std::span(bytes).subspan(at, len));
        at += len;
      }
      CHECK(h.digest() == whole);
      CHECK(h.length() == n);
    }
  }
}

TEST_CASE("StreamHash64 changes with every single-bit flip, the length and the seed") {
  std::mt19937_64 rng(std::random_device{}());
  const auto bytes = random_bytes(300, rng);  // full stripes, then a tail of 12 bytes
  const uint64_t base = latte::detail::hash64(bytes);
  std::set<uint64_t> seen{base};
  for (size_t i = 0; i < bytes.size(); ++i) {
    auto flipped = bytes;
    flipped[i] ^= std::byte{static_cast<unsigned char>(1u << (i % 8))};
    seen.insert(latte::detail::hash64(flipped));
  }
  CHECK(seen.size() == bytes.size() + 1);  // every flip gives a distinct digest

  auto longer = bytes;
  longer.push_back(std::byte{0});
  CHECK(latte::detail::hash64(longer) != base);
  CHECK(latte::detail::hash64(std::span(bytes).first(299)) != base);
  CHECK(latte::detail::hash64_seeded(bytes, 1) != base);
  // Strings are length-prefixed: "ab" + "c" differs from "a" + "bc".
  latte::detail::StreamHash64 x, y;
  x.update_string("ab");
  x.update_string("c");
  y.update_string("a");
  y.update_string("bc");
  CHECK(x.digest() != y.digest());
}

TEST_CASE("StreamHash64 digests are stable (saved states from older builds stay readable)") {
  std::vector<std::byte> bytes(100);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>(i * 7 + 3);
  // Pinned when the format was defined; a change here breaks every saved session state.
  CHECK(latte::detail::hash64({}) == 0xe8237d4022e3328aull);
  CHECK(latte::detail::hash64(bytes) == 0x0f7878627f727779ull);
}

TEST_CASE("a model's fingerprint tells files apart by metadata, tensor table and weights") {
  const latte::ModelConfig config = latte::model_preset("test-v2-lite");
  const auto bytes = latte::random_model_bytes(config, {.seed = 5});
  const auto fp = [](std::span<const std::byte> b) {
    return latte::detail::model_fingerprint(latte::gguf::File::from_bytes(b));
  };
  const uint64_t base = fp(bytes);
  CHECK(fp(bytes) == base);  // deterministic
  CHECK(latte::Model::from_file(latte::gguf::File::from_bytes(bytes)).fingerprint() == base);

  // Other weights, same metadata and tensor table.
  CHECK(fp(latte::random_model_bytes(config, {.seed = 6})) != base);
  // A change deep inside one tensor's data (at its middle sample).
  latte::RandomModelOptions nudged{.seed = 5};
  nudged.transform = [](std::string_view name, std::span<const uint64_t>, std::span<float> values) {
    if (name == "blk.1.ffn_up_exps.weight") values[values.size() / 2 + 3] += 1.0f;
  };
  CHECK(fp(latte::random_model_bytes(config, nudged)) != base);
  // One metadata value.
  latte::RandomModelOptions named{.seed = 5};
  named.extra_metadata = [](latte::gguf::Writer& w) { w.set("general.name", std::string("renamed")); };
  CHECK(fp(latte::random_model_bytes(config, named)) != base);
}
