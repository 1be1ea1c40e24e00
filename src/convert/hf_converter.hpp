// `latte convert`: a Hugging Face checkpoint folder (config.json, *.safetensors, tokenizer files) to
// a llama.cpp-compatible GGUF file, streamed tensor by tensor: each tensor's rows are decoded from the
// memory-mapped shards, converted in row blocks on all threads and written at their final offset,
// so memory stays near one output tensor per writer thread whatever the checkpoint's size.
//
//   latte::convert::convert_hf_model({.model_folder = "DeepSeek-V2-Lite", .output_path = "v2l.gguf",
//                                     .mix = latte::convert::TypeMix::q4_k_m});
#pragma once

#include "convert/progress_meter.hpp"
#include "convert/type_mix.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace latte::convert {

/// Options of convert_hf_model.
struct ConvertOptions {
  std::string model_folder{};      ///< holds config.json, the safetensors files and the tokenizer
  std::string output_path{};       ///< the GGUF file to write (written as path.partial, then renamed)
  TypeMix mix = TypeMix::bf16;     ///< element types (see choose_tensor_type)
  unsigned n_threads = 0;          ///< worker threads; 0 = all hardware threads
  bool vocab_only = false;         ///< write metadata and tokenizer only, no tensors
  std::optional<bool> keep_mtp{};  ///< override the per-architecture MTP default (HfConfigOptions)
  std::string name{};              ///< general.name; default: the folder's name
  ProgressMeter::Mode progress = ProgressMeter::Mode::automatic;
  /// Bytes of tensor buffers the writer may hold at once; 0 = half of the physical memory. Two
  /// tensors are produced concurrently when two of the largest fit, else one.
  uint64_t memory_budget = 0;
};

/// What a conversion did.
struct ConvertReport {
  size_t n_tensors = 0;
  uint64_t bytes_read = 0;     ///< checkpoint tensor bytes decoded
  uint64_t bytes_written = 0;  ///< output file size
  double seconds = 0;
  std::vector<std::string> skipped;  ///< checkpoint tensors deliberately not converted
  bool has_tokenizer = false;        ///< tokenizer metadata was written
};

/// Converts. Throws Error(not_found) for a missing config.json, tensor or tokenizer file (the last
/// only with vocab_only), Error(unsupported) for an architecture or setting latte cannot convert,
/// Error(invalid_file) naming the file/tensor/key for malformed input, Error(io) when writing fails.
ConvertReport convert_hf_model(const ConvertOptions& options);

}  // namespace latte::convert
