// Tap dumps: one NumPy .npy file (format 1.0) per tap plus index.json, readable by numpy.load and
// torch (via numpy), and written the same way by tools/oracle/dump_taps.py.
//
// .npy 1.0 layout: "\x93NUMPY", major 1, minor 0, uint16 little-endian header length, then an ASCII
// Python dict "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" padded with spaces and
// ended by '\n' so that the data starts at a multiple of 64 bytes; then the values, C order.
#include <latte/diagnostics.hpp>
#include <latte/error.hpp>

#include <nlohmann/json.hpp>

#include <bit>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>

namespace latte::diagnostics {

namespace {

static_assert(std::endian::native == std::endian::little, "the .npy writer assumes a little-endian host");

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;
constexpr int64_t kMaxValues = int64_t{1} << 32;  // a tap larger than 16 GiB is a corrupt header

std::string npy_header(std::span<const int64_t> shape) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) dict += ", ";
    dict += std::to_string(shape[i]);
  }
  dict += shape.size() == 1 ? ",), }" : "), }";                  // a one-element tuple is written (n,)
  const size_t unpadded = kMagicSize + 2 + 2 + dict.size() + 1;  // magic, version, length, dict, '\n'
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  return dict;
}

/// Parses the value of `key` in the header dict (a quoted string, a bool, or a tuple).
std::string dict_value(const std::string& dict, const std::string& key, const std::string& path) {
  const std::string quoted = "'" + key + "'";
  const size_t k = dict.find(quoted);
  if (k == std::string::npos) throw Error(ErrorCode::invalid_file, path + ": .npy header has no '" + key + "'");
  size_t v = dict.find(':', k + quoted.size());
  if (v == std::string::npos) throw Error(ErrorCode::invalid_file, path + ": malformed .npy header");
  ++v;
  while (v < dict.size() && dict[v] == ' ') ++v;
  size_t end = v;
  if (dict[v] == '(') {
    end = dict.find(')', v);
    if (end == std::string::npos) throw Error(ErrorCode::invalid_file, path + ": malformed shape in .npy header");
    return dict.substr(v, end - v + 1);
  }
  if (dict[v] == '\'' || dict[v] == '"') {
    end = dict.find(dict[v], v + 1);
    if (end == std::string::npos) throw Error(ErrorCode::invalid_file, path + ": malformed .npy header");
    return dict.substr(v + 1, end - v - 1);
  }
  while (end < dict.size() && dict[end] != ',' && dict[end] != '}') ++end;
  return dict.substr(v, end - v);
}

}  // namespace

void write_npy(const std::string& path, std::span<const int64_t> shape, std::span<const float> values) {
  const int64_t n = std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
  if (n != static_cast<int64_t>(values.size())) {
    throw Error(ErrorCode::invalid_argument,
                path + ": shape holds " + std::to_string(n) + " values, got " + std::to_string(values.size()));
  }
  const std::string header = npy_header(shape);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(ErrorCode::io, path + ": cannot open for writing");
  const auto len = static_cast<uint16_t>(header.size());
  const char version_and_length[4] = {1, 0, static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  out.write(kMagic, kMagicSize);
  out.write(version_and_length, 4);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size_bytes()));
  if (!out) throw Error(ErrorCode::io, path + ": write failed");
}

TapRecord read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::not_found, path + ": cannot open");
  char pre[10];
  in.read(pre, 10);
  if (!in || std::memcmp(pre, kMagic, kMagicSize) != 0)
    throw Error(ErrorCode::invalid_file, path + ": not a .npy file");
  const int major = static_cast<unsigned char>(pre[6]);
  size_t header_len =
      static_cast<unsigned char>(pre[8]) | (static_cast<size_t>(static_cast<unsigned char>(pre[9])) << 8);
  if (major == 2 || major == 3) {
    char more[2];
    in.read(more, 2);
    header_len |= (static_cast<size_t>(static_cast<unsigned char>(more[0])) << 16) |
                  (static_cast<size_t>(static_cast<unsigned char>(more[1])) << 24);
  } else if (major != 1) {
    throw Error(ErrorCode::invalid_file, path + ": unsupported .npy version " + std::to_string(major));
  }
  std::string dict(header_len, '\0');
  in.read(dict.data(), static_cast<std::streamsize>(header_len));
  if (!in) throw Error(ErrorCode::invalid_file, path + ": truncated .npy header");
  const std::string descr = dict_value(dict, "descr", path);
  if (descr != "<f4" && descr != "<f8") {
    throw Error(ErrorCode::invalid_file, path + ": dtype '" + descr + "' (expected '<f4' or '<f8')");
  }
  if (dict_value(dict, "fortran_order", path) != "False") {
    throw Error(ErrorCode::invalid_file, path + ": Fortran-order arrays are not supported");
  }
  TapRecord r;
  const std::string tuple = dict_value(dict, "shape", path);
  size_t i = 1;
  while (i < tuple.size()) {
    while (i < tuple.size() && (tuple[i] == ' ' || tuple[i] == ',')) ++i;
    if (i >= tuple.size() || tuple[i] == ')') break;
    size_t j = i;
    while (j < tuple.size() && tuple[j] >= '0' && tuple[j] <= '9') ++j;
    if (j == i || j - i > 12) throw Error(ErrorCode::invalid_file, path + ": malformed shape " + tuple);
    r.shape.push_back(std::stoll(tuple.substr(i, j - i)));
    i = j;
  }
  int64_t n = 1;
  for (int64_t d : r.shape) {
    if (d != 0 && n > kMaxValues / d) {  // n d > kMaxValues, asked without forming n d (it could pass 2^63)
      throw Error(ErrorCode::invalid_file,
                  path + ": shape " + tuple + " holds more than " + std::to_string(kMaxValues) + " values");
    }
    n *= d;
  }
  r.data.resize(static_cast<size_t>(n));
  if (descr == "<f4") {
    in.read(reinterpret_cast<char*>(r.data.data()), static_cast<std::streamsize>(n * 4));
  } else {
    std::vector<double> d(static_cast<size_t>(n));
    in.read(reinterpret_cast<char*>(d.data()), static_cast<std::streamsize>(n * 8));
    for (size_t k = 0; k < d.size(); ++k) r.data[k] = static_cast<float>(d[k]);
  }
  if (!in) throw Error(ErrorCode::invalid_file, path + ": truncated data (" + std::to_string(n) + " values expected)");
  return r;
}

void write_tap_dump(const std::string& dir, std::span<const TapRecord> taps, std::span<const Token> tokens) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(ErrorCode::io, dir + ": cannot create directory (" + ec.message() + ")");
  nlohmann::json index;
  index["format"] = "latte-taps-1";
  index["precision"] = "float32";
  index["tokens"] = std::vector<Token>(tokens.begin(), tokens.end());
  index["taps"] = nlohmann::json::array();
  for (const TapRecord& t : taps) {
    const std::string file = t.name + ".npy";
    write_npy((std::filesystem::path(dir) / file).string(), t.shape, t.data);
    index["taps"].push_back({{"name", t.name}, {"layer", t.layer}, {"shape", t.shape}, {"file", file}});
  }
  const std::string index_path = (std::filesystem::path(dir) / "index.json").string();
  std::ofstream out(index_path, std::ios::trunc);
  out << index.dump(1) << '\n';
  if (!out) throw Error(ErrorCode::io, index_path + ": write failed");
}

std::vector<TapRecord> read_tap_dump(const std::string& dir, std::vector<Token>* tokens) {
  const std::string index_path = (std::filesystem::path(dir) / "index.json").string();
  std::ifstream in(index_path);
  if (!in) throw Error(ErrorCode::not_found, index_path + ": cannot open (not a tap dump?)");
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(in);
    std::vector<TapRecord> taps;
    for (const auto& entry : index.at("taps")) {
      TapRecord r = read_npy((std::filesystem::path(dir) / entry.at("file").get<std::string>()).string());
      r.name = entry.at("name").get<std::string>();
      r.layer = entry.value("layer", -1);
      taps.push_back(std::move(r));
    }
    if (tokens) *tokens = index.value("tokens", std::vector<Token>{});
    return taps;
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorCode::invalid_file, index_path + ": " + e.what());
  }
}

double tap_dump_bound(const std::string& dir) {
  const std::string index_path = (std::filesystem::path(dir) / "index.json").string();
  std::ifstream in(index_path);
  if (!in) throw Error(ErrorCode::not_found, index_path + ": cannot open (not a tap dump?)");
  try {
    const nlohmann::json index = nlohmann::json::parse(in);
    return index.value("precision", std::string()) == "float32" ? kFp32Bound : kBf16Bound;
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorCode::invalid_file, index_path + ": " + e.what());
  }
}

}  // namespace latte::diagnostics
