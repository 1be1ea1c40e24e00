// The safetensors reader: header parsing, every dtype, metadata, sharded checkpoints.
#include "convert/safetensors.hpp"
#include "support/safetensors_writer.hpp"
#include "support/temp_dir.hpp"

#include <latte/error.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <random>

namespace {

using latte::safetensors::Dtype;

std::vector<std::byte> random_bytes(std::mt19937& rng, size_t n) {
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(rng() & 0xFF);
  return out;
}

struct DtypeCase {
  const char* name;
  Dtype dtype;
  uint32_t size;
};
constexpr DtypeCase all_dtypes[] = {
    {"F64", Dtype::f64, 8},         {"F32", Dtype::f32, 4},         {"F16", Dtype::f16, 2}, {"BF16", Dtype::bf16, 2},
    {"F8_E4M3", Dtype::f8_e4m3, 1}, {"F8_E5M2", Dtype::f8_e5m2, 1}, {"I64", Dtype::i64, 8}, {"I32", Dtype::i32, 4},
    {"I16", Dtype::i16, 2},         {"I8", Dtype::i8, 1},           {"U8", Dtype::u8, 1},   {"BOOL", Dtype::boolean, 1},
};

}  // namespace

TEST_CASE("safetensors reader returns every dtype's shape and bytes unchanged") {
  std::mt19937 rng(std::random_device{}());
  latte::test::SafetensorsWriter writer;
  std::vector<std::vector<std::byte>> payloads;
  std::vector<std::vector<uint64_t>> shapes;
  for (const auto& c : all_dtypes) {
    const std::vector<uint64_t> shape{1 + rng() % 5, 1 + rng() % 7, 1 + rng() % 3};
    payloads.push_back(random_bytes(rng, shape[0] * shape[1] * shape[2] * c.size));
    shapes.push_back(shape);
    writer.add_raw(std::string("t.") + c.name, c.name, shape, payloads.back());
  }
  writer.set_metadata("format", "pt");
  const auto file = latte::safetensors::File::from_bytes(writer.image(), "all.safetensors");

  REQUIRE(file.tensors().size() == std::size(all_dtypes));
  CHECK(file.metadata().at("format") == "pt");
  for (size_t i = 0; i < std::size(all_dtypes); ++i) {
    const auto* t = file.find(std::string("t.") + all_dtypes[i].name);
    REQUIRE(t != nullptr);
    CHECK(t->dtype == all_dtypes[i].dtype);
    CHECK(latte::safetensors::dtype_size(t->dtype) == all_dtypes[i].size);
    CHECK(latte::safetensors::dtype_name(t->dtype) == all_dtypes[i].name);
    CHECK(t->shape == shapes[i]);
    CHECK(t->n_elements == shapes[i][0] * shapes[i][1] * shapes[i][2]);
    REQUIRE(t->bytes.size() == payloads[i].size());
    CHECK(std::memcmp(t->bytes.data(), payloads[i].data(), payloads[i].size()) == 0);
    CHECK(*t->file == "all.safetensors");
  }
  CHECK(file.find("absent") == nullptr);
}

TEST_CASE("safetensors reader accepts scalars, empty tensors and an unpadded header") {
  std::mt19937 rng(std::random_device{}());
  const auto scalar = random_bytes(rng, 4);
  const std::string header =
      R"({"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]},"e":{"dtype":"BF16","shape":[0,3],"data_offsets":[4,4]}})";
  const auto file = latte::safetensors::File::from_bytes(latte::test::safetensors_image(header, scalar), "x");
  const auto* s = file.find("s");
  REQUIRE(s != nullptr);
  CHECK(s->shape.empty());
  CHECK(s->n_elements == 1);
  CHECK(std::memcmp(s->bytes.data(), scalar.data(), 4) == 0);
  const auto* e = file.find("e");
  REQUIRE(e != nullptr);
  CHECK(e->n_elements == 0);
  CHECK(e->bytes.empty());
}

TEST_CASE("safetensors checkpoint resolves tensors through the shard index") {
  std::mt19937 rng(std::random_device{}());
  latte::test::TempDir dir;
  latte::test::SafetensorsWriter a, b;
  const auto pa = random_bytes(rng, 12), pb = random_bytes(rng, 8);
  a.add_raw("model.embed_tokens.weight", "F32", {3}, pa);
  b.add_raw("lm_head.weight", "BF16", {2, 2}, pb);
  a.write(dir.file("model-00001-of-00002.safetensors"));
  b.write(dir.file("model-00002-of-00002.safetensors"));
  latte::test::write_text_file(dir.file("model.safetensors.index.json"),
                               R"({"metadata":{"total_size":20},"weight_map":{
                                   "model.embed_tokens.weight":"model-00001-of-00002.safetensors",
                                   "lm_head.weight":"model-00002-of-00002.safetensors"}})");
  const auto ckpt = latte::safetensors::Checkpoint::open(dir.path());
  CHECK(ckpt.tensors().size() == 2);
  CHECK(ckpt.data_bytes() == 20);
  const auto& head = ckpt.at("lm_head.weight");
  CHECK(head.dtype == Dtype::bf16);
  CHECK(std::memcmp(head.bytes.data(), pb.data(), pb.size()) == 0);
  CHECK(head.file->ends_with("model-00002-of-00002.safetensors"));
  CHECK(ckpt.find("model.norm.weight") == nullptr);
  CHECK_THROWS_AS((void)ckpt.at("model.norm.weight"), latte::Error);
}

TEST_CASE("safetensors checkpoint without an index reads model*.safetensors") {
  latte::test::TempDir dir;
  latte::test::SafetensorsWriter a;
  const std::vector<float> v{1.0f, -2.0f};
  a.add_f32("x", {2}, v);
  a.write(dir.file("model.safetensors"));
  const auto ckpt = latte::safetensors::Checkpoint::open(dir.path());
  float got[2];
  std::memcpy(got, ckpt.at("x").bytes.data(), 8);
  CHECK(got[0] == 1.0f);
  CHECK(got[1] == -2.0f);
}
