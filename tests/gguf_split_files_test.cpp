// Split models (llama.cpp's gguf-split layout: PREFIX-00001-of-0000N.gguf, ... each a GGUF file with
// split.no / split.count / split.tensors.count, the model's metadata in the first): the test splits a
// random model itself with gguf::Writer, and the split model must load from its first file and compute
// bit-identical logits; every inconsistency between the files is an Error naming the file.
#include "model/presets.hpp"
#include "model/random_model.hpp"
#include "support/random_models.hpp"
#include "support/temp_dir.hpp"
#include "support/test_options.hpp"

#include <latte/error.hpp>
#include <latte/gguf.hpp>
#include <latte/model.hpp>

#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace {

std::string split_name(const std::string& prefix, int number, int count) {
  char suffix[48];
  std::snprintf(suffix, sizeof suffix, "-%05d-of-%05d.gguf", number + 1, count);
  return prefix + suffix;
}

struct SplitOptions {
  int count = 3;
  bool empty_first = false;  // gguf-split --no-tensor-first-split: the first file holds metadata only
  // called with (split number, writer) after the split keys are set: tests break the files here
  std::function<void(int, latte::gguf::Writer&)> edit{};
  // tensor i goes to this split (default: spread evenly, in order)
  std::function<int(size_t, size_t)> place{};
};

// Writes `source`'s tensors into `options.count` files PREFIX-0000k-of-0000N.gguf.
void write_splits(const latte::gguf::File& source, const std::string& prefix, const SplitOptions& options) {
  const auto tensors = source.tensors();
  const size_t n = tensors.size();
  const auto place = [&](size_t i) -> int {
    if (options.place) return options.place(i, n);
    const int first = options.empty_first ? 1 : 0;
    return first + static_cast<int>(i * static_cast<size_t>(options.count - first) / n);
  };
  for (int s = 0; s < options.count; ++s) {
    latte::gguf::Writer w;
    if (s == 0) {
      for (const auto& kv : source.metadata()) w.set(kv.key, kv.value);
    }
    w.set("split.no", static_cast<uint16_t>(s));
    w.set("split.count", static_cast<uint16_t>(options.count));
    w.set("split.tensors.count", static_cast<int32_t>(n));
    if (options.edit) options.edit(s, w);
    std::vector<const latte::gguf::TensorInfo*> mine;
    for (size_t i = 0; i < n; ++i) {
      if (place(i) != s) continue;
      mine.push_back(&tensors[i]);
      const auto& t = tensors[i];
      w.add_tensor(t.name, t.type, std::span<const uint64_t>(t.ne.data(), t.n_dims));
    }
    w.write(split_name(prefix, s, options.count), [&](size_t index, std::span<std::byte> dst) {
      const auto data = source.tensor_data(*mine[index]);
      REQUIRE(data.size() == dst.size());
      std::memcpy(dst.data(), data.data(), dst.size());
    });
  }
}

void expect_error(const std::string& path, latte::ErrorCode code, const std::string& part) {
  try {
    (void)latte::gguf::File::open(path);
    FAIL("opened " << path);
  } catch (const latte::Error& e) {
    CHECK(e.code() == code);
    CHECK_MESSAGE(std::string(e.what()).find(part) != std::string::npos, e.what());
  }
}

}  // namespace

TEST_CASE("a split model loads from its first file and computes the single file's logits") {
  const std::string backend = latte::test::attention_backend();
  latte::test::TempDir dir;
  const std::string single = dir.file("model.gguf");
  latte::write_random_model(latte::model_preset("test-v3"), single, {.seed = 11});
  const auto source = latte::gguf::File::open(single);
  const latte::Model whole = latte::Model::load(single);
  const auto tokens = latte::test::fresh_tokens(12, whole.config().n_vocab);
  const auto expected = latte::test::all_logits(whole, backend, tokens);

  for (const bool empty_first : {false, true}) {
    for (const int count : {2, 3}) {
      CAPTURE(empty_first);
      CAPTURE(count);
      std::string name = empty_first ? "empty-first-" : "m";
      name += std::to_string(count);
      const std::string prefix = dir.file(name);
      write_splits(source, prefix, {.count = count, .empty_first = empty_first});
      const auto split = latte::gguf::File::open(split_name(prefix, 0, count));
      CHECK(split.split_count() == static_cast<uint32_t>(count));
      REQUIRE(split.tensors().size() == source.tensors().size());
      bool later = false;
      for (const auto& t : source.tensors()) {
        const auto* u = split.find_tensor(t.name);
        REQUIRE(u != nullptr);
        later = later || u->split > 0;
        const auto a = source.tensor_data(t), b = split.tensor_data(*u);
        REQUIRE(a.size() == b.size());
        CHECK(std::memcmp(a.data(), b.data(), a.size()) == 0);
      }
      CHECK(later);
      const latte::Model model = latte::Model::load(split_name(prefix, 0, count));
      CHECK(latte::test::all_logits(model, backend, tokens) == expected);
    }
  }
}

TEST_CASE("split files that disagree, are missing or are opened out of order are refused by name") {
  latte::test::TempDir dir;
  const std::string single = dir.file("model.gguf");
  latte::write_random_model(latte::model_preset("test-v2-lite"), single, {.seed = 3});
  const auto source = latte::gguf::File::open(single);
  const size_t n = source.tensors().size();
  int case_number = 0;
  const auto make = [&](SplitOptions options) {
    std::string name = "case";
    name += std::to_string(case_number++);
    const std::string prefix = dir.file(name);
    write_splits(source, prefix, options);
    return prefix;
  };

  {
    // a later file: the error names the first
    const std::string p = make({});
    expect_error(split_name(p, 1, 3), latte::ErrorCode::invalid_argument, split_name(p, 0, 3));
    std::filesystem::remove(split_name(p, 2, 3));
    expect_error(split_name(p, 0, 3), latte::ErrorCode::not_found, split_name(p, 2, 3));
  }
  {
    // the second file says it is the third
    const std::string p = make({.edit = [](int s, latte::gguf::Writer& w) {
      if (s == 1) w.set("split.no", static_cast<uint16_t>(2));
    }});
    expect_error(split_name(p, 0, 3), latte::ErrorCode::invalid_file, "split 2 of 3 was expected");
  }
  {
    // the third file belongs to a model of 4 files
    const std::string p = make({.edit = [](int s, latte::gguf::Writer& w) {
      if (s == 2) w.set("split.count", static_cast<uint16_t>(4));
    }});
    expect_error(split_name(p, 0, 3), latte::ErrorCode::invalid_file, split_name(p, 2, 3));
  }
  {
    // one tensor in two files
    const std::string p = make({.place = [](size_t i, size_t total) { return i == total - 1 ? 2 : (i < 3 ? 0 : 1); }});
    latte::gguf::Writer w;
    w.set("split.no", static_cast<uint16_t>(2));
    w.set("split.count", static_cast<uint16_t>(3));
    const auto& first = source.tensors()[0];
    const auto& last = source.tensors()[n - 1];
    w.add_tensor(first.name, first.type, std::span<const uint64_t>(first.ne.data(), first.n_dims));
    w.add_tensor(last.name, last.type, std::span<const uint64_t>(last.ne.data(), last.n_dims));
    w.write(split_name(p, 2, 3), [&](size_t index, std::span<std::byte> dst) {
      const auto data = source.tensor_data(index == 0 ? first : last);
      std::memcpy(dst.data(), data.data(), dst.size());
    });
    std::string part = first.name;
    part += "' is in split";
    expect_error(split_name(p, 0, 3), latte::ErrorCode::invalid_file, part);
  }
  {
    // split.tensors.count against the tensors found
    const std::string p = make({.edit = [&](int s, latte::gguf::Writer& w) {
      if (s == 0) w.set("split.tensors.count", static_cast<int32_t>(n + 1));
    }});
    expect_error(split_name(p, 0, 3), latte::ErrorCode::invalid_file,
                 "split.tensors.count is " + std::to_string(n + 1));
  }
  {
    // a split file under another name cannot name the others
    const std::string p = make({});
    std::filesystem::rename(split_name(p, 0, 3), dir.file("renamed.gguf"));
    expect_error(dir.file("renamed.gguf"), latte::ErrorCode::invalid_file, "-00001-of-00003.gguf");
    // nor can an image in memory
    const std::vector<std::byte> bytes = latte::test::read_binary_file(dir.file("renamed.gguf"));
    try {
      (void)latte::gguf::File::from_bytes(bytes, "image");
      FAIL("parsed a split file from memory");
    } catch (const latte::Error& e) {
      CHECK(e.code() == latte::ErrorCode::unsupported);
    }
  }
  {
    // split.no outside split.count
    const std::string p = make({.count = 2, .edit = [](int s, latte::gguf::Writer& w) {
                                  if (s == 0) w.set("split.no", static_cast<uint16_t>(5));
                                }});
    expect_error(split_name(p, 0, 2), latte::ErrorCode::invalid_file, "split.no 5 of split.count 2");
  }
  {
    // a model whose split.count is 1 is one file, whatever its name
    latte::gguf::Writer w;
    for (const auto& kv : source.metadata()) w.set(kv.key, kv.value);
    w.set("split.no", static_cast<uint16_t>(0));
    w.set("split.count", static_cast<uint16_t>(1));
    for (const auto& t : source.tensors())
      w.add_tensor(t.name, t.type, std::span<const uint64_t>(t.ne.data(), t.n_dims));
    w.write(dir.file("one.gguf"), [&](size_t index, std::span<std::byte> dst) {
      const auto data = source.tensor_data(source.tensors()[index]);
      std::memcpy(dst.data(), data.data(), dst.size());
    });
    CHECK_NOTHROW((void)latte::Model::load(dir.file("one.gguf")));
  }
}
