// Checkpoint folders: model.safetensors.index.json (weight_map: tensor -> shard file) or a single
// model*.safetensors file.
#include "convert/safetensors.hpp"

#include <latte/error.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace latte::safetensors {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* index_name = "model.safetensors.index.json";

[[noreturn]] void fail(const std::string& context, const std::string& what) {
  throw Error(ErrorCode::invalid_file, context + ": " + what);
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::io, path.string() + ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A shard name from the index must be a plain file name inside the folder.
void check_shard_name(const std::string& index_path, const std::string& tensor, const std::string& shard) {
  const fs::path p(shard);
  if (shard.empty() || p.is_absolute() || p.has_parent_path() || shard == "." || shard == "..") {
    fail(index_path, "weight_map entry for '" + tensor + "' names \"" + shard + "\", not a file of the folder");
  }
}

}  // namespace

Checkpoint Checkpoint::open(const std::string& folder) {
  const fs::path dir(folder);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw Error(ErrorCode::not_found, folder + ": not a directory");

  Checkpoint ckpt;
  ckpt.folder_ = folder;
  const fs::path index_path = dir / index_name;
  if (fs::exists(index_path, ec)) {
    const std::string index_str = index_path.string();
    json index;
    try {
      index = json::parse(read_text(index_path));
    } catch (const json::exception& e) {
      fail(index_str, std::string("not valid JSON (") + e.what() + ")");
    }
    if (!index.is_object()) fail(index_str, "not a JSON object");
    const auto map_it = index.find("weight_map");
    if (map_it == index.end() || !map_it->is_object()) fail(index_str, "missing object weight_map");
    std::map<std::string, std::vector<std::string>> by_shard;  // shard -> tensors listed for it
    for (const auto& [tensor, shard] : map_it->items()) {
      if (!shard.is_string()) fail(index_str, "weight_map entry for '" + tensor + "' is not a string");
      const std::string shard_name = shard.get<std::string>();
      check_shard_name(index_str, tensor, shard_name);
      by_shard[shard_name].push_back(tensor);
    }
    if (by_shard.empty()) fail(index_str, "weight_map lists no tensors");
    for (const auto& [shard, names] : by_shard) {
      if (!fs::exists(dir / shard, ec)) {
        fail(index_str, "shard " + shard + " (holding '" + names.front() + "') does not exist");
      }
    }
    for (const auto& [shard, names] : by_shard) {
      const fs::path shard_path = dir / shard;
      File file = File::open(shard_path.string());
      for (const auto& name : names) {
        if (!file.find(name)) fail(index_str, "tensor '" + name + "' is not in its shard " + shard);
      }
      if (file.tensors().size() != names.size()) {
        for (const auto& t : file.tensors()) {
          if (std::find(names.begin(), names.end(), t.name) == names.end()) {
            fail(shard_path.string(), "tensor '" + t.name + "' is not listed for this shard in " + index_name);
          }
        }
      }
      ckpt.files_.push_back(std::move(file));
    }
  } else {
    std::vector<fs::path> parts;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (entry.is_regular_file() && name.starts_with("model") && name.ends_with(".safetensors")) {
        parts.push_back(entry.path());
      }
    }
    if (parts.empty()) throw Error(ErrorCode::not_found, folder + ": no " + index_name + " and no model*.safetensors");
    std::sort(parts.begin(), parts.end());
    for (const auto& p : parts) ckpt.files_.push_back(File::open(p.string()));
  }
  ckpt.build_index();
  return ckpt;
}

Checkpoint Checkpoint::from_files(std::vector<File> files) {
  Checkpoint ckpt;
  ckpt.folder_ = "<memory>";
  ckpt.files_ = std::move(files);
  ckpt.build_index();
  return ckpt;
}

void Checkpoint::build_index() {
  for (size_t f = 0; f < files_.size(); ++f) {
    for (const auto& t : files_[f].tensors()) {
      const auto [it, inserted] = index_.emplace(t.name, std::pair{f, &t});
      if (!inserted) {
        fail(files_[f].path(), "tensor '" + t.name + "' is also in " + files_[it->second.first].path());
      }
    }
  }
}

const TensorView* Checkpoint::find(std::string_view name) const noexcept {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second.second;
}

const TensorView& Checkpoint::at(std::string_view name) const {
  if (const auto* t = find(name)) return *t;
  throw Error(ErrorCode::not_found, folder_ + ": checkpoint has no tensor '" + std::string(name) + "'");
}

std::vector<const TensorView*> Checkpoint::tensors() const {
  std::vector<const TensorView*> all;
  for (const auto& f : files_) {
    for (const auto& t : f.tensors()) all.push_back(&t);
  }
  return all;
}

uint64_t Checkpoint::data_bytes() const noexcept {
  uint64_t total = 0;
  for (const auto& f : files_) {
    for (const auto& t : f.tensors()) total += t.bytes.size();
  }
  return total;
}

void Checkpoint::release(const TensorView& tensor) const noexcept {
  const auto it = index_.find(tensor.name);
  if (it != index_.end()) files_[it->second.first].release(tensor);
}

}  // namespace latte::safetensors
