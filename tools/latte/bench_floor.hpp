// The physical floor of `latte bench`: how many bytes a forward step must at least move (the
// weights it reads at their stored precision, the KV cache it attends over) and the machine's
// measured copy bandwidth. floor t/s = tokens / (bytes / bandwidth); a test's fraction of the
// floor is its measured t/s over that.
//
//   const latte::cli::WeightBytes w = latte::cli::count_weight_bytes(model);
//   double step_bytes = w.per_step(1) + kv.bytes_read(context);   // one decoded token
#pragma once

#include <latte/attention.hpp>
#include <latte/model.hpp>

#include <cstdint>
#include <string>

namespace latte::cli {

/// The inference tensors of a model, split by how often a step reads them (bytes as stored).
struct WeightBytes {
  double always = 0;         ///< read by every step whatever the routing: attention, norms, dense
                             ///< FFNs, shared experts, routers, output norm and head
  double embedding_row = 0;  ///< one row of token_embd (read once per token)
  double routed_expert = 0;  ///< one routed expert (gate + up + down) summed over all MoE layers
  int n_expert = 0;          ///< routed experts per MoE layer (0 for a dense model)
  int n_expert_used = 0;     ///< experts chosen per token
  double all = 0;            ///< every tensor of the file, MTP blocks included (the model's size)
  uint64_t n_params = 0;     ///< elements of every tensor of the file

  /// Expected distinct routed experts per MoE layer touched by `tokens` tokens, each choosing
  /// n_expert_used of n_expert uniformly (random weights route close to uniformly).
  [[nodiscard]] double experts_touched(int tokens) const;
  /// Bytes one step over `tokens` new tokens must read: `always`, `tokens` embedding rows and the
  /// touched experts. per_step(1) is the active weights of one decoded token.
  [[nodiscard]] double per_step(int tokens) const;
};

/// Counts the tensors of `model`'s file. MoE tensors are `*_exps`; blocks at or past
/// n_layer_main() (MTP) are skipped for the step figures.
WeightBytes count_weight_bytes(const Model& model);

/// The KV cache bytes one query token reads in every layer, for the attention backend `name`
/// (its cache row layout) on `model`'s device.
struct KvBytes {
  double row_bytes = 0;      ///< one cached token, all inference layers (attention rows only)
  double indexer_bytes = 0;  ///< one cached indexer key, all layers (glm-dsa; else 0)
  int top_k = 0;             ///< sparse attention reads at most this many rows (0 = dense)

  /// Bytes read by one query attending `context` cached tokens (itself included).
  [[nodiscard]] double bytes_read(int64_t context) const;
};
KvBytes count_kv_bytes(const Model& model, const std::string& backend_name);

/// Host memory bandwidth: `threads` threads each memcpy their share of a 128 MiB buffer; the
/// best of several rounds, counting bytes read plus bytes written, in bytes per second.
double measure_host_copy_bandwidth(int threads);

}  // namespace latte::cli
