// Builds modified copies of GGUF images for tests: drop, replace or add metadata keys and tensors.
//
//   auto bytes = latte::test::GgufRewrite(file).drop_key("deepseek2.expert_count").bytes();
#pragma once

#include <latte/gguf.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace latte::test {

/// A copy of a parsed file with edits; bytes() serialises it.
class GgufRewrite {
 public:
  explicit GgufRewrite(const gguf::File& file) : file_(file) {}

  GgufRewrite& drop_key(const std::string& key) {
    dropped_keys_.insert(key);
    return *this;
  }
  GgufRewrite& set_key(const std::string& key, gguf::Value value) {
    keys_[key] = std::move(value);
    return *this;
  }
  GgufRewrite& drop_tensor(const std::string& name) {
    dropped_tensors_.insert(name);
    return *this;
  }
  GgufRewrite& rename_tensor(const std::string& from, const std::string& to) {
    renamed_[from] = to;
    return *this;
  }
  /// Adds an f32 tensor of zeros.
  GgufRewrite& add_tensor(const std::string& name, std::vector<uint64_t> ne) {
    added_.push_back({name, std::move(ne)});
    return *this;
  }

  [[nodiscard]] std::vector<std::byte> bytes() const;

 private:
  struct Added {
    std::string name;
    std::vector<uint64_t> ne;
  };
  const gguf::File& file_;
  std::set<std::string> dropped_keys_, dropped_tensors_;
  std::map<std::string, gguf::Value> keys_;
  std::map<std::string, std::string> renamed_;
  std::vector<Added> added_;
};

}  // namespace latte::test
