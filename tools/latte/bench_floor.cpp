// Weight and KV byte counts and the host copy bandwidth for `latte bench` (see bench_floor.hpp).
#include "bench_floor.hpp"

#include <latte/gguf.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <string_view>
#include <thread>
#include <vector>

namespace latte::cli {

namespace {

/// The block index of "blk.N.*", or -1 for tensors outside the blocks.
int block_of(std::string_view name) {
  if (!name.starts_with("blk.")) return -1;
  name.remove_prefix(4);
  int il = -1;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), il);
  return ec == std::errc() && end != name.data() ? il : -1;
}

}  // namespace

double WeightBytes::experts_touched(int tokens) const {
  if (n_expert <= 0) return 0;
  const double miss = std::pow(1.0 - static_cast<double>(n_expert_used) / n_expert, tokens);
  return n_expert * (1.0 - miss);
}

double WeightBytes::per_step(int tokens) const {
  return always + tokens * embedding_row + experts_touched(tokens) * routed_expert;
}

WeightBytes count_weight_bytes(const Model& model) {
  const ModelConfig& c = model.config();
  WeightBytes w;
  w.n_expert = c.n_expert;
  w.n_expert_used = c.n_expert_used;
  for (const gguf::TensorInfo& t : model.file().tensors()) {
    const double bytes = static_cast<double>(t.n_bytes);
    w.all += bytes;
    w.n_params += t.n_elements();
    const int il = block_of(t.name);
    if (il >= c.n_layer_main()) continue;  // MTP blocks do not run
    if (t.name == "token_embd.weight") {
      w.embedding_row = bytes / static_cast<double>(t.n_rows());
    } else if (t.name.find("_exps.") != std::string::npos && c.n_expert > 0) {
      w.routed_expert += bytes / c.n_expert;  // [.., .., n_expert]: one expert is a 1/n_expert slice
    } else {
      w.always += bytes;
    }
  }
  return w;
}

double KvBytes::bytes_read(int64_t context) const {
  const int64_t rows = top_k > 0 ? std::min<int64_t>(context, top_k) : context;
  return row_bytes * static_cast<double>(rows) + indexer_bytes * static_cast<double>(context);
}

KvBytes count_kv_bytes(const Model& model, const std::string& backend_name) {
  const ModelConfig& c = model.config();
  const auto backend = AttentionRegistry::instance().create(backend_name, c, model.device());
  KvBytes kv;
  kv.row_bytes = static_cast<double>(backend->kv_layout().bytes_per_token()) * c.n_layer_main();
  if (c.has_indexer()) {
    kv.indexer_bytes = static_cast<double>(c.indexer.head_dim) * sizeof(float) * c.n_layer_main();
    kv.top_k = c.indexer.top_k;
  }
  return kv;
}

double measure_host_copy_bandwidth(int threads) {
  threads = std::max(threads, 1);
  constexpr size_t kBytes = size_t{128} << 20;  // far beyond any last-level cache
  const auto src = std::make_unique_for_overwrite<unsigned char[]>(kBytes);
  const auto dst = std::make_unique_for_overwrite<unsigned char[]>(kBytes);
  std::memset(src.get(), 0x5a, kBytes);
  std::memset(dst.get(), 0, kBytes);  // both buffers paged in before timing
  const size_t share = (kBytes / static_cast<size_t>(threads)) & ~size_t{4095};
  double best_s = 0;
  for (int round = 0; round < 6; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      const size_t begin = static_cast<size_t>(t) * share;
      const size_t len = t + 1 == threads ? kBytes - begin : share;
      pool.emplace_back([&, begin, len] { std::memcpy(dst.get() + begin, src.get() + begin, len); });
    }
    for (auto& th : pool) th.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (round > 0) best_s = best_s == 0 ? s : std::min(best_s, s);  // round 0 warms up
  }
  return 2.0 * static_cast<double>(kBytes) / best_s;
}

}  // namespace latte::cli
