#include "convert/hf_converter.hpp"

#include "convert/hf_config.hpp"
#include "convert/safetensors.hpp"
#include "convert/tensor_plan.hpp"
#include "convert/tokenizer_import.hpp"
#include "core/task_pool.hpp"

#include <latte/error.hpp>
#include <latte/gguf.hpp>
#include <latte/model.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

namespace latte::convert {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t task_values = uint64_t{1} << 20;  // fp32 values per row-block task (4 MB of scratch)

uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : uint64_t{8} << 30;
}

void write_general_metadata(gguf::Writer& writer, const HfModel& hf, TypeMix mix) {
  hf.config.write_gguf_metadata(writer, ModelConfig::KvMetadata::mla);
  writer.set("general.type", std::string("model"));
  writer.set("general.file_type", llama_file_type(mix));
  writer.set("general.quantization_version", uint32_t{2});
}

// Produces tensor `t` into `dst` (exactly its GGUF bytes) with all pool threads, then lets its
// source pages go.
void produce_tensor(const PlannedTensor& t, std::span<std::byte> dst, TaskPool& pool,
                    const safetensors::Checkpoint& ckpt, ProgressMeter& meter) {
  const uint64_t cols = t.ne[0], rows = t.n_rows();
  const uint64_t row_bytes_out = row_bytes(t.type, cols);
  if (row_bytes_out * rows != dst.size()) {
    throw Error(ErrorCode::internal, "tensor '" + t.name + "': " + std::to_string(dst.size()) +
                                         " bytes to fill, rows need " + std::to_string(row_bytes_out * rows));
  }
  const uint64_t rows_per_task = std::max<uint64_t>(1, task_values / std::max<uint64_t>(cols, 1));
  const size_t n_tasks = static_cast<size_t>((rows + rows_per_task - 1) / rows_per_task);
  pool.run(n_tasks, [&](size_t task) {
    const uint64_t first = task * rows_per_task;
    const uint64_t count = std::min(rows_per_task, rows - first);
    std::byte* out = dst.data() + first * row_bytes_out;
    if (t.type == GgmlType::f32) {
      t.produce_rows(first, count, reinterpret_cast<float*>(out));  // rows start 4-byte aligned
    } else {
      thread_local std::vector<float> scratch;  // (count, cols) fp32 rows
      scratch.resize(count * cols);
      t.produce_rows(first, count, scratch.data());
      quantize_row(t.type, scratch.data(), out, static_cast<int64_t>(count * cols));
    }
    meter.add(count * row_bytes_out);
  });
  for (const auto& s : t.sources) {
    ckpt.release(s.tensor());
    if (s.scale_inv()) ckpt.release(*s.scale_inv());
  }
}

// Checkpoints saved by transformers carry no MTP blocks even when config.json counts them: keep
// the blocks only when they are there (and fail when they were asked for explicitly).
void drop_absent_mtp(HfModel& hf, const safetensors::Checkpoint& ckpt, const std::optional<bool>& keep_mtp) {
  ModelConfig& c = hf.config;
  if (c.n_nextn_layer == 0) return;
  const std::string prefix = "model.layers." + std::to_string(hf.n_trunk_layers) + ".";
  for (const auto* t : ckpt.tensors()) {
    if (t->name.starts_with(prefix)) return;
  }
  if (keep_mtp == true) {
    throw Error(ErrorCode::not_found, ckpt.folder() +
                                          ": --mtp asked for the multi-token-prediction block, but the "
                                          "checkpoint has no tensor '" +
                                          prefix + "*'");
  }
  c.n_layer = hf.n_trunk_layers;
  c.n_nextn_layer = 0;
}

}  // namespace

ConvertReport convert_hf_model(const ConvertOptions& options) {
  ConvertReport report;
  const fs::path folder(options.model_folder);
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) throw Error(ErrorCode::not_found, options.model_folder + ": not a directory");
  if (options.output_path.empty()) throw Error(ErrorCode::invalid_argument, "no output path given");

  HfConfigOptions config_options{.keep_mtp = options.keep_mtp, .name = options.name};
  if (config_options.name.empty()) config_options.name = fs::absolute(folder).lexically_normal().filename().string();
  if (config_options.name.empty())
    config_options.name = fs::absolute(folder).lexically_normal().parent_path().filename().string();
  HfModel hf = read_hf_config_file((folder / "config.json").string(), config_options);
  std::optional<safetensors::Checkpoint> ckpt;
  try {
    ckpt = safetensors::Checkpoint::open(options.model_folder);
  } catch (const Error& e) {
    if (!options.vocab_only || e.code() != ErrorCode::not_found) throw;  // vocab-only needs no weights
  }
  if (ckpt) drop_absent_mtp(hf, *ckpt, options.keep_mtp);

  gguf::Writer writer;
  write_general_metadata(writer, hf, options.mix);
  report.has_tokenizer = write_tokenizer_metadata(options.model_folder, hf.config.n_vocab, options.vocab_only, writer);

  const unsigned n_threads = options.n_threads ? options.n_threads : std::max(1u, std::thread::hardware_concurrency());
  if (options.vocab_only) {
    writer.write(
        options.output_path, [](size_t, std::span<std::byte>) {}, 1);
    report.bytes_written = fs::file_size(options.output_path, ec);
    return report;
  }

  const ConversionPlan plan = plan_conversion(*ckpt, hf, options.mix);
  report.skipped = plan.skipped;
  uint64_t largest = 0;  // bytes of the largest output tensor
  for (const auto& t : plan.tensors) {
    writer.add_tensor(t.name, t.type, t.ne);
    report.bytes_read += t.source_bytes();
  }
  uint64_t total_out = 0;
  for (const auto& info : writer.tensors()) {
    largest = std::max(largest, info.n_bytes);
    total_out += info.n_bytes;
  }
  report.n_tensors = plan.tensors.size();

  const uint64_t budget = options.memory_budget ? options.memory_budget : physical_memory_bytes() / 2;
  const unsigned writer_threads = largest * 2 <= budget && n_threads > 1 ? 2 : 1;
  TaskPool pool(n_threads);
  ProgressMeter meter("converting", total_out, options.progress);
  writer.write(
      options.output_path,
      [&](size_t index, std::span<std::byte> dst) { produce_tensor(plan.tensors[index], dst, pool, *ckpt, meter); },
      writer_threads);
  meter.finish();
  report.seconds = meter.elapsed_seconds();
  report.bytes_written = fs::file_size(options.output_path, ec);
  return report;
}

}  // namespace latte::convert
