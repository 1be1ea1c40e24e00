// Where computation runs: the CPU or one CUDA device.
//
//   auto model = latte::Model::load("m.gguf", {.device = latte::Device::cuda(0)});
//   if (latte::Device::cuda_device_count() == 0) { /* CPU only */ }
#pragma once

#include <string>

namespace latte {

/// A compute device. Cheap to copy and compare.
struct Device {
  enum class Kind { cpu, cuda };
  Kind kind = Kind::cpu;
  int index = 0;  ///< CUDA device ordinal; 0 for the CPU

  /// The host CPU (Eigen, fp32): the numerical reference.
  static constexpr Device cpu() noexcept { return {Kind::cpu, 0}; }
  /// CUDA device `ordinal`.
  static constexpr Device cuda(int ordinal = 0) noexcept { return {Kind::cuda, ordinal}; }
  /// Parses "cpu", "cuda" or "cuda:N". Throws Error(invalid_argument) otherwise.
  static Device parse(const std::string& text);
  /// Number of CUDA devices usable by this build (0 when built without CUDA or with no driver).
  static int cuda_device_count() noexcept;

  [[nodiscard]] bool is_cpu() const noexcept { return kind == Kind::cpu; }
  [[nodiscard]] bool is_cuda() const noexcept { return kind == Kind::cuda; }
  /// "cpu" or "cuda:N".
  [[nodiscard]] std::string to_string() const;
  friend bool operator==(const Device&, const Device&) = default;
};

}  // namespace latte
