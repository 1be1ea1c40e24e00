#include "convert/safetensors.hpp"

#include "gguf/file_mapping.hpp"

#include <latte/error.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <set>
#include <variant>

namespace latte::safetensors {

using gguf::FileMapping;
using gguf::MappingAccess;
namespace {

using nlohmann::json;

constexpr uint64_t length_prefix_bytes = 8;

struct DtypeEntry {
  std::string_view name;
  Dtype dtype;
  uint32_t size;  // bytes per element
};
constexpr DtypeEntry dtype_table[] = {
    {"F64", Dtype::f64, 8},         {"F32", Dtype::f32, 4},         {"F16", Dtype::f16, 2}, {"BF16", Dtype::bf16, 2},
    {"F8_E4M3", Dtype::f8_e4m3, 1}, {"F8_E5M2", Dtype::f8_e5m2, 1}, {"I64", Dtype::i64, 8}, {"I32", Dtype::i32, 4},
    {"I16", Dtype::i16, 2},         {"I8", Dtype::i8, 1},           {"U8", Dtype::u8, 1},   {"BOOL", Dtype::boolean, 1},
};
// Defined by the format (or by torch's exporter) but not read by latte.
constexpr std::string_view unsupported_dtypes[] = {"U16",     "U32", "U64", "F8_E8M0",     "F6_E2M3",
                                                   "F6_E3M2", "F4",  "C64", "F8_E4M3FNUZ", "F8_E5M2FNUZ"};

[[noreturn]] void fail(const std::string& context, const std::string& what) {
  throw Error(ErrorCode::invalid_file, context + ": " + what);
}

// Reads a non-negative integer that fits in 64 bits, or fails naming `field`.
uint64_t read_unsigned(const json& value, const std::string& context, const char* field) {
  if (!value.is_number_unsigned()) {
    if (value.is_number_integer()) fail(context, std::string(field) + " holds the negative value " + value.dump());
    fail(context, std::string(field) + " holds " + value.dump() + ", not a non-negative integer");
  }
  return value.get<uint64_t>();
}

}  // namespace

std::string_view dtype_name(Dtype dtype) noexcept {
  for (const auto& e : dtype_table) {
    if (e.dtype == dtype) return e.name;
  }
  return "?";
}

uint32_t dtype_size(Dtype dtype) noexcept {
  for (const auto& e : dtype_table) {
    if (e.dtype == dtype) return e.size;
  }
  return 0;
}

Dtype parse_dtype(std::string_view name, const std::string& context) {
  for (const auto& e : dtype_table) {
    if (e.name == name) return e.dtype;
  }
  for (auto u : unsupported_dtypes) {
    if (u == name) throw Error(ErrorCode::unsupported, context + ": dtype " + std::string(name) + " is not supported");
  }
  fail(context, "unknown dtype \"" + std::string(name) + "\"");
}

std::string TensorView::shape_string() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// ---- File -------------------------------------------------------------------------------------

struct File::Impl {
  std::variant<std::monostate, FileMapping, std::vector<std::byte>> storage;
  std::string path;
  std::span<const std::byte> bytes;
  std::vector<TensorView> tensors;  // sorted by data offset
  std::unordered_map<std::string_view, size_t> by_name;
  std::map<std::string, std::string> metadata;

  void parse();
  void parse_tensor(const std::string& name, const json& entry, std::span<const std::byte> data,
                    std::vector<uint64_t>& begins);
};

void File::Impl::parse() {
  const uint64_t file_size = bytes.size();
  if (file_size < length_prefix_bytes) {
    fail(path, "truncated: " + std::to_string(file_size) + " bytes, shorter than the 8-byte header length");
  }
  uint64_t header_len = 0;  // little-endian u64 at byte 0
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<uint8_t>(bytes[static_cast<size_t>(i)]);
  if (header_len > max_header_bytes) {
    fail(path, "header length " + std::to_string(header_len) + " bytes exceeds the limit of " +
                   std::to_string(max_header_bytes) + " bytes");
  }
  if (header_len > file_size - length_prefix_bytes) {
    fail(path, "truncated: header length " + std::to_string(header_len) + " bytes runs past the end of the " +
                   std::to_string(file_size) + "-byte file");
  }
  const auto* text = reinterpret_cast<const char*>(bytes.data() + length_prefix_bytes);
  const std::span<const std::byte> data = bytes.subspan(length_prefix_bytes + header_len);

  // Duplicate top-level keys would silently shadow a tensor: reject them while parsing.
  std::set<std::string> seen;
  std::optional<std::string> duplicate;
  const json::parser_callback_t on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1) {
      auto key = parsed.get<std::string>();
      if (!seen.insert(key).second && !duplicate) duplicate = std::move(key);
    }
    return true;
  };
  json header;
  try {
    header = json::parse(text, text + header_len, on_event);
  } catch (const json::exception& e) {
    fail(path, std::string("header is not valid JSON (") + e.what() + ")");
  }
  if (duplicate) fail(path, "header lists tensor '" + *duplicate + "' twice");
  if (!header.is_object()) fail(path, "header is JSON " + std::string(header.type_name()) + ", not an object");

  std::vector<uint64_t> begins;  // data offset of each tensor, parallel to `tensors`
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) fail(path, "__metadata__ is not an object");
      for (const auto& [mkey, mvalue] : value.items()) {
        if (!mvalue.is_string()) fail(path, "__metadata__ entry '" + mkey + "' is not a string");
        metadata.emplace(mkey, mvalue.get<std::string>());
      }
      continue;
    }
    parse_tensor(key, value, data, begins);
  }

  // Order by offset and make sure no two tensors share bytes.
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return begins[a] < begins[b]; });
  std::vector<TensorView> sorted;
  sorted.reserve(tensors.size());
  const TensorView* previous = nullptr;
  uint64_t previous_end = 0;
  for (size_t i : order) {
    TensorView& t = tensors[i];
    const uint64_t begin = begins[i];
    if (previous && !t.bytes.empty() && begin < previous_end) {
      fail(path, "tensor '" + t.name + "' data_offsets start at byte " + std::to_string(begin) + ", inside tensor '" +
                     previous->name + "' (which ends at byte " + std::to_string(previous_end) + ")");
    }
    sorted.push_back(std::move(t));
    if (!sorted.back().bytes.empty()) {
      previous = &sorted.back();
      previous_end = begin + sorted.back().bytes.size();
    }
  }
  tensors = std::move(sorted);
  for (size_t i = 0; i < tensors.size(); ++i) {
    tensors[i].file = &path;
    by_name.emplace(tensors[i].name, i);
  }
}

void File::Impl::parse_tensor(const std::string& name, const json& entry, std::span<const std::byte> data,
                              std::vector<uint64_t>& begins) {
  const std::string context = path + ": tensor '" + name + "'";
  if (!entry.is_object()) fail(context, "entry is JSON " + std::string(entry.type_name()) + ", not an object");
  const auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end()) fail(context, "missing field dtype");
  if (!dtype_it->is_string()) fail(context, "field dtype is not a string");
  const Dtype dtype = parse_dtype(dtype_it->get<std::string>(), context);

  const auto shape_it = entry.find("shape");
  if (shape_it == entry.end()) fail(context, "missing field shape");
  if (!shape_it->is_array()) fail(context, "field shape is not an array");
  std::vector<uint64_t> shape;
  uint64_t n_elements = 1;
  for (const auto& dim : *shape_it) {
    shape.push_back(read_unsigned(dim, context, "shape"));
    if (__builtin_mul_overflow(n_elements, shape.back(), &n_elements)) {
      fail(context, "shape " + shape_it->dump() + " has more elements than 64 bits can count");
    }
  }

  const auto offsets_it = entry.find("data_offsets");
  if (offsets_it == entry.end()) fail(context, "missing field data_offsets");
  if (!offsets_it->is_array() || offsets_it->size() != 2)
    fail(context, "field data_offsets is not a [begin, end] pair");
  const uint64_t begin = read_unsigned((*offsets_it)[0], context, "data_offsets");
  const uint64_t end = read_unsigned((*offsets_it)[1], context, "data_offsets");
  const std::string offsets_text = "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "]";
  if (begin > end) fail(context, offsets_text + " begin after end");
  if (end > data.size()) {
    fail(context, offsets_text + " run past the data section (" + std::to_string(data.size()) + " bytes)");
  }
  uint64_t expected = 0;  // bytes
  if (__builtin_mul_overflow(n_elements, uint64_t{dtype_size(dtype)}, &expected)) {
    fail(context, "shape " + shape_it->dump() + " of " + std::string(dtype_name(dtype)) + " overflows 64-bit sizes");
  }
  if (end - begin != expected) {
    fail(context, offsets_text + " hold " + std::to_string(end - begin) + " bytes but shape " + shape_it->dump() +
                      " of " + std::string(dtype_name(dtype)) + " needs " + std::to_string(expected));
  }
  tensors.push_back(TensorView{.name = name,
                               .dtype = dtype,
                               .shape = std::move(shape),
                               .n_elements = n_elements,
                               .bytes = data.subspan(begin, end - begin),
                               .file = nullptr});
  begins.push_back(begin);
}

File::File(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
File::File(File&&) noexcept = default;
File& File::operator=(File&&) noexcept = default;
File::~File() = default;

File File::open(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->bytes = impl->storage.emplace<FileMapping>(path, MappingAccess::sequential).bytes();
  impl->parse();
  return File(std::move(impl));
}

File File::from_bytes(std::vector<std::byte> image, std::string name) {
  auto impl = std::make_unique<Impl>();
  impl->path = std::move(name);
  impl->bytes = impl->storage.emplace<std::vector<std::byte>>(std::move(image));
  impl->parse();
  return File(std::move(impl));
}

const std::string& File::path() const noexcept { return impl_->path; }
std::span<const TensorView> File::tensors() const noexcept { return impl_->tensors; }
const std::map<std::string, std::string>& File::metadata() const noexcept { return impl_->metadata; }

const TensorView* File::find(std::string_view name) const noexcept {
  const auto it = impl_->by_name.find(name);
  return it == impl_->by_name.end() ? nullptr : &impl_->tensors[it->second];
}

void File::release(const TensorView& tensor) const noexcept {
  if (const auto* mapped = std::get_if<FileMapping>(&impl_->storage)) mapped->release(tensor.bytes);
}

}  // namespace latte::safetensors
