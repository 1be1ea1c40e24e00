#include "model/kv_b.hpp"

#include <latte/error.hpp>

#include <cstddef>
#include <string>

namespace latte {

namespace {

void check_sizes(const KvBDims& d, size_t kv_b, size_t k_b, size_t v_b) {
  if (d.n_head <= 0 || d.kv_lora_rank <= 0 || d.qk_nope_head_dim <= 0 || d.v_head_dim <= 0) {
    throw Error(ErrorCode::invalid_argument, "kv_b: dimensions must be positive");
  }
  const size_t n = static_cast<size_t>(d.n_head), l = static_cast<size_t>(d.kv_lora_rank);
  const size_t p = static_cast<size_t>(d.qk_nope_head_dim), v = static_cast<size_t>(d.v_head_dim);
  if (kv_b != n * (p + v) * l || k_b != n * l * p || v_b != n * v * l) {
    throw Error(ErrorCode::invalid_argument, "kv_b: sizes " + std::to_string(kv_b) + " / " + std::to_string(k_b) +
                                                 " / " + std::to_string(v_b) + " do not match N=" + std::to_string(n) +
                                                 " L=" + std::to_string(l) + " P=" + std::to_string(p) +
                                                 " V=" + std::to_string(v));
  }
}

}  // namespace

void split_kv_b(std::span<const float> kv_b, const KvBDims& d, std::span<float> k_b, std::span<float> v_b) {
  check_sizes(d, kv_b.size(), k_b.size(), v_b.size());
  const size_t l = static_cast<size_t>(d.kv_lora_rank), p = static_cast<size_t>(d.qk_nope_head_dim);
  const size_t v = static_cast<size_t>(d.v_head_dim);
  for (size_t h = 0; h < static_cast<size_t>(d.n_head); ++h) {
    const float* head = kv_b.data() + h * (p + v) * l;  // [P + V rows, L]
    for (size_t i = 0; i < p; ++i) {
      for (size_t j = 0; j < l; ++j) k_b[(h * l + j) * p + i] = head[i * l + j];  // transpose W_UK_h
    }
    for (size_t i = 0; i < v * l; ++i) v_b[h * v * l + i] = head[p * l + i];
  }
}

void merge_kv_b(std::span<const float> k_b, std::span<const float> v_b, const KvBDims& d, std::span<float> kv_b) {
  check_sizes(d, kv_b.size(), k_b.size(), v_b.size());
  const size_t l = static_cast<size_t>(d.kv_lora_rank), p = static_cast<size_t>(d.qk_nope_head_dim);
  const size_t v = static_cast<size_t>(d.v_head_dim);
  for (size_t h = 0; h < static_cast<size_t>(d.n_head); ++h) {
    float* head = kv_b.data() + h * (p + v) * l;
    for (size_t i = 0; i < p; ++i) {
      for (size_t j = 0; j < l; ++j) head[i * l + j] = k_b[(h * l + j) * p + i];
    }
    for (size_t i = 0; i < v * l; ++i) head[p * l + i] = v_b[h * v * l + i];
  }
}

}  // namespace latte
