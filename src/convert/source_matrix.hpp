// A checkpoint tensor seen as a matrix of fp32 rows, decoded on demand from the memory-mapped file:
// F32 / F16 / BF16 / F64 / F8_E4M3 / F8_E5M2, with DeepSeek's fp8 block scales applied on the way
// (w[r][c] = fp8(w[r][c]) * scale_inv[r / block_rows][c / block_cols]).
//
//   latte::convert::SourceMatrix m(ckpt.at("model.layers.0.mlp.down_proj.weight"));
//   std::vector<float> row(m.cols()); m.decode_rows(0, 1, row.data());
#pragma once

#include "convert/safetensors.hpp"

#include <cstdint>

namespace latte::convert {

/// The block shape of an fp8 checkpoint's weight_scale_inv (quantization_config.weight_block_size).
struct BlockScaleShape {
  uint64_t rows = 128;  ///< output rows per scale
  uint64_t cols = 128;  ///< input columns per scale
};

/// Rows of a tensor: a 1-D tensor is one row, an N-D tensor has prod(shape[:-1]) rows of shape[-1].
class SourceMatrix {
 public:
  /// Throws Error(unsupported) for non-float dtypes and Error(invalid_file) naming both tensors when
  /// `scale_inv` does not have shape [ceil(rows / block.rows), ceil(cols / block.cols)] or the
  /// weight is not 2-D.
  explicit SourceMatrix(const safetensors::TensorView& tensor, const safetensors::TensorView* scale_inv = nullptr,
                        BlockScaleShape block = {});

  [[nodiscard]] uint64_t rows() const noexcept { return rows_; }
  [[nodiscard]] uint64_t cols() const noexcept { return cols_; }
  [[nodiscard]] const safetensors::TensorView& tensor() const noexcept { return *tensor_; }
  [[nodiscard]] const safetensors::TensorView* scale_inv() const noexcept { return scale_; }

  /// Decodes rows [first, first + count) into `dst` (count * cols() floats, row-major).
  /// Throws Error(invalid_argument) when the range is outside the matrix.
  void decode_rows(uint64_t first, uint64_t count, float* dst) const;
  /// Decodes `count` values of one row starting at column `col` (for column-wise gathers).
  void decode_span(uint64_t row, uint64_t col, uint64_t count, float* dst) const;

 private:
  const safetensors::TensorView* tensor_;
  const safetensors::TensorView* scale_;
  BlockScaleShape block_;
  uint64_t rows_ = 1, cols_ = 1;
  uint64_t scale_cols_ = 0;  // scale_inv row length
};

/// Decodes `count` consecutive elements of a float-typed tensor starting at element `first`.
void decode_elements(const safetensors::TensorView& tensor, uint64_t first, uint64_t count, float* dst);

}  // namespace latte::convert
