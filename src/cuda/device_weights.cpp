// Uploading a model's weights to a CUDA device (see device_weights.hpp).
#include "cuda/device_weights.hpp"

#include "attention/up_projections.hpp"
#include "cpu/matmul.hpp"
#include "cuda/check.hpp"
#include "cuda/dequantize.hpp"
#include "cuda/gemm_bf16.hpp"
#include "cuda/gemv_quant.hpp"

#include <latte/error.hpp>

#include <cuda_runtime.h>

#include <cstring>
#include <string>

namespace latte::cuda {

void use_device(int ordinal) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    count = 0;
  }
  if (ordinal < 0 || ordinal >= count) {
    throw Error(ErrorCode::invalid_argument, "device cuda:" + std::to_string(ordinal) + " does not exist (" +
                                                 std::to_string(count) + " CUDA device" + (count == 1 ? "" : "s") +
                                                 " present)");
  }
  LATTE_CUDA_CHECK(cudaSetDevice(ordinal));
}

bool DeviceWeights::make_copies(Copies& set, const std::vector<const DeviceMatrix*>& matrices, DequantOut out,
                                int64_t budget_bytes, cudaStream_t stream, const char* what) {
  if (set.ready.load()) return true;
  const std::lock_guard lock(set.mutex);
  if (set.decided) return set.ready.load();
  set.decided = true;
  const int64_t elem_bytes = out == DequantOut::f32 ? 4 : 2;
  int64_t bytes = 0;
  for (const DeviceMatrix* m : matrices) bytes += m->rows * bf16_weight_stride(m->k) * elem_bytes;
  size_t free_bytes = 0, total = 0;
  LATTE_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  if (bytes == 0 || bytes > budget_bytes || static_cast<size_t>(bytes) > free_bytes / 2) return false;
  try {
    for (const DeviceMatrix* m : matrices) {
      if (set.copies.contains(m->data)) continue;
      const int64_t stride = bf16_weight_stride(m->k);
      Copy copy{.values = DeviceBuffer<std::byte>(static_cast<size_t>(m->rows * stride * elem_bytes), what),
                .type = m->type,
                .rows = m->rows,
                .k = m->k};
      dequantize_rows({.type = m->type,
                       .weight = m->data,
                       .weight_bytes = m->bytes(),
                       .n_source_rows = static_cast<int>(m->rows),
                       .n_rows = static_cast<int>(m->rows),
                       .k = static_cast<int>(m->k),
                       .out = copy.values.data(),
                       .out_stride = stride,
                       .out_type = out},
                      stream);
      set.copies.emplace(m->data, std::move(copy));
    }
  } catch (const Error& e) {
    if (e.code() != ErrorCode::out_of_memory) throw;
    set.copies.clear();  // the memory went elsewhere since it was asked: the products stay as they were
    return false;
  }
  LATTE_CUDA_CHECK(cudaStreamSynchronize(stream));  // other sessions' streams read them from now on
  set.ready.store(true);
  return true;
}

bool DeviceWeights::make_heads_f32(int64_t budget_bytes, cudaStream_t stream) const {
  if (heads_f32_ready()) return true;
  std::vector<const DeviceMatrix*> matrices;
  for (const DeviceLayer& l : layers) {
    for (const DeviceMatrix* m : {&l.k_b, &l.v_b}) {
      if (*m) matrices.push_back(m);
    }
  }
  return make_copies(*heads_, matrices, DequantOut::f32, budget_bytes, stream, "fp32 copy of W_UK / W_UV");
}

bool DeviceWeights::heads_f32_ready() const noexcept { return heads_->ready.load(); }

const std::byte* DeviceWeights::find_copy(const Copies& set, const DeviceMatrix& m) noexcept {
  if (!set.ready.load() || !m) return nullptr;
  const auto it = set.copies.find(m.data);
  if (it == set.copies.end()) return nullptr;
  const Copy& c = it->second;
  return c.type == m.type && c.k == m.k && c.rows >= m.rows ? c.values.data() : nullptr;
}

const float* DeviceWeights::heads_f32(const DeviceMatrix& m) const {
  if (const std::byte* copy = find_copy(*heads_, m)) return reinterpret_cast<const float*>(copy);
  throw Error(ErrorCode::internal, "device weights: no fp32 copy of that W_UK / W_UV matrix");
}

namespace {

/// Whether a bf16 copy of `m` is worth making: quantized rows dequantize_rows decodes (a bf16 matrix is multiplied
/// as it is, and f16 / f32 rows would lose bits).
bool takes_bf16_copy(const DeviceMatrix& m) {
  return m && m.type != GgmlType::f32 && m.type != GgmlType::f16 && m.type != GgmlType::bf16 && gemv_supports(m.type) &&
         m.k % 32 == 0;
}

}  // namespace

bool DeviceWeights::make_output_bf16(int64_t budget_bytes, cudaStream_t stream) const {
  if (output_->ready.load()) return true;
  std::vector<const DeviceMatrix*> matrices;
  if (takes_bf16_copy(output)) matrices.push_back(&output);
  return make_copies(*output_, matrices, DequantOut::bf16, budget_bytes, stream, "bf16 copy of the output head");
}

const __nv_bfloat16* DeviceWeights::output_bf16() const noexcept {
  return reinterpret_cast<const __nv_bfloat16*>(find_copy(*output_, output));
}

bool DeviceWeights::make_dense_bf16(int64_t budget_bytes, cudaStream_t stream) const {
  if (dense_->ready.load()) return true;
  std::vector<const DeviceMatrix*> matrices;
  auto add = [&](const DeviceMatrix& m) {
    if (takes_bf16_copy(m)) matrices.push_back(&m);
  };
  auto add_ffn = [&](const DeviceGatedFfn& f) {
    if (f.gate_up) {
      add(f.gate_up);
    } else {
      add(f.gate);
      add(f.up);
    }
    add(f.down);
  };
  for (const DeviceLayer& l : layers) {
    if (l.attn_input) {
      add(l.attn_input);
    } else {
      add(l.attn_query);
      add(l.attn_kv_a);
    }
    for (const DeviceMatrix* m : {&l.attn_q_b, &l.k_b, &l.v_b, &l.kv_b, &l.attn_output}) add(*m);
    add_ffn(l.dense);
    add_ffn(l.shared);
  }
  return make_copies(*dense_, matrices, DequantOut::bf16, budget_bytes, stream, "bf16 copy of a dense matrix");
}

bool DeviceWeights::dense_bf16_ready() const noexcept { return dense_->ready.load(); }

const __nv_bfloat16* DeviceWeights::dense_bf16(const DeviceMatrix& m) const noexcept {
  return reinterpret_cast<const __nv_bfloat16*>(find_copy(*dense_, m));
}

const std::byte* DeviceWeights::add(const void* host, size_t bytes, const char* what) {
  DeviceBuffer<std::byte> buffer(bytes, what);
  LATTE_CUDA_CHECK(cudaMemcpy(buffer.data(), host, bytes, cudaMemcpyHostToDevice));
  total_bytes += bytes;
  buffers_.push_back(std::move(buffer));
  return buffers_.back().data();
}

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

std::string mib(double bytes) { return std::to_string(static_cast<int64_t>(bytes / kMiB + 0.5)) + " MiB"; }

/// Builds the device tensors. In the counting pass nothing is allocated: `needed` sums the bytes.
class Uploader {
 public:
  Uploader(DeviceWeights& out, bool counting) : out_(out), counting_(counting) {}

  size_t needed = 0;

  DeviceMatrix matrix(const TensorView& v) {
    if (!v) return {};
    check_type(v);
    const size_t bytes = static_cast<size_t>(v.n_rows()) * v.row_bytes;
    return {.type = v.type,
            .data = put(v.data, bytes, v.name),
            .rows = v.n_rows(),
            .k = v.ne[0],
            .row_bytes = static_cast<int64_t>(v.row_bytes)};
  }

  /// Two matrices with the same k and type stored back to back: the first's rows, then the second's.
  DeviceMatrix stacked(const TensorView& a, const TensorView& b) {
    check_type(a);
    check_type(b);
    const size_t bytes_a = static_cast<size_t>(a.n_rows()) * a.row_bytes;
    const size_t bytes_b = static_cast<size_t>(b.n_rows()) * b.row_bytes;
    const std::byte* data = nullptr;
    needed += bytes_a + bytes_b;
    if (!counting_) {
      std::vector<std::byte> host(bytes_a + bytes_b);
      std::memcpy(host.data(), a.data, bytes_a);
      std::memcpy(host.data() + bytes_a, b.data, bytes_b);
      data = out_.add(host.data(), host.size(), "stacked weights");
    }
    return {.type = a.type,
            .data = data,
            .rows = a.n_rows() + b.n_rows(),
            .k = a.ne[0],
            .row_bytes = static_cast<int64_t>(a.row_bytes)};
  }

  /// A small vector as fp32.
  const float* vector(const TensorView& v) {
    if (!v) return nullptr;
    const size_t bytes = static_cast<size_t>(v.ne[0] * v.n_rows()) * sizeof(float);
    needed += bytes;
    if (counting_) return nullptr;
    const std::vector<float> values = cpu::dequantize_tensor(v);
    return reinterpret_cast<const float*>(out_.add(values.data(), bytes, "norm weights"));
  }

  /// An up-projection view: uploaded as is when it views the file, as bf16 when it was converted.
  DeviceMatrix up_projection(const TensorView& v, const std::vector<float>& owned) {
    if (owned.empty()) return matrix(v);
    std::vector<uint16_t> bf16(owned.size());
    for (size_t i = 0; i < owned.size(); ++i) bf16[i] = fp32_to_bf16(owned[i]);
    const size_t bytes = bf16.size() * sizeof(uint16_t);
    return {.type = GgmlType::bf16,
            .data = put(bf16.data(), bytes, v.name),
            .rows = v.n_rows(),
            .k = v.ne[0],
            .row_bytes = v.ne[0] * 2};
  }

 private:
  void check_type(const TensorView& v) const {
    if (!gemv_supports(v.type)) {
      throw Error(ErrorCode::unsupported, "tensor " + std::string(v.name) + ": type " +
                                              std::string(type_traits(v.type).name) + " has no CUDA kernel");
    }
  }
  const std::byte* put(const void* host, size_t bytes, std::string_view name) {
    needed += bytes;
    if (counting_) return nullptr;
    const std::string what = "weight " + std::string(name);
    return out_.add(host, bytes, what.c_str());
  }

  DeviceWeights& out_;
  bool counting_;
};

DeviceGatedFfn gated_ffn(Uploader& up, const TensorView& gate, const TensorView& upv, const TensorView& down) {
  DeviceGatedFfn f;
  if (!gate) return f;
  if (gate.type == upv.type) {
    f.gate_up = up.stacked(gate, upv);
    f.gate = f.gate_up.slice(0, gate.n_rows());
    f.up = f.gate_up.slice(gate.n_rows(), upv.n_rows());
  } else {
    f.gate = up.matrix(gate);
    f.up = up.matrix(upv);
  }
  f.down = up.matrix(down);
  return f;
}

void build(const ModelConfig& c, const detail::ModelWeights& w, const UploadOptions& options, Uploader& up,
           DeviceWeights& out) {
  out.token_embd = up.matrix(w.token_embd);
  out.output_norm = up.vector(w.output_norm);
  const bool slice = options.output_rows >= 0;
  if (w.output.data == w.token_embd.data) {
    out.output = slice ? out.token_embd.slice(options.output_first, options.output_rows) : out.token_embd;
  } else if (options.output) {
    out.output = up.matrix(slice ? w.output.rows(options.output_first, options.output_rows) : w.output);
  }
  out.layers.assign(w.layers.size(), {});
  const auto attention = w.attention_weights();
  for (size_t il = 0; il < w.layers.size(); ++il) {
    const detail::LayerWeights& lw = w.layers[il];
    DeviceLayer& d = out.layers[il];
    d.attn_norm = up.vector(lw.attn_norm);
    d.q_a_norm = up.vector(lw.attn_q_a_norm);
    d.kv_a_norm = up.vector(lw.attn_kv_a_norm);
    d.ffn_norm = up.vector(lw.ffn_norm);
    d.exp_probs_b = up.vector(lw.exp_probs_b);
    const TensorView& query = c.q_lora_rank > 0 ? lw.attn_q_a : lw.attn_q;
    if (query.type == lw.attn_kv_a_mqa.type) {
      // Stacked in kAttentionInputFusionOrder: the query part first, then c|k_pe.
      d.attn_input = up.stacked(query, lw.attn_kv_a_mqa);
      d.attn_query = d.attn_input.slice(0, query.n_rows());
      d.attn_kv_a = d.attn_input.slice(query.n_rows(), lw.attn_kv_a_mqa.n_rows());
    } else {
      d.attn_query = up.matrix(query);
      d.attn_kv_a = up.matrix(lw.attn_kv_a_mqa);
    }
    d.attn_q_b = up.matrix(lw.attn_q_b);
    {
      const detail::AbsorbedUpProjections absorbed = detail::absorbed_up_projections(attention[il], c);
      d.k_b = up.up_projection(absorbed.k_b, absorbed.owned_k_b);
      d.v_b = up.up_projection(absorbed.v_b, absorbed.owned_v_b);
      const detail::FusedUpProjection fused = detail::fused_up_projection(attention[il], c);
      d.kv_b = up.up_projection(fused.kv_b, fused.owned);
    }
    d.attn_output = up.matrix(lw.attn_output);
    if (!c.is_moe_layer(static_cast<int>(il))) {
      d.dense = gated_ffn(up, lw.ffn_gate, lw.ffn_up, lw.ffn_down);
    } else {
      d.router = up.matrix(lw.ffn_gate_inp);
      if (lw.ffn_gate_exps && lw.ffn_up_exps) {
        d.experts.gate = up.matrix(lw.ffn_gate_exps);
        d.experts.up = up.matrix(lw.ffn_up_exps);
        d.experts.gate_up_stride_rows = c.n_ff_expert;
      } else {
        const DeviceMatrix fused = up.matrix(lw.ffn_gate_up_exps);
        d.experts.gate = fused;
        d.experts.up = fused.slice(c.n_ff_expert, fused.rows - c.n_ff_expert);
        d.experts.gate_up_stride_rows = 2LL * c.n_ff_expert;
      }
      d.experts.down = up.matrix(lw.ffn_down_exps);
      d.shared = gated_ffn(up, lw.ffn_gate_shexp, lw.ffn_up_shexp, lw.ffn_down_shexp);
    }
    d.indexer_q_b = up.matrix(lw.indexer_attn_q_b);
    d.indexer_k = up.matrix(lw.indexer_attn_k);
    d.indexer_k_norm = up.vector(lw.indexer_k_norm);
    d.indexer_k_norm_b = up.vector(lw.indexer_k_norm_b);
    d.indexer_proj = up.matrix(lw.indexer_proj);
  }
}

}  // namespace

size_t device_bytes_needed(const ModelConfig& config, const detail::ModelWeights& weights,
                           const UploadOptions& options) {
  DeviceWeights scratch;
  Uploader counter(scratch, /*counting=*/true);
  build(config, weights, options, counter, scratch);
  return counter.needed;
}

std::shared_ptr<const DeviceWeights> upload_weights(const ModelConfig& config, const detail::ModelWeights& weights,
                                                    const std::string& path, int ordinal,
                                                    const UploadOptions& options) {
  use_device(ordinal);
  auto out = std::make_shared<DeviceWeights>();
  out->ordinal = ordinal;
  {
    const size_t needed = device_bytes_needed(config, weights, options);
    size_t free_bytes = 0, total_bytes = 0;
    LATTE_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (needed > free_bytes) {
      const std::string what = options.label.empty() ? "the weights" : "the weights of " + options.label;
      throw Error(ErrorCode::out_of_memory, path + ": " + what + " need " + mib(static_cast<double>(needed)) +
                                                " on cuda:" + std::to_string(ordinal) + ", which has " +
                                                mib(static_cast<double>(free_bytes)) + " free of " +
                                                mib(static_cast<double>(total_bytes)));
    }
  }
  Uploader uploader(*out, /*counting=*/false);
  build(config, weights, options, uploader, *out);
  return out;
}

std::shared_ptr<const DeviceWeights> upload_weights(const detail::ModelState& state, int ordinal) {
  return upload_weights(state.config, state.weights, state.file.path(), ordinal);
}

}  // namespace latte::cuda
