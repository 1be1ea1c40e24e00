// `latte dequant`: decodes a GGUF file's tensors to float32 with latte's own dequantizers and writes
// them as a safetensors file, so that other tools (and independent decoders) can compare against
// exactly what latte computes with.
//
//   latte dequant model.gguf -o model-f32.safetensors [--tensor blk.0.attn_v_b.weight ...]
//
// Each tensor keeps its GGUF name; its safetensors shape is the GGUF shape reversed (ne[0] last, as
// torch orders it), trailing unit dimensions dropped as ggml counts them. A GGUF type latte cannot
// decode, an unknown --tensor name or an unwritable output gives `error: <what and where>`.
#include "command.hpp"

#include <latte/error.hpp>
#include <latte/gguf.hpp>
#include <latte/quant.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace latte::cli {
namespace {

constexpr const char* usage =
    "usage: latte dequant FILE.gguf -o OUT.safetensors [--tensor NAME]...\n"
    "Decodes every tensor (or each NAME) to float32 and writes them as safetensors, named as in the\n"
    "GGUF file, shape = the GGUF shape reversed.\n";

// ggml_n_dims: trailing dimensions of 1 do not count (a 1-D tensor stays 1-D).
std::vector<uint64_t> torch_shape(const gguf::TensorInfo& t) {
  uint32_t n = t.n_dims;
  while (n > 1 && t.ne[n - 1] == 1) --n;
  std::vector<uint64_t> shape;
  for (uint32_t i = n; i-- > 0;) shape.push_back(t.ne[i]);
  return shape;
}

int run_dequant(std::span<const std::string> argv) {
  Args args(argv);
  if (args.flag({"--help", "-h"})) {
    std::fputs(usage, stdout);
    return 0;
  }
  const auto output = args.take({"-o", "--output"});
  std::vector<std::string> wanted;
  while (auto name = args.take({"--tensor"})) wanted.push_back(*name);
  const auto positionals = args.positionals();
  if (positionals.size() != 1) throw Error(ErrorCode::invalid_argument, std::string("expected one file\n") + usage);
  if (!output) throw Error(ErrorCode::invalid_argument, "no output file (-o OUT.safetensors)");

  const auto file = gguf::File::open(positionals[0]);
  std::vector<const gguf::TensorInfo*> selected;
  if (wanted.empty()) {
    for (const auto& t : file.tensors()) selected.push_back(&t);
  } else {
    for (const auto& name : wanted) {
      const gguf::TensorInfo* t = file.find_tensor(name);
      if (!t) throw Error(ErrorCode::not_found, file.path() + ": no tensor '" + name + "'");
      selected.push_back(t);
    }
  }

  // Header: {"name": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...} in file order.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  uint64_t offset = 0;
  for (const auto* t : selected) {
    if (!type_traits(t->type).dequantizable) {
      throw Error(ErrorCode::unsupported, file.path() + ": tensor '" + t->name + "' has type " +
                                              std::string(type_name(t->type)) + ", which latte cannot decode");
    }
    const uint64_t bytes = t->n_elements() * sizeof(float);
    header[t->name] = {{"dtype", "F32"}, {"shape", torch_shape(*t)}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');  // keep the data 8-byte aligned

  std::ofstream out(*output, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(ErrorCode::io, *output + ": cannot open for writing");
  const uint64_t header_size = text.size();
  unsigned char size_bytes[8];
  for (int i = 0; i < 8; ++i) size_bytes[i] = static_cast<unsigned char>(header_size >> (8 * i));
  out.write(reinterpret_cast<const char*>(size_bytes), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  std::vector<float> rows;  // (n_rows, ne[0]) of one tensor
  for (const auto* t : selected) {
    rows.resize(t->n_elements());
    dequantize_rows(t->type, file.tensor_data(*t).data(), rows.data(), static_cast<int64_t>(t->n_rows()),
                    static_cast<int64_t>(t->ne[0]));
    out.write(reinterpret_cast<const char*>(rows.data()), static_cast<std::streamsize>(rows.size() * sizeof(float)));
  }
  out.close();
  if (!out) throw Error(ErrorCode::io, *output + ": write failed");
  std::fprintf(stderr, "wrote %s: %zu tensors, %llu bytes of float32\n", output->c_str(), selected.size(),
               static_cast<unsigned long long>(offset));
  return 0;
}

const Registration reg{{"dequant", "decode a GGUF file's tensors to float32 safetensors", run_dequant}};

}  // namespace
}  // namespace latte::cli
