#include "model/fingerprint.hpp"

#include "core/stream_hash.hpp"

#include <cstring>
#include <string>
#include <type_traits>
#include <variant>

namespace latte::detail {

namespace {

constexpr uint64_t kSampleBytes = 64;  // bytes hashed at the start, middle and end of each tensor

template <class T>
void hash_scalar(StreamHash64& h, const T& v) {
  if constexpr (std::is_same_v<T, std::string>) {
    h.update_string(v);
  } else if constexpr (std::is_same_v<T, bool>) {
    h.update_u64(v ? 1 : 0);
  } else {
    uint64_t bits = 0;  // every scalar type fits in 8 bytes; floats keep their bit pattern
    std::memcpy(&bits, &v, sizeof v);
    h.update_u64(bits);
  }
}

void hash_value(StreamHash64& h, const gguf::Value& value) {
  h.update_u64(static_cast<uint64_t>(value.type()));
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, gguf::Array>) {
          h.update_u64(static_cast<uint64_t>(v.element_type));
          h.update_u64(v.size());
          std::visit(
              [&](const auto& elements) {
                for (const auto& e : elements)
                  hash_scalar(h, static_cast<typename std::decay_t<decltype(elements)>::value_type>(e));
              },
              v.values);
        } else {
          hash_scalar(h, v);
        }
      },
      value.storage());
}

void hash_sample(StreamHash64& h, std::span<const std::byte> data, uint64_t offset) {
  const uint64_t n = data.size() - offset < kSampleBytes ? data.size() - offset : kSampleBytes;
  h.update(data.subspan(offset, n));
}

}  // namespace

uint64_t model_fingerprint(const gguf::File& file) {
  StreamHash64 h(0x6c61747465ull);  // "latte"
  h.update_u64(file.metadata().size());
  for (const gguf::KeyValue& kv : file.metadata()) {
    h.update_string(kv.key);
    hash_value(h, kv.value);
  }
  h.update_u64(file.tensors().size());
  for (const gguf::TensorInfo& t : file.tensors()) {
    h.update_string(t.name);
    h.update_u64(static_cast<uint64_t>(t.type));
    h.update_u64(t.n_dims);
    for (uint64_t ne : t.ne) h.update_u64(ne);
    h.update_u64(t.offset);
    h.update_u64(t.n_bytes);
    const std::span<const std::byte> data = file.tensor_data(t);
    if (data.empty()) continue;
    hash_sample(h, data, 0);
    hash_sample(h, data, data.size() / 2);
    hash_sample(h, data, data.size() > kSampleBytes ? data.size() - kSampleBytes : 0);
  }
  return h.digest();
}

}  // namespace latte::detail
