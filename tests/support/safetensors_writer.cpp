#include "support/safetensors_writer.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace latte::test {
namespace {

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

template <class T>
void append_le(std::vector<std::byte>& out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) {
    out.push_back(static_cast<std::byte>((static_cast<uint64_t>(value) >> (8 * i)) & 0xFF));
  }
}

}  // namespace

uint16_t to_bf16_bits(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

uint16_t to_f16_bits(float f) {
  // Through double arithmetic: scale into the half range and round to nearest even explicitly.
  const uint32_t sign = std::signbit(f) ? 0x8000u : 0u;
  const double a = std::fabs(static_cast<double>(f));
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7E00);
  if (a >= 65520.0) return static_cast<uint16_t>(sign | 0x7C00);
  if (a < std::ldexp(1.0, -14)) {  // subnormal: units of 2^-24
    const double units = std::nearbyint(a * std::ldexp(1.0, 24));
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(units));
  }
  int exponent = 0;
  const double mantissa = std::frexp(a, &exponent);            // a = mantissa * 2^exponent, [0.5, 1)
  double m = std::nearbyint((mantissa * 2.0 - 1.0) * 1024.0);  // 10 fraction bits
  int e = exponent - 1 + 15;
  if (m >= 1024.0) {
    m = 0;
    ++e;
  }
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7C00);
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(e) << 10) | static_cast<uint32_t>(m));
}

void SafetensorsWriter::add_raw(std::string name, std::string dtype, std::vector<uint64_t> shape,
                                std::vector<std::byte> data) {
  entries_.push_back({std::move(name), std::move(dtype), std::move(shape), std::move(data)});
}

void SafetensorsWriter::add_f32(std::string name, std::vector<uint64_t> shape, std::span<const float> values) {
  std::vector<std::byte> data;
  for (float v : values) append_le(data, std::bit_cast<uint32_t>(v));
  add_raw(std::move(name), "F32", std::move(shape), std::move(data));
}

void SafetensorsWriter::add_bf16(std::string name, std::vector<uint64_t> shape, std::span<const float> values) {
  std::vector<std::byte> data;
  for (float v : values) append_le(data, to_bf16_bits(v));
  add_raw(std::move(name), "BF16", std::move(shape), std::move(data));
}

void SafetensorsWriter::add_f16(std::string name, std::vector<uint64_t> shape, std::span<const float> values) {
  std::vector<std::byte> data;
  for (float v : values) append_le(data, to_f16_bits(v));
  add_raw(std::move(name), "F16", std::move(shape), std::move(data));
}

std::vector<std::string> SafetensorsWriter::names() const {
  std::vector<std::string> out;
  for (const auto& e : entries_) out.push_back(e.name);
  return out;
}

std::vector<std::byte> SafetensorsWriter::image() const {
  std::string header = "{";
  bool first = true;
  if (!metadata_.empty()) {
    header += "\"__metadata__\":{";
    for (auto it = metadata_.begin(); it != metadata_.end(); ++it) {
      if (it != metadata_.begin()) header += ',';
      header += quoted(it->first);
      header += ':';
      header += quoted(it->second);
    }
    header += "}";
    first = false;
  }
  uint64_t offset = 0;
  std::vector<std::byte> data;
  for (const auto& e : entries_) {
    if (!first) header += ',';
    header += quoted(e.name);
    header += ":{\"dtype\":";
    header += quoted(e.dtype);
    header += ",\"shape\":[";
    for (size_t i = 0; i < e.shape.size(); ++i) {
      if (i) header += ',';
      header += std::to_string(e.shape[i]);
    }
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + e.data.size()) + "]}";
    offset += e.data.size();
    data.insert(data.end(), e.data.begin(), e.data.end());
    first = false;
  }
  header += "}";
  while ((8 + header.size()) % 8 != 0) header += ' ';
  return safetensors_image(header, data);
}

void SafetensorsWriter::write(const std::string& path) const { write_binary_file(path, image()); }

std::vector<std::byte> safetensors_image(const std::string& header, std::span<const std::byte> data,
                                         int64_t declared_length) {
  std::vector<std::byte> out;
  append_le(out, static_cast<uint64_t>(declared_length < 0 ? static_cast<int64_t>(header.size()) : declared_length));
  for (char c : header) out.push_back(static_cast<std::byte>(c));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

void write_binary_file(const std::string& path, std::span<const std::byte> bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

}  // namespace latte::test
