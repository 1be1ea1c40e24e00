#include "support/gguf_rewrite.hpp"

#include <cstdint>
#include <cstring>

namespace latte::test {

std::vector<std::byte> GgufRewrite::bytes() const {
  gguf::Writer w;
  for (const auto& kv : file_.metadata()) {
    if (kv.key == "general.alignment" || dropped_keys_.contains(kv.key)) continue;
    const auto it = keys_.find(kv.key);
    w.set(kv.key, it != keys_.end() ? it->second : kv.value);
  }
  for (const auto& [key, value] : keys_) {
    if (!file_.find(key)) w.set(key, value);
  }
  std::vector<const gguf::TensorInfo*> sources;  // nullptr for an added tensor
  for (const auto& t : file_.tensors()) {
    if (dropped_tensors_.contains(t.name)) continue;
    const auto it = renamed_.find(t.name);
    w.add_tensor(it != renamed_.end() ? it->second : t.name, t.type, std::span<const uint64_t>(t.ne.data(), t.n_dims));
    sources.push_back(&t);
  }
  for (const auto& a : added_) {
    w.add_tensor(a.name, GgmlType::f32, a.ne);
    sources.push_back(nullptr);
  }
  return w.write_to_memory([&](size_t i, std::span<std::byte> dst) {
    if (!sources[i]) {
      std::memset(dst.data(), 0, dst.size());
      return;
    }
    const auto src = file_.tensor_data(*sources[i]);
    std::memcpy(dst.data(), src.data(), dst.size());
  });
}

}  // namespace latte::test
