// libFuzzer harness: the GGUF reader on arbitrary bytes. Every accessor is exercised on whatever
// parses; anything other than a latte::Error (a crash, a sanitizer report, another exception, an
// allocation beyond -malloc_limit_mb) is a finding.
#include <latte/error.hpp>
#include <latte/gguf.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <variant>

namespace {

// Reads every byte of `bytes` so that an out-of-bounds span is caught by AddressSanitizer.
uint8_t fold(std::span<const std::byte> bytes) {
  uint8_t acc = 0;
  for (std::byte b : bytes) acc ^= static_cast<uint8_t>(b);
  return acc;
}

void walk(const latte::gguf::File& file) {
  volatile uint64_t sink = file.file_size() + file.alignment() + file.data_offset() + file.version();
  for (const latte::gguf::KeyValue& kv : file.metadata()) {
    const latte::gguf::Value* found = file.find(kv.key);
    if (found == nullptr) __builtin_trap();  // every listed key must be found
    sink = sink + kv.value.as_int().value_or(0) + static_cast<uint64_t>(kv.value.as_number().value_or(0.0) != 0.0);
    if (const auto* array = kv.value.get_if<latte::gguf::Array>()) {
      sink = sink + array->size();
      try {
        const latte::gguf::Array& same = file.get_array_value(kv.key);
        sink = sink + same.size();
        if (array->element_type == latte::gguf::ValueType::string) sink = sink + file.get_strings(kv.key).size();
        if (array->element_type == latte::gguf::ValueType::f32) sink = sink + file.get_array<float>(kv.key).size();
        if (array->element_type == latte::gguf::ValueType::i32) sink = sink + file.get_array<int32_t>(kv.key).size();
      } catch (const latte::Error&) {
      }
    }
    try {
      sink = sink + file.get<std::string>(kv.key).size();
    } catch (const latte::Error&) {
    }
    try {
      sink = sink + file.get<uint32_t>(kv.key);
    } catch (const latte::Error&) {
    }
  }
  for (const latte::gguf::TensorInfo& tensor : file.tensors()) {
    if (file.find_tensor(tensor.name) == nullptr) __builtin_trap();
    const std::span<const std::byte> data = file.tensor_data(tensor);
    if (data.size() != tensor.n_bytes) __builtin_trap();
    sink = sink + fold(data) + tensor.n_elements() + tensor.shape_string().size();
  }
  (void)sink;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const latte::gguf::File file =
        latte::gguf::File::from_bytes(std::as_bytes(std::span<const uint8_t>(data, size)), "fuzz.gguf");
    walk(file);
  } catch (const latte::Error&) {
  }
  return 0;
}
