#include "gguf_report.hpp"

#include <latte/quant.hpp>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <map>
#include <type_traits>

namespace latte::cli {
namespace {

template <class F>
std::string float_text(F value) {
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);  // shortest round-trip form
  return std::string(buffer, result.ptr);
}

// A string in double quotes; quotes, backslashes and control bytes escaped, other bytes kept.
std::string quoted(std::string_view text, size_t max_bytes) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out = "\"";
  for (const char c : text.substr(0, std::min(text.size(), max_bytes))) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += c;
    }
  }
  out += '"';
  if (text.size() > max_bytes) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

template <class T>
std::string scalar_text(const T& v, size_t max_string_bytes) {
  if constexpr (std::is_same_v<T, std::string>) {
    return quoted(v, max_string_bytes);
  } else if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_floating_point_v<T>) {
    return float_text(v);
  } else {
    return std::to_string(v);
  }
}

std::string type_column(const gguf::Value& value) {
  if (const auto* array = value.get_if<gguf::Array>()) {
    std::string text = "[";
    text += gguf::value_type_name(array->element_type);
    text += ']';
    return text;
  }
  return std::string(gguf::value_type_name(value.type()));
}

// Element `i` of an array as JSON.
nlohmann::ordered_json array_json(const gguf::Array& array, size_t array_items) {
  return std::visit(
      [&](const auto& elements) {
        nlohmann::ordered_json values = nlohmann::ordered_json::array();
        const size_t n = std::min(elements.size(), array_items);
        for (size_t i = 0; i < n; ++i) {
          using T = typename std::decay_t<decltype(elements)>::value_type;
          values.push_back(static_cast<T>(elements[i]));
        }
        return values;
      },
      array.values);
}

}  // namespace

std::string human_bytes(uint64_t bytes) {
  static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(units)) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  if (unit == 0) {
    std::snprintf(text, sizeof text, "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(text, sizeof text, "%.2f %s", value, units[unit]);
  }
  return text;
}

std::string human_count(uint64_t count) {
  static constexpr const char* units[] = {"", " K", " M", " B", " T"};
  double value = static_cast<double>(count);
  size_t unit = 0;
  while (value >= 1000 && unit + 1 < std::size(units)) {
    value /= 1000;
    ++unit;
  }
  if (unit == 0) return std::to_string(count);
  char text[32];
  std::snprintf(text, sizeof text, "%.2f%s", value, units[unit]);
  return text;
}

std::string value_text(const gguf::Value& value, size_t array_items, size_t max_string_bytes) {
  if (const auto* array = value.get_if<gguf::Array>()) {
    return std::visit(
        [&](const auto& elements) {
          std::string text = "[";
          const size_t n = std::min(elements.size(), array_items);
          for (size_t i = 0; i < n; ++i) {
            using T = typename std::decay_t<decltype(elements)>::value_type;
            if (i) text += ", ";
            text += scalar_text(static_cast<T>(elements[i]), 40);
          }
          if (elements.size() > n) text += n ? ", ..." : "...";
          text += "]";
          if (elements.size() > n) text += " (" + std::to_string(elements.size()) + " elements)";
          return text;
        },
        array->values);
  }
  return std::visit(
      [&](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, gguf::Array>) {
          return {};  // handled above
        } else {
          return scalar_text(v, max_string_bytes);
        }
      },
      value.storage());
}

TensorTotals tensor_totals(const gguf::File& file) {
  TensorTotals totals;
  std::map<GgmlType, TypeTotals> by_type;
  for (const auto& t : file.tensors()) {
    auto& entry = by_type[t.type];
    entry.type = t.type;
    entry.tensors += 1;
    entry.parameters += t.n_elements();
    entry.bytes += t.n_bytes;
    totals.tensors += 1;
    totals.parameters += t.n_elements();
    totals.bytes += t.n_bytes;
  }
  for (const auto& [type, entry] : by_type) totals.by_type.push_back(entry);
  std::stable_sort(totals.by_type.begin(), totals.by_type.end(),
                   [](const TypeTotals& a, const TypeTotals& b) { return a.bytes > b.bytes; });
  return totals;
}

void print_header_text(std::ostream& out, const gguf::File& file) {
  out << "file         " << file.path() << "\n"
      << "size         " << file.file_size() << " bytes (" << human_bytes(file.file_size()) << ")"
      << (file.split_count() > 1 ? " in " + std::to_string(file.split_count()) + " split files" : std::string()) << "\n"
      << "version      GGUF v" << file.version() << "\n"
      << "alignment    " << file.alignment() << " bytes\n"
      << "data offset  " << file.data_offset() << "\n"
      << "metadata     " << file.metadata().size() << " keys\n"
      << "tensors      " << file.tensors().size() << "\n";
}

void print_metadata_text(std::ostream& out, const gguf::File& file, size_t array_items) {
  size_t key_width = 0;
  for (const auto& kv : file.metadata()) key_width = std::max(key_width, kv.key.size());
  key_width = std::min<size_t>(key_width, 48);
  out << "\nmetadata (" << file.metadata().size() << " keys):\n";
  for (const auto& kv : file.metadata()) {
    std::string key = kv.key;
    key.resize(std::max(key.size(), key_width), ' ');
    std::string type = type_column(kv.value);
    type.resize(std::max<size_t>(type.size(), 8), ' ');
    out << "  " << key << "  " << type << "  " << value_text(kv.value, array_items) << "\n";
  }
}

void print_tensors_text(std::ostream& out, const gguf::File& file) {
  const auto tensors = file.tensors();
  size_t name_width = 4;
  size_t shape_width = 5;
  for (const auto& t : tensors) {
    name_width = std::max(name_width, t.name.size());
    shape_width = std::max(shape_width, t.shape_string().size());
  }
  const auto pad = [](std::string text, size_t width) {
    text.resize(std::max(text.size(), width), ' ');
    return text;
  };
  out << "\ntensors (" << tensors.size() << "):\n";
  if (tensors.empty()) return;
  out << "  " << pad("name", name_width) << "  " << pad("type", 8) << "  " << pad("shape", shape_width) << "  "
      << pad("offset", 14) << "  bytes\n";
  for (const auto& t : tensors) {
    out << "  " << pad(t.name, name_width) << "  " << pad(std::string(type_name(t.type)), 8) << "  "
        << pad(t.shape_string(), shape_width) << "  " << pad(std::to_string(t.offset), 14) << "  " << t.n_bytes << "\n";
  }
}

void print_totals_text(std::ostream& out, const TensorTotals& totals) {
  out << "\ntotals: " << totals.tensors << " tensors, " << totals.parameters << " parameters ("
      << human_count(totals.parameters) << "), " << totals.bytes << " bytes (" << human_bytes(totals.bytes) << ")";
  if (totals.parameters) {
    char bpw[32];
    std::snprintf(bpw, sizeof bpw, "%.2f",
                  8.0 * static_cast<double>(totals.bytes) / static_cast<double>(totals.parameters));
    out << ", " << bpw << " bits per weight";
  }
  out << "\n";
  if (totals.by_type.empty()) return;
  out << "  type      tensors  parameters                bytes\n";
  for (const auto& e : totals.by_type) {
    char line[160];
    std::snprintf(line, sizeof line, "  %-8s  %7llu  %-24s  %s\n", std::string(type_name(e.type)).c_str(),
                  static_cast<unsigned long long>(e.tensors),
                  (std::to_string(e.parameters) + " (" + human_count(e.parameters) + ")").c_str(),
                  human_bytes(e.bytes).c_str());
    out << line;
  }
}

nlohmann::ordered_json header_json(const gguf::File& file) {
  return {{"file", file.path()},
          {"file_size", file.file_size()},
          {"split_count", file.split_count()},
          {"version", file.version()},
          {"alignment", file.alignment()},
          {"data_offset", file.data_offset()},
          {"metadata_count", file.metadata().size()},
          {"tensor_count", file.tensors().size()}};
}

nlohmann::ordered_json metadata_json(const gguf::File& file, size_t array_items) {
  nlohmann::ordered_json entries = nlohmann::ordered_json::array();
  for (const auto& kv : file.metadata()) {
    nlohmann::ordered_json entry = {{"key", kv.key}, {"type", gguf::value_type_name(kv.value.type())}};
    if (const auto* array = kv.value.get_if<gguf::Array>()) {
      entry["element_type"] = gguf::value_type_name(array->element_type);
      entry["length"] = array->size();
      entry["values"] = array_json(*array, array_items);
      entry["truncated"] = array->size() > array_items;
    } else {
      std::visit(
          [&](const auto& v) {
            using T = std::decay_t<decltype(v)>;
            if constexpr (!std::is_same_v<T, gguf::Array>) entry["value"] = v;
          },
          kv.value.storage());
    }
    entries.push_back(std::move(entry));
  }
  return entries;
}

nlohmann::ordered_json tensors_json(const gguf::File& file) {
  nlohmann::ordered_json entries = nlohmann::ordered_json::array();
  for (const auto& t : file.tensors()) {
    nlohmann::ordered_json shape = nlohmann::ordered_json::array();
    for (uint32_t d = 0; d < t.n_dims; ++d) shape.push_back(t.ne[d]);
    entries.push_back({{"name", t.name},
                       {"type", type_name(t.type)},
                       {"shape", std::move(shape)},
                       {"offset", t.offset},
                       {"bytes", t.n_bytes}});
  }
  return entries;
}

nlohmann::ordered_json totals_json(const TensorTotals& totals) {
  nlohmann::ordered_json by_type = nlohmann::ordered_json::array();
  for (const auto& e : totals.by_type) {
    by_type.push_back(
        {{"type", type_name(e.type)}, {"tensors", e.tensors}, {"parameters", e.parameters}, {"bytes", e.bytes}});
  }
  return {{"tensors", totals.tensors},
          {"parameters", totals.parameters},
          {"bytes", totals.bytes},
          {"by_type", std::move(by_type)}};
}

}  // namespace latte::cli
