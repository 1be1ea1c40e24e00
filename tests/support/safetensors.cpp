#include "support/safetensors.hpp"

#include <latte/quant.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace latte::test {

Safetensors::Safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  in.seekg(0, std::ios::end);
  bytes_.resize(static_cast<size_t>(in.tellg()));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(bytes_.data()), static_cast<std::streamsize>(bytes_.size()));
  uint64_t header_size = 0;
  if (bytes_.size() < 8) throw std::runtime_error(path + ": too short");
  std::memcpy(&header_size, bytes_.data(), 8);
  if (header_size > bytes_.size() - 8) throw std::runtime_error(path + ": bad header size");
  const std::string header(reinterpret_cast<const char*>(bytes_.data()) + 8, header_size);
  const auto json = nlohmann::json::parse(header);
  const size_t base = 8 + header_size;
  for (const auto& [name, info] : json.items()) {
    if (name == "__metadata__") continue;
    SafeTensor t;
    t.dtype = info.at("dtype").get<std::string>();
    t.shape = info.at("shape").get<std::vector<uint64_t>>();
    const auto offsets = info.at("data_offsets").get<std::vector<uint64_t>>();
    if (offsets.size() != 2 || offsets[1] < offsets[0] || base + offsets[1] > bytes_.size()) {
      throw std::runtime_error(path + ": bad offsets for " + name);
    }
    t.data = std::span<const std::byte>(bytes_.data() + base + offsets[0], offsets[1] - offsets[0]);
    tensors_.emplace(name, std::move(t));
  }
}

const SafeTensor& Safetensors::at(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) throw std::runtime_error("no tensor " + name);
  return it->second;
}

std::vector<float> Safetensors::floats(const std::string& name) const {
  const SafeTensor& t = at(name);
  std::vector<float> out;
  if (t.dtype == "F32") {
    out.resize(t.data.size() / 4);
    std::memcpy(out.data(), t.data.data(), out.size() * 4);
  } else if (t.dtype == "BF16" || t.dtype == "F16") {
    out.resize(t.data.size() / 2);
    for (size_t i = 0; i < out.size(); ++i) {
      uint16_t h = 0;
      std::memcpy(&h, t.data.data() + 2 * i, 2);
      out[i] = t.dtype == "BF16" ? bf16_to_fp32(h) : fp16_to_fp32(h);
    }
  } else {
    throw std::runtime_error(name + ": dtype " + t.dtype + " is not a float type");
  }
  return out;
}

std::vector<int32_t> Safetensors::ints(const std::string& name) const {
  const SafeTensor& t = at(name);
  std::vector<int32_t> out;
  if (t.dtype == "I32") {
    out.resize(t.data.size() / 4);
    std::memcpy(out.data(), t.data.data(), out.size() * 4);
  } else if (t.dtype == "I64") {
    out.resize(t.data.size() / 8);
    for (size_t i = 0; i < out.size(); ++i) {
      int64_t v = 0;
      std::memcpy(&v, t.data.data() + 8 * i, 8);
      out[i] = static_cast<int32_t>(v);
    }
  } else {
    throw std::runtime_error(name + ": dtype " + t.dtype + " is not an integer type");
  }
  return out;
}

}  // namespace latte::test
