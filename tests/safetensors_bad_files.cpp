// Malformed safetensors files and checkpoints are rejected with errors that name the file, the
// tensor and the field at fault.
#include "convert/safetensors.hpp"
#include "support/safetensors_writer.hpp"
#include "support/temp_dir.hpp"

#include <latte/error.hpp>

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace {

using latte::ErrorCode;

// Parses `image` and returns the error it raises (fails the test when it parses).
latte::Error parse_error(const std::vector<std::byte>& image) {
  try {
    (void)latte::safetensors::File::from_bytes(image, "bad.safetensors");
  } catch (const latte::Error& e) {
    return e;
  }
  FAIL("the malformed file was accepted");
  return latte::Error(ErrorCode::internal, "unreachable");
}

std::vector<std::byte> zeros(size_t n) { return std::vector<std::byte>(n, std::byte{0}); }

void check_rejected(const std::string& header, size_t data_bytes, const std::vector<std::string>& message_parts,
                    ErrorCode code = ErrorCode::invalid_file) {
  const auto e = parse_error(latte::test::safetensors_image(header, zeros(data_bytes)));
  CHECK(e.code() == code);
  const std::string what = e.what();
  CHECK_MESSAGE(what.find("bad.safetensors") != std::string::npos, what);
  for (const auto& part : message_parts) CHECK_MESSAGE(what.find(part) != std::string::npos, what);
}

}  // namespace

TEST_CASE("safetensors reader rejects truncated files and oversized headers") {
  SUBCASE("shorter than the length prefix") {
    const auto e = parse_error(zeros(5));
    CHECK(e.code() == ErrorCode::invalid_file);
    CHECK(std::string(e.what()).find("truncated") != std::string::npos);
  }
  SUBCASE("header length past the end of the file") {
    const auto e = parse_error(latte::test::safetensors_image("{}", {}, 4096));
    CHECK(e.code() == ErrorCode::invalid_file);
    CHECK(std::string(e.what()).find("4096") != std::string::npos);
  }
  SUBCASE("header length above 100 MB") {
    const auto e = parse_error(latte::test::safetensors_image("{}", {}, 100'000'001));
    CHECK(e.code() == ErrorCode::invalid_file);
    CHECK(std::string(e.what()).find("exceeds") != std::string::npos);
  }
  SUBCASE("data cut short after the header") {
    check_rejected(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 10,
                   {"'w'", "data_offsets [0, 16]", "10 bytes"});
  }
}

TEST_CASE("safetensors reader rejects bad JSON and bad header structure") {
  check_rejected(R"({"w":{"dtype":"F32",)", 0, {"not valid JSON"});
  check_rejected(R"([1,2,3])", 0, {"not an object"});
  check_rejected(R"({"w":[1]})", 0, {"'w'", "not an object"});
  check_rejected(
      R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
      8, {"'w'", "twice"});
  check_rejected(R"({"__metadata__":{"format":1}})", 0, {"__metadata__", "format"});
  check_rejected(R"({"__metadata__":[]})", 0, {"__metadata__"});
}

TEST_CASE("safetensors reader rejects bad dtype, shape and data_offsets fields") {
  check_rejected(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", 4, {"'w'", "dtype"});
  check_rejected(R"({"w":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})", 4, {"'w'", "dtype"});
  check_rejected(R"({"w":{"dtype":"F7","shape":[1],"data_offsets":[0,4]}})", 4, {"'w'", "unknown dtype", "F7"});
  check_rejected(R"({"w":{"dtype":"U32","shape":[1],"data_offsets":[0,4]}})", 4, {"'w'", "U32"},
                 ErrorCode::unsupported);
  check_rejected(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", 4, {"'w'", "shape"});
  check_rejected(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4, {"'w'", "shape", "negative"});
  check_rejected(R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4, {"'w'", "shape"});
  check_rejected(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", 4, {"'w'", "64"});
  check_rejected(R"({"w":{"dtype":"F32","shape":[1]}})", 4, {"'w'", "data_offsets"});
  check_rejected(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4, {"'w'", "data_offsets"});
  check_rejected(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 4, {"'w'", "begin after end"});
  check_rejected(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4, {"'w'", "past the data section"});
  check_rejected(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8, {"'w'", "needs 12"});
  check_rejected(R"({"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,4]}})", 8, {"'w'", "needs 8"});
}

TEST_CASE("safetensors reader rejects tensors whose bytes overlap") {
  check_rejected(
      R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})",
      20, {"'b'", "'a'", "inside"});
  // Touching ranges and empty tensors are fine.
  const auto ok = latte::safetensors::File::from_bytes(
      latte::test::safetensors_image(
          R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[0],"data_offsets":[8,8]},"c":{"dtype":"F32","shape":[1],"data_offsets":[16,20]}})",
          zeros(20)),
      "ok");
  CHECK(ok.tensors().size() == 3);
}

TEST_CASE("safetensors checkpoint rejects inconsistent shard indexes") {
  latte::test::TempDir dir;
  latte::test::SafetensorsWriter shard;
  const std::vector<float> v{1.0f};
  shard.add_f32("a", {1}, v);
  shard.add_f32("b", {1}, v);
  shard.write(dir.file("model-1.safetensors"));
  const auto expect_error = [&](const std::string& index, const std::string& part, ErrorCode code) {
    latte::test::write_text_file(dir.file("model.safetensors.index.json"), index);
    try {
      (void)latte::safetensors::Checkpoint::open(dir.path());
      FAIL("accepted: " << index);
    } catch (const latte::Error& e) {
      CHECK(e.code() == code);
      CHECK_MESSAGE(std::string(e.what()).find(part) != std::string::npos, std::string(e.what()));
    }
  };
  expect_error("{", "not valid JSON", ErrorCode::invalid_file);
  expect_error(R"({"metadata":{}})", "weight_map", ErrorCode::invalid_file);
  expect_error(R"({"weight_map":{"a":"model-1.safetensors","b":"model-2.safetensors"}})", "model-2.safetensors",
               ErrorCode::invalid_file);
  expect_error(R"({"weight_map":{"a":"model-1.safetensors","b":"model-1.safetensors","c":"model-1.safetensors"}})",
               "'c'", ErrorCode::invalid_file);
  expect_error(R"({"weight_map":{"a":"model-1.safetensors"}})", "'b'", ErrorCode::invalid_file);
  expect_error(R"({"weight_map":{"a":"../model-1.safetensors","b":"model-1.safetensors"}})", "../model-1",
               ErrorCode::invalid_file);
}

TEST_CASE("safetensors checkpoint rejects a tensor present in two shards and empty folders") {
  latte::test::TempDir dir;
  CHECK_THROWS_AS(latte::safetensors::Checkpoint::open(dir.path()), latte::Error);
  latte::test::SafetensorsWriter shard;
  const std::vector<float> v{1.0f};
  shard.add_f32("a", {1}, v);
  shard.write(dir.file("model-1.safetensors"));
  shard.write(dir.file("model-2.safetensors"));
  try {
    (void)latte::safetensors::Checkpoint::open(dir.path());
    FAIL("accepted a duplicated tensor");
  } catch (const latte::Error& e) {
    CHECK(e.code() == ErrorCode::invalid_file);
    CHECK(std::string(e.what()).find("'a'") != std::string::npos);
  }
}
