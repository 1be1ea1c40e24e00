// libFuzzer harness: the safetensors reader on arbitrary bytes. Every tensor view is read end to end
// so that a view outside the image is caught by AddressSanitizer.
#include "convert/safetensors.hpp"

#include <latte/error.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::byte> image(size);
  if (size > 0) std::memcpy(image.data(), data, size);
  try {
    const latte::safetensors::File file = latte::safetensors::File::from_bytes(std::move(image), "fuzz.safetensors");
    uint64_t sink = 0;
    for (const latte::safetensors::TensorView& tensor : file.tensors()) {
      if (file.find(tensor.name) == nullptr) __builtin_trap();
      if (tensor.bytes.size() != tensor.n_elements * latte::safetensors::dtype_size(tensor.dtype)) __builtin_trap();
      for (std::byte b : tensor.bytes) sink += static_cast<uint8_t>(b);
      sink += tensor.shape_string().size();
    }
    for (const auto& [key, value] : file.metadata()) sink += key.size() + value.size();
    volatile uint64_t keep = sink;
    (void)keep;
  } catch (const latte::Error&) {
  }
  return 0;
}
