// A minimal safetensors reader for tests (the oracle fixtures): the JSON header and the raw bytes.
//
//   latte::test::Safetensors st("model.safetensors");
//   std::vector<float> w = st.floats("model.norm.weight");
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace latte::test {

/// One tensor of a safetensors file.
struct SafeTensor {
  std::string dtype;            ///< "BF16", "F32", "I32", ...
  std::vector<uint64_t> shape;  ///< outermost first (PyTorch order)
  std::span<const std::byte> data;
};

/// A whole safetensors file in memory. Throws std::runtime_error on malformed input.
class Safetensors {
 public:
  explicit Safetensors(const std::string& path);
  [[nodiscard]] const std::map<std::string, SafeTensor>& tensors() const noexcept { return tensors_; }
  [[nodiscard]] const SafeTensor& at(const std::string& name) const;
  [[nodiscard]] bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  /// The tensor's values as floats (BF16, F16 or F32).
  [[nodiscard]] std::vector<float> floats(const std::string& name) const;
  /// The tensor's values as int32 (I32 or I64).
  [[nodiscard]] std::vector<int32_t> ints(const std::string& name) const;

 private:
  std::vector<std::byte> bytes_;
  std::map<std::string, SafeTensor> tensors_;
};

}  // namespace latte::test
