// GGUF writer -> reader round trips: every value type, arrays of every element type, tensors of
// several ggml types, file and in-memory output, single- and multi-threaded writes; and the writer's
// bytes against an image encoded by hand from the format description.
#include <doctest/doctest.h>

#include "support/gguf_image.hpp"
#include "support/temp_dir.hpp"

#include <latte/error.hpp>
#include <latte/gguf.hpp>

#include <unistd.h>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

namespace {

using latte::GgmlType;
using latte::gguf::Array;
using latte::gguf::File;
using latte::gguf::Value;
using latte::gguf::ValueType;
using latte::gguf::Writer;

uint64_t fresh_seed() {
  std::random_device device;
  return (uint64_t{device()} << 32) | device();
}

std::string random_text(std::mt19937_64& rng, size_t max_length) {
  std::string text(rng() % (max_length + 1), '\0');
  for (auto& c : text) c = static_cast<char>(rng() % 256);  // any byte, NUL and invalid UTF-8 included
  return text;
}

template <class T>
T random_scalar(std::mt19937_64& rng) {
  if constexpr (std::is_same_v<T, bool>) {
    return rng() % 2 == 1;
  } else if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(std::uniform_real_distribution<double>(-1e6, 1e6)(rng));
  } else {
    return static_cast<T>(rng());
  }
}

template <class T>
std::vector<T> random_vector(std::mt19937_64& rng, size_t n) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, std::string>) {
      v[i] = random_text(rng, 20);
    } else {
      v[i] = random_scalar<T>(rng);
    }
  }
  return v;
}

// Metadata with one scalar of every type and one array of every element type, in a random order of
// sizes (empty arrays included).
std::vector<latte::gguf::KeyValue> random_metadata(std::mt19937_64& rng) {
  std::vector<latte::gguf::KeyValue> kv;
  kv.push_back({"t.u8", Value(random_scalar<uint8_t>(rng))});
  kv.push_back({"t.i8", Value(random_scalar<int8_t>(rng))});
  kv.push_back({"t.u16", Value(random_scalar<uint16_t>(rng))});
  kv.push_back({"t.i16", Value(random_scalar<int16_t>(rng))});
  kv.push_back({"t.u32", Value(random_scalar<uint32_t>(rng))});
  kv.push_back({"t.i32", Value(random_scalar<int32_t>(rng))});
  kv.push_back({"t.f32", Value(random_scalar<float>(rng))});
  kv.push_back({"t.bool", Value(random_scalar<bool>(rng))});
  kv.push_back({"t.string", Value(random_text(rng, 40))});
  kv.push_back({"t.u64", Value(random_scalar<uint64_t>(rng))});
  kv.push_back({"t.i64", Value(random_scalar<int64_t>(rng))});
  kv.push_back({"t.f64", Value(random_scalar<double>(rng))});
  const auto n = [&] { return static_cast<size_t>(rng() % 50); };
  kv.push_back({"a.u8", Value(Array(random_vector<uint8_t>(rng, n())))});
  kv.push_back({"a.i8", Value(Array(random_vector<int8_t>(rng, n())))});
  kv.push_back({"a.u16", Value(Array(random_vector<uint16_t>(rng, n())))});
  kv.push_back({"a.i16", Value(Array(random_vector<int16_t>(rng, n())))});
  kv.push_back({"a.u32", Value(Array(random_vector<uint32_t>(rng, n())))});
  kv.push_back({"a.i32", Value(Array(random_vector<int32_t>(rng, n())))});
  kv.push_back({"a.f32", Value(Array(random_vector<float>(rng, n())))});
  kv.push_back({"a.bool", Value(Array(random_vector<bool>(rng, n())))});
  kv.push_back({"a.string", Value(Array(random_vector<std::string>(rng, n())))});
  kv.push_back({"a.u64", Value(Array(random_vector<uint64_t>(rng, n())))});
  kv.push_back({"a.i64", Value(Array(random_vector<int64_t>(rng, n())))});
  kv.push_back({"a.f64", Value(Array(random_vector<double>(rng, n())))});
  kv.push_back({"a.empty_strings", Value(Array(std::vector<std::string>{}))});
  std::shuffle(kv.begin(), kv.end(), rng);
  return kv;
}

struct TensorSpec {
  std::string name;
  GgmlType type;
  std::vector<uint64_t> ne;
};

std::vector<TensorSpec> tensor_specs() {
  return {{"token_embd.weight", GgmlType::f32, {8, 5}},          {"blk.0.attn_q.weight", GgmlType::q4_k, {256, 3}},
          {"blk.0.ffn_down.weight", GgmlType::q8_0, {64, 2, 3}}, {"blk.0.attn_norm.weight", GgmlType::f16, {7}},
          {"blk.0.exps", GgmlType::bf16, {2, 3, 4, 5}},          {"blk.0.iq", GgmlType::iq4_nl, {32}}};
}

// Expected sizes of the specs above, from the block sizes ggml documents.
constexpr uint64_t expected_bytes[] = {8 * 5 * 4, 3 * 144, 2 * 3 * 2 * 34, 7 * 2, 2 * 3 * 4 * 5 * 2, 18};

// Deterministic per-tensor content derived from a seed, so several writes produce the same data.
void fill_pattern(uint64_t seed, size_t index, std::span<std::byte> dst) {
  std::mt19937_64 rng(seed + index);
  for (auto& b : dst) b = static_cast<std::byte>(rng());
}

Writer make_writer(const std::vector<latte::gguf::KeyValue>& kv, uint32_t alignment) {
  Writer w;
  for (const auto& e : kv) w.set(e.key, e.value);
  if (alignment != 32) w.set_alignment(alignment);
  for (const auto& t : tensor_specs()) w.add_tensor(t.name, t.type, t.ne);
  return w;
}

void check_file(const File& f, const std::vector<latte::gguf::KeyValue>& kv, uint32_t alignment, uint64_t seed) {
  CHECK(f.version() == 3);
  CHECK(f.alignment() == alignment);
  CHECK(f.data_offset() % alignment == 0);
  // Every written key is there with the same type and value, in insertion order.
  const size_t extra = alignment != 32 ? 1 : 0;  // general.alignment
  REQUIRE(f.metadata().size() == kv.size() + extra);
  for (size_t i = 0; i < kv.size(); ++i) {
    CAPTURE(kv[i].key);
    CHECK(f.metadata()[i].key == kv[i].key);
    const Value* v = f.find(kv[i].key);
    REQUIRE(v != nullptr);
    CHECK(*v == kv[i].value);
  }
  const auto specs = tensor_specs();
  REQUIRE(f.tensors().size() == specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    CAPTURE(specs[i].name);
    const auto* t = f.find_tensor(specs[i].name);
    REQUIRE(t != nullptr);
    CHECK(t == &f.tensors()[i]);
    CHECK(t->type == specs[i].type);
    CHECK(t->n_dims == specs[i].ne.size());
    for (size_t d = 0; d < 4; ++d) CHECK(t->ne[d] == (d < specs[i].ne.size() ? specs[i].ne[d] : 1));
    CHECK(t->n_bytes == expected_bytes[i]);
    CHECK(t->offset % alignment == 0);
    std::vector<std::byte> expected(t->n_bytes);
    fill_pattern(seed, i, expected);
    const auto data = f.tensor_data(*t);
    REQUIRE(data.size() == expected.size());
    CHECK(std::equal(data.begin(), data.end(), expected.begin()));
  }
}

std::string temp_path(const std::string& stem) {
  return (std::filesystem::temp_directory_path() / (stem + "." + std::to_string(::getpid()) + ".gguf")).string();
}

}  // namespace

TEST_CASE("gguf round trip keeps every value type, array type and tensor") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const auto kv = random_metadata(rng);
  for (uint32_t alignment : {32u, 64u, 1u, 4096u}) {
    CAPTURE(alignment);
    const Writer w = make_writer(kv, alignment);
    const auto image = w.write_to_memory([&](size_t i, std::span<std::byte> dst) { fill_pattern(seed, i, dst); });
    check_file(File::from_bytes(image), kv, alignment, seed);
  }
}

TEST_CASE("gguf file written with several threads equals the in-memory image and reads back") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const auto kv = random_metadata(rng);
  const Writer w = make_writer(kv, 64);
  const auto fill = [&](size_t i, std::span<std::byte> dst) { fill_pattern(seed, i, dst); };
  const auto image = w.write_to_memory(fill);
  const std::string path = temp_path("latte_gguf_roundtrip");
  for (unsigned threads : {1u, 4u}) {
    CAPTURE(threads);
    w.write(path, fill, threads);
    CHECK_FALSE(std::filesystem::exists(path + ".partial"));
    CHECK(latte::test::read_binary_file(path) == image);
    check_file(File::open(path), kv, 64, seed);
  }
  std::filesystem::remove(path);
}

TEST_CASE("gguf writer removes the partial file and keeps the old one when a fill fails") {
  const std::string path = temp_path("latte_gguf_fill_fails");
  { std::ofstream(path) << "previous"; }
  Writer w;
  w.add_tensor("a", GgmlType::f32, {4});
  w.add_tensor("b", GgmlType::f32, {4});
  const auto failing = [](size_t i, std::span<std::byte>) {
    if (i == 1) throw latte::Error(latte::ErrorCode::cancelled, "stop");
  };
  CHECK_THROWS_WITH_AS(w.write(path, failing, 2), "stop", latte::Error);
  CHECK_FALSE(std::filesystem::exists(path + ".partial"));
  CHECK(latte::test::read_binary_file(path).size() == std::string("previous").size());
  std::filesystem::remove(path);
}

TEST_CASE("gguf writer output matches an image encoded by hand from the format description") {
  Writer w;
  w.set("general.architecture", "deepseek2");
  w.set("x.count", uint32_t{7});
  w.set("x.list", Array(std::vector<std::string>{"ab", ""}));
  w.set("x.flags", Array(std::vector<bool>{true, false}));
  w.set("x.count", uint32_t{9});  // replacing keeps the first position
  w.add_tensor("w", GgmlType::q8_0, {32, 2});
  w.add_tensor("v", GgmlType::f32, {3});
  const auto image = w.write_to_memory([](size_t i, std::span<std::byte> dst) {
    for (size_t k = 0; k < dst.size(); ++k) dst[k] = static_cast<std::byte>(i * 100 + k);
  });

  latte::test::GgufBytes b;
  b.raw("GGUF").u32(3).u64(2).u64(4);
  b.str("general.architecture").u32(8).str("deepseek2");
  b.str("x.count").u32(4).u32(9);
  b.str("x.list").u32(9).u32(8).u64(2).str("ab").str("");
  b.str("x.flags").u32(9).u32(7).u64(2).u8(1).u8(0);
  b.str("w").u32(2).u64(32).u64(2).u32(8).u64(0);
  b.str("v").u32(1).u64(3).u32(0).u64(96);  // 2 rows x 34 bytes = 68, padded to 96
  b.pad(32);
  for (size_t k = 0; k < 68; ++k) b.u8(static_cast<uint8_t>(k));
  b.pad(32);
  for (size_t k = 0; k < 12; ++k) b.u8(static_cast<uint8_t>(100 + k));
  b.pad(32);
  CHECK(image == b.bytes);
}

TEST_CASE("gguf typed lookups convert integers that fit and reject other types") {
  Writer w;
  w.set("u8", uint8_t{200});
  w.set("i64", int64_t{-5});
  w.set("big", uint64_t{1} << 40);
  w.set("f", 0.5f);
  w.set("s", "text");
  w.set("scores", Array(std::vector<float>{1.5f, -2.f}));
  const auto f = File::from_bytes(w.write_to_memory({}));
  CHECK(f.get<uint32_t>("u8") == 200);
  CHECK(f.get<int8_t>("i64") == -5);
  CHECK(f.get<double>("f") == 0.5);
  CHECK(f.get<std::string>("s") == "text");
  CHECK(f.get_or<uint32_t>("absent", 3) == 3);
  CHECK(f.get_array<float>("scores").size() == 2);
  CHECK(f.get_array<float>("scores")[1] == -2.f);
  const auto code_of = [](auto&& fn) {
    try {
      fn();
    } catch (const latte::Error& e) {
      return e.code();
    }
    return latte::ErrorCode::internal;
  };
  CHECK(code_of([&] { (void)f.get<uint32_t>("absent"); }) == latte::ErrorCode::not_found);
  CHECK(code_of([&] { (void)f.get<uint32_t>("i64"); }) == latte::ErrorCode::invalid_file);
  CHECK(code_of([&] { (void)f.get<int32_t>("big"); }) == latte::ErrorCode::invalid_file);
  CHECK(code_of([&] { (void)f.get<uint32_t>("s"); }) == latte::ErrorCode::invalid_file);
  CHECK(code_of([&] { (void)f.get_strings("scores"); }) == latte::ErrorCode::invalid_file);
  CHECK(code_of([&] { (void)f.get_array<int32_t>("scores"); }) == latte::ErrorCode::invalid_file);
  CHECK_THROWS_WITH((void)f.get<uint32_t>("s"), doctest::Contains("'s' is string, expected u32"));
}

TEST_CASE("gguf writer rejects bad declarations with invalid_argument") {
  Writer w;
  w.add_tensor("t", GgmlType::f32, {4});
  const auto code_of = [](auto&& fn) {
    try {
      fn();
    } catch (const latte::Error& e) {
      return e.code();
    }
    return latte::ErrorCode::internal;
  };
  const auto bad = latte::ErrorCode::invalid_argument;
  CHECK(code_of([&] { w.add_tensor("t", GgmlType::f32, {4}); }) == bad);
  CHECK(code_of([&] { w.add_tensor("", GgmlType::f32, {4}); }) == bad);
  CHECK(code_of([&] { w.add_tensor(std::string(64, 'n'), GgmlType::f32, {4}); }) == bad);
  CHECK(code_of([&] { w.add_tensor("z", GgmlType::f32, {4, 0}); }) == bad);
  CHECK(code_of([&] { w.add_tensor("5d", GgmlType::f32, {1, 1, 1, 1, 1}); }) == bad);
  CHECK(code_of([&] { w.add_tensor("q", GgmlType::q4_k, {128}); }) == bad);
  CHECK(code_of([&] { w.add_tensor("o", GgmlType::f32, {uint64_t{1} << 40, uint64_t{1} << 40}); }) == bad);
  CHECK(code_of([&] { w.add_tensor("r", static_cast<GgmlType>(4), {32}); }) == bad);
  CHECK(code_of([&] { w.set_alignment(48); }) == bad);
  CHECK(code_of([&] { (void)w.write_to_memory({}); }) == bad);
  CHECK(code_of([&] { w.set("general.alignment", uint64_t{64}); }) == bad);
  Array inconsistent(std::vector<float>{1.f});
  inconsistent.element_type = ValueType::u32;
  CHECK(code_of([&] { w.set("bad", Value(inconsistent)); }) == bad);
}
