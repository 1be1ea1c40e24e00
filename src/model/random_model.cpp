// Random-weight GGUF files. Every value is a pure function of (seed, tensor name, index), so files
// are identical whatever the thread count, and the split and fused K/V layouts of one seed describe
// the same model (attn_kv_b is built by merging the attn_k_b / attn_v_b values).
#include "model/random_model.hpp"

#include "core/task_pool.hpp"
#include "model/kv_b.hpp"
#include "model/weights.hpp"

#include <latte/error.hpp>
#include <latte/gguf.hpp>
#include <latte/quant.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

namespace latte {

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t name_hash(std::string_view name) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char ch : name) h = (h ^ static_cast<uint8_t>(ch)) * 1099511628211ull;
  return h;
}

/// Values [first, first + count) of a stream uniform in [-1, 1) that is a pure function of
/// (seed, name): value i is splitmix64's (i + 1)-th output, so any range can be made on its own.
void uniform_range(uint64_t seed, std::string_view name, size_t first, size_t count, float* out) {
  uint64_t state = (seed * 0x2545F4914F6CDD1Dull ^ name_hash(name)) + first * 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < count; ++i) {
    out[i] = static_cast<float>(static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-52 - 1.0);
  }
}

/// Values [first, first + count) of a directly generated tensor (everything but attn_kv_b).
void generated_range(uint64_t seed, const std::string& name, std::span<const uint64_t> ne, size_t first, size_t count,
                     float* v) {
  uniform_range(seed, name, first, count, v);
  if (ends_with(name, "norm.weight")) {
    for (size_t i = 0; i < count; ++i) v[i] = 1.0f + 0.1f * v[i];  // norm weights near 1
    return;
  }
  if (ends_with(name, ".bias")) {
    for (size_t i = 0; i < count; ++i) v[i] *= 0.1f;  // selection bias, LayerNorm bias: small
    return;
  }
  // Matrices: standard deviation 1/sqrt(fan_in) keeps activations O(1) through the layers. The
  // fan-in is the contracted dimension: ne[0], except attn_k_b {P, L, N} whose W_UK contracts L.
  // Embedding rows are looked up, not contracted: standard deviation 1.
  double std_dev = 1.0;
  if (name != "token_embd.weight") {
    const double fan_in = static_cast<double>(ends_with(name, "attn_k_b.weight") ? ne[1] : ne[0]);
    std_dev = 1.0 / std::sqrt(fan_in);
  }
  const auto scale = static_cast<float>(std_dev * std::sqrt(3.0));  // uniform [-a, a] has std a/sqrt(3)
  for (size_t i = 0; i < count; ++i) v[i] *= scale;
}

/// The values of a tensor that is generated directly (everything but attn_kv_b).
std::vector<float> generated_values(uint64_t seed, const std::string& name, std::span<const uint64_t> ne) {
  size_t n = 1;
  for (uint64_t d : ne) n *= static_cast<size_t>(d);
  std::vector<float> v(n);
  generated_range(seed, name, ne, 0, n, v.data());
  return v;
}

/// Whether the writer includes an expected tensor.
bool written(const detail::TensorSpec& s, const ModelConfig& c, KvBLayout layout) {
  const std::string& n = s.name;
  if (ends_with(n, "attn_k_b.weight") || ends_with(n, "attn_v_b.weight")) return layout != KvBLayout::fused;
  if (ends_with(n, "attn_kv_b.weight")) return layout != KvBLayout::split;
  if (ends_with(n, "ffn_gate_up_exps.weight")) return false;  // separate gate and up tensors
  if (ends_with(n, "exp_probs_b.bias")) return c.expert_gating == ExpertGating::sigmoid;
  if (ends_with(n, "nextn.embed_tokens.weight") || ends_with(n, "nextn.shared_head_head.weight")) return false;
  return s.need != detail::TensorNeed::optional || n == "output.weight";
}

/// attn_kv_b with the values of the same block's attn_k_b and attn_v_b, merged.
std::vector<float> fused_kv_b_values(uint64_t seed, const std::string& name, const ModelConfig& c) {
  const std::string prefix = name.substr(0, name.size() - std::string_view("attn_kv_b.weight").size());
  const auto L = static_cast<uint64_t>(c.kv_lora_rank), P = static_cast<uint64_t>(c.qk_nope_head_dim);
  const auto V = static_cast<uint64_t>(c.v_head_dim), N = static_cast<uint64_t>(c.n_head);
  const std::vector<uint64_t> k_ne{P, L, N}, v_ne{L, V, N};
  const auto k = generated_values(seed, prefix + "attn_k_b.weight", k_ne);
  const auto v = generated_values(seed, prefix + "attn_v_b.weight", v_ne);
  std::vector<float> fused(static_cast<size_t>(N * (P + V) * L));
  merge_kv_b(k, v,
             {.n_head = c.n_head,
              .kv_lora_rank = c.kv_lora_rank,
              .qk_nope_head_dim = c.qk_nope_head_dim,
              .v_head_dim = c.v_head_dim},
             fused);
  return fused;
}

struct PlannedTensor {
  std::string name;
  std::vector<uint64_t> ne;
  GgmlType type;
};

gguf::Writer build_writer(const ModelConfig& config, const RandomModelOptions& options,
                          std::vector<PlannedTensor>& planned) {
  config.validate();
  gguf::Writer writer;
  config.write_gguf_metadata(
      writer, options.kv_b_layout == KvBLayout::fused ? ModelConfig::KvMetadata::legacy : ModelConfig::KvMetadata::mla);
  if (options.extra_metadata) options.extra_metadata(writer);
  for (const detail::TensorSpec& s : detail::expected_tensors(config)) {
    if (!written(s, config, options.kv_b_layout)) continue;
    const GgmlType type = options.tensor_type ? options.tensor_type(s.name, s.ne) : GgmlType::f32;
    const TypeTraits& traits = type_traits(type);
    if (!traits.quantizable && type != GgmlType::f32) {
      throw Error(ErrorCode::unsupported,
                  "random model: no encoder for type " + std::string(traits.name) + " (tensor " + s.name + ")");
    }
    if (s.ne[0] % traits.block_values != 0) {
      throw Error(ErrorCode::invalid_argument, "random model: tensor " + s.name + " has rows of " +
                                                   std::to_string(s.ne[0]) + " values, not a multiple of the " +
                                                   std::string(traits.name) + " block (" +
                                                   std::to_string(traits.block_values) + ")");
    }
    writer.add_tensor(s.name, type, s.ne);
    planned.push_back({s.name, s.ne, type});
  }
  return writer;
}

gguf::Writer::Fill make_fill(const ModelConfig& config, const RandomModelOptions& options,
                             const std::vector<PlannedTensor>& planned, TaskPool& pool) {
  return [&config, &options, &planned, &pool](size_t index, std::span<std::byte> dst) {
    const PlannedTensor& t = planned[index];
    const auto row = static_cast<size_t>(t.ne[0]);
    const size_t row_size = static_cast<size_t>(row_bytes(t.type, t.ne[0]));
    if (ends_with(t.name, "attn_kv_b.weight") || options.transform) {
      // Whole-tensor path: the fused layout merges two other tensors; transforms see every value.
      std::vector<float> values = ends_with(t.name, "attn_kv_b.weight")
                                      ? fused_kv_b_values(options.seed, t.name, config)
                                      : generated_values(options.seed, t.name, t.ne);
      if (options.transform) options.transform(t.name, t.ne, values);
      if (t.type == GgmlType::f32) {
        std::memcpy(dst.data(), values.data(), values.size() * sizeof(float));
        return;
      }
      for (size_t r = 0; r < values.size() / row; ++r) {
        quantize_row(t.type, values.data() + r * row, dst.data() + r * row_size, static_cast<int64_t>(row));
      }
      return;
    }
    // Row blocks of about 1 M values, generated and encoded in parallel (same values as above).
    const size_t n_rows = dst.size() / row_size;
    const size_t rows_per_task = std::max<size_t>(1, (size_t{1} << 20) / row);
    pool.run((n_rows + rows_per_task - 1) / rows_per_task, [&](size_t task) {
      const size_t first = task * rows_per_task, count = std::min(rows_per_task, n_rows - first);
      thread_local std::vector<float> scratch;  // (count, row) fp32 values
      scratch.resize(count * row);
      generated_range(options.seed, t.name, t.ne, first * row, count * row, scratch.data());
      if (t.type == GgmlType::f32) {
        std::memcpy(dst.data() + first * row_size, scratch.data(), scratch.size() * sizeof(float));
      } else {
        quantize_row(t.type, scratch.data(), dst.data() + first * row_size, static_cast<int64_t>(count * row));
      }
    });
  };
}

}  // namespace

void write_random_model(const ModelConfig& config, const std::string& path, const RandomModelOptions& options) {
  std::vector<PlannedTensor> planned;
  const gguf::Writer writer = build_writer(config, options, planned);
  // Two tensors in flight (one encoding while the other is written), each split over all threads.
  const unsigned n_threads = std::max(1u, options.n_threads);
  TaskPool pool(n_threads);
  writer.write(path, make_fill(config, options, planned, pool), std::min(2u, n_threads));
}

std::vector<std::byte> random_model_bytes(const ModelConfig& config, const RandomModelOptions& options) {
  std::vector<PlannedTensor> planned;
  const gguf::Writer writer = build_writer(config, options, planned);
  TaskPool pool(std::max(1u, options.n_threads));
  return writer.write_to_memory(make_fill(config, options, planned, pool));
}

}  // namespace latte
