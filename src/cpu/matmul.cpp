#include "cpu/matmul.hpp"

#include <latte/error.hpp>
#include <latte/quant.hpp>

#include <Eigen/Core>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace latte::cpu {

namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstStridedMap = Eigen::Map<const RowMatrix, 0, Eigen::OuterStride<>>;
using StridedMap = Eigen::Map<RowMatrix, 0, Eigen::OuterStride<>>;

/// Weight rows dequantized per task stay around this size (bytes), so they live in L2.
constexpr int64_t kScratchTargetBytes = 128 * 1024;

/// Multiply-adds below which splitting a product into another task costs more than it saves.
constexpr int64_t kMinTaskMacs = 128 * 1024;

/// Up to this many tokens, quantized rows go through dot_row (no fp32 copy of the block).
constexpr int64_t kDotRowTokens = 1;

struct RowBlock {
  const TensorView* weight;
  int64_t first_row;
  int64_t n_rows;
  int64_t out_column;
};

}  // namespace

void dequantize_rows(const TensorView& w, int64_t first, int64_t count, float* dst) {
  const int64_t k = w.ne[0];
  if (w.type == GgmlType::f32) {
    std::memcpy(dst, w.data + static_cast<size_t>(first) * w.row_bytes, static_cast<size_t>(count * k) * sizeof(float));
    return;
  }
  for (int64_t r = 0; r < count; ++r) {
    dequantize_row(w.type, w.data + static_cast<size_t>(first + r) * w.row_bytes, dst + r * k, k);
  }
}

std::vector<float> dequantize_tensor(const TensorView& w) {
  std::vector<float> out(static_cast<size_t>(w.ne[0] * w.n_rows()));
  dequantize_rows(w, 0, w.n_rows(), out.data());
  return out;
}

void matmul(const TaskRunner& runner, std::span<const TensorView> weights, const float* x, int64_t n_tokens,
            int64_t x_stride, float* y, int64_t y_stride, bool accumulate) {
  if (weights.empty() || n_tokens <= 0) return;
  const int64_t k = weights[0].ne[0];
  int64_t total_rows = 0;
  for (const auto& w : weights) {
    if (w.ne[0] != k || !w.data) {
      throw Error(ErrorCode::internal, "matmul: weight '" + std::string(w.name) + "' has rows of " +
                                           std::to_string(w.ne[0]) + " values, expected " + std::to_string(k));
    }
    total_rows += w.n_rows();
  }
  // Block size: scratch of about kScratchTargetBytes, enough blocks to keep every thread busy, but
  // at least kMinTaskMacs of work per block (a parallel region costs ~10 us).
  int64_t block = std::max<int64_t>(4, kScratchTargetBytes / (k * static_cast<int64_t>(sizeof(float))));
  const int64_t per_worker = (total_rows + 2 * runner.n_workers - 1) / (2 * runner.n_workers);
  const int64_t for_work = (kMinTaskMacs + n_tokens * k - 1) / (n_tokens * k);
  block = std::max({int64_t{4}, std::min(block, per_worker), for_work});

  std::vector<RowBlock> blocks;
  int64_t column = 0;
  for (const auto& w : weights) {
    for (int64_t r = 0; r < w.n_rows(); r += block) {
      const int64_t n = std::min(block, w.n_rows() - r);
      blocks.push_back({&w, r, n, column + r});
    }
    column += w.n_rows();
  }

  const ConstStridedMap xs(x, n_tokens, k, Eigen::OuterStride<>(x_stride));
  runner(static_cast<int>(blocks.size()), [&](int task, int) {
    const RowBlock& b = blocks[static_cast<size_t>(task)];
    if (n_tokens <= kDotRowTokens && b.weight->type != GgmlType::f32) {
      // Few tokens (decode): decode each row block by block straight into its dot products.
      for (int64_t r = 0; r < b.n_rows; ++r) {
        const std::byte* row = b.weight->data + static_cast<size_t>(b.first_row + r) * b.weight->row_bytes;
        for (int64_t t = 0; t < n_tokens; ++t) {
          float& out = y[t * y_stride + b.out_column + r];
          const float dot = dot_row(b.weight->type, row, x + t * x_stride, k);
          out = accumulate ? out + dot : dot;
        }
      }
      return;
    }
    thread_local std::vector<float> scratch;
    const float* rows = nullptr;
    if (b.weight->type == GgmlType::f32) {
      rows = reinterpret_cast<const float*>(b.weight->data + static_cast<size_t>(b.first_row) * b.weight->row_bytes);
    } else {
      scratch.resize(static_cast<size_t>(b.n_rows * k));
      dequantize_rows(*b.weight, b.first_row, b.n_rows, scratch.data());
      rows = scratch.data();
    }
    const Eigen::Map<const RowMatrix> wb(rows, b.n_rows, k);
    StridedMap yb(y + b.out_column, n_tokens, b.n_rows, Eigen::OuterStride<>(y_stride));
    if (accumulate) {
      yb.noalias() += xs * wb.transpose();
    } else {
      yb.noalias() = xs * wb.transpose();
    }
  });
}

}  // namespace latte::cpu
