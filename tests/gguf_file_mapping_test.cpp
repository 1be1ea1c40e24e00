// gguf::FileMapping: the whole file's bytes in both access modes, empty files, errors that name the
// file and the failing call, and release() of consumed ranges (the bytes stay readable).
#include "gguf/file_mapping.hpp"
#include "support/temp_dir.hpp"

#include <latte/error.hpp>

#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace {

using latte::gguf::FileMapping;
using latte::gguf::MappingAccess;

std::vector<std::byte> write_random_file(const std::string& path, size_t n, std::mt19937& rng) {
  std::vector<std::byte> bytes(n);
  for (auto& b : bytes) b = static_cast<std::byte>(rng() & 0xFF);
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(n));
  REQUIRE(out.good());
  return bytes;
}

bool same_bytes(std::span<const std::byte> a, const std::vector<std::byte>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

// The latte::Error thrown by mapping `path`, or a failed check when none is thrown.
latte::Error mapping_error(const std::string& path) {
  try {
    FileMapping map(path);
  } catch (const latte::Error& e) {
    return e;
  }
  FAIL("mapping " << path << " did not throw");
  return latte::Error(latte::ErrorCode::internal, "unreachable");
}

}  // namespace

TEST_CASE("file mapping returns the file's bytes for random and sequential access") {
  const auto seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  latte::test::TempDir dir;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t n = 3 * page + 1 + rng() % page;
  const std::vector<std::byte> expected = write_random_file(dir.file("weights.bin"), n, rng);
  for (const MappingAccess access : {MappingAccess::random, MappingAccess::sequential}) {
    const FileMapping map(dir.file("weights.bin"), access);
    CHECK(same_bytes(map.bytes(), expected));
  }
  FileMapping first(dir.file("weights.bin"));
  FileMapping second(std::move(first));
  CHECK(first.bytes().empty());  // a moved-from mapping is empty
  CHECK(same_bytes(second.bytes(), expected));
  FileMapping third(dir.file("weights.bin"), MappingAccess::sequential);
  third = std::move(second);
  CHECK(same_bytes(third.bytes(), expected));
}

TEST_CASE("file mapping of an empty file is an empty span") {
  latte::test::TempDir dir;
  latte::test::write_text_file(dir.file("empty.bin"), "");
  for (const MappingAccess access : {MappingAccess::random, MappingAccess::sequential}) {
    const FileMapping map(dir.file("empty.bin"), access);
    CHECK(map.bytes().empty());
    map.release(map.bytes());  // nothing to release: ignored
  }
}

TEST_CASE("file mapping errors name the file and the failing call") {
  latte::test::TempDir dir;
  const latte::Error missing = mapping_error(dir.file("absent.gguf"));
  CHECK(missing.code() == latte::ErrorCode::not_found);
  CHECK(std::string(missing.what()) == dir.file("absent.gguf") + ": no such file");

  const latte::Error directory = mapping_error(dir.path());
  CHECK(directory.code() == latte::ErrorCode::io);
  CHECK(std::string(directory.what()) == dir.path() + ": not a regular file");

  // A regular file used as a directory: open() fails with ENOTDIR, not ENOENT.
  latte::test::write_text_file(dir.file("plain.txt"), "x");
  const std::string through_file = dir.file("plain.txt") + "/model.gguf";
  const latte::Error not_dir = mapping_error(through_file);
  CHECK(not_dir.code() == latte::ErrorCode::io);
  CHECK(std::string(not_dir.what()) == through_file + ": cannot open: " + std::strerror(ENOTDIR));
}

TEST_CASE("file mapping release drops consumed ranges and the bytes stay readable") {
  const auto seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  latte::test::TempDir dir;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t n = 5 * page + rng() % page;
  const std::vector<std::byte> expected = write_random_file(dir.file("shard.safetensors"), n, rng);
  const FileMapping map(dir.file("shard.safetensors"), MappingAccess::sequential);
  const std::span<const std::byte> bytes = map.bytes();
  REQUIRE(same_bytes(bytes, expected));

  // Ranges not aligned to pages, a range inside one page, the whole file, and ranges that are not
  // (wholly) inside the mapping, which must be ignored.
  const size_t begin = 1 + rng() % (page - 1);
  map.release(bytes.subspan(begin, 2 * page + 17));
  map.release(bytes.subspan(page + 3, page / 2));
  map.release(bytes.subspan(0, 0));
  map.release(bytes.last(1));
  const std::vector<std::byte> elsewhere(3 * page);
  map.release(elsewhere);
  map.release(std::span<const std::byte>(bytes.data() + page, n));  // runs past the end
  CHECK(same_bytes(bytes, expected));
  map.release(bytes);
  CHECK(same_bytes(bytes, expected));  // re-read from the file after the pages were dropped
}
