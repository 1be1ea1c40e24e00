// Products of fp32 activations with (possibly quantized) weight matrices as stored in the file:
// blocks of weight rows are dequantized into per-thread fp32 scratch and multiplied with Eigen,
// the blocks spread over the thread pool. f32 weights are used in place.
//
//   // y[T, rows] = x[T, K] * W^T for W = attn_kv_a_mqa {K, rows}
//   latte::cpu::matmul(runner, {w}, x, T, K, y, rows);
#pragma once

#include <latte/attention.hpp>

#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

namespace latte::cpu {

/// y[t, c] (+)= sum_k x[t, k] * W[c, k], where W stacks the rows of `weights` in order (each a
/// matrix of ne[0] = K values per row): output columns [0, rows(w0)) come from weights[0], the next
/// rows(w1) from weights[1], and so on. x is [n_tokens, K] with row stride x_stride (floats), y is
/// [n_tokens, total rows] with row stride y_stride. Throws Error(internal) when the K differ.
void matmul(const TaskRunner& runner, std::span<const TensorView> weights, const float* x, int64_t n_tokens,
            int64_t x_stride, float* y, int64_t y_stride, bool accumulate = false);

inline void matmul(const TaskRunner& runner, std::initializer_list<TensorView> weights, const float* x,
                   int64_t n_tokens, int64_t x_stride, float* y, int64_t y_stride, bool accumulate = false) {
  matmul(runner, std::span<const TensorView>(weights.begin(), weights.size()), x, n_tokens, x_stride, y, y_stride,
         accumulate);
}

/// Dequantizes rows [first, first + count) of `w` into dst ([count, ne[0]] floats).
void dequantize_rows(const TensorView& w, int64_t first, int64_t count, float* dst);

/// The whole tensor as fp32 (small tensors: norms, biases; or prepared attention matrices).
std::vector<float> dequantize_tensor(const TensorView& w);

}  // namespace latte::cpu
