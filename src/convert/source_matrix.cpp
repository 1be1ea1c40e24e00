#include "convert/source_matrix.hpp"

#include "convert/fp8.hpp"

#include <latte/error.hpp>
#include <latte/quant.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <vector>

namespace latte::convert {
namespace {

template <class T>
T load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // checkpoint data is not necessarily aligned
  return v;
}

bool is_float(safetensors::Dtype d) {
  using safetensors::Dtype;
  return d == Dtype::f64 || d == Dtype::f32 || d == Dtype::f16 || d == Dtype::bf16 || d == Dtype::f8_e4m3 ||
         d == Dtype::f8_e5m2;
}

std::string describe(const safetensors::TensorView& t) { return *t.file + ": tensor '" + t.name + "'"; }

}  // namespace

void decode_elements(const safetensors::TensorView& tensor, uint64_t first, uint64_t count, float* dst) {
  using safetensors::Dtype;
  const std::byte* src = tensor.bytes.data() + first * safetensors::dtype_size(tensor.dtype);
  switch (tensor.dtype) {
    case Dtype::f32:
      std::memcpy(dst, src, count * sizeof(float));
      return;
    case Dtype::bf16:
      // bfloat16 is the top half of a float: widening is exact (and inlined: this is the hot loop).
      for (uint64_t i = 0; i < count; ++i) {
        dst[i] = std::bit_cast<float>(static_cast<uint32_t>(load<uint16_t>(src + 2 * i)) << 16);
      }
      return;
    case Dtype::f16:
      for (uint64_t i = 0; i < count; ++i) dst[i] = fp16_to_fp32(load<uint16_t>(src + 2 * i));
      return;
    case Dtype::f64:
      for (uint64_t i = 0; i < count; ++i) dst[i] = static_cast<float>(load<double>(src + 8 * i));
      return;
    case Dtype::f8_e4m3:
      for (uint64_t i = 0; i < count; ++i) dst[i] = fp8_e4m3_to_float(static_cast<uint8_t>(src[i]));
      return;
    case Dtype::f8_e5m2:
      for (uint64_t i = 0; i < count; ++i) dst[i] = fp8_e5m2_to_float(static_cast<uint8_t>(src[i]));
      return;
    default:
      throw Error(ErrorCode::unsupported, describe(tensor) + " has dtype " +
                                              std::string(safetensors::dtype_name(tensor.dtype)) +
                                              "; only float tensors can be converted");
  }
}

SourceMatrix::SourceMatrix(const safetensors::TensorView& tensor, const safetensors::TensorView* scale_inv,
                           BlockScaleShape block)
    : tensor_(&tensor), scale_(scale_inv), block_(block) {
  if (!is_float(tensor.dtype)) {
    throw Error(ErrorCode::unsupported, describe(tensor) + " has dtype " +
                                            std::string(safetensors::dtype_name(tensor.dtype)) +
                                            "; only float tensors can be converted");
  }
  if (!tensor.shape.empty()) {
    cols_ = tensor.shape.back();
    rows_ = cols_ == 0 ? 0 : tensor.n_elements / cols_;
  }
  if (!scale_) return;
  if (!is_float(scale_->dtype)) {
    throw Error(ErrorCode::invalid_file, describe(*scale_) + " has dtype " +
                                             std::string(safetensors::dtype_name(scale_->dtype)) +
                                             ", not a float scale");
  }
  if (tensor.shape.size() != 2) {
    throw Error(ErrorCode::invalid_file,
                describe(tensor) + " has shape " + tensor.shape_string() + "; block-scaled weights must be 2-D");
  }
  if (block_.rows == 0 || block_.cols == 0) {
    throw Error(ErrorCode::invalid_file, describe(tensor) + ": block scale shape has a zero dimension");
  }
  const uint64_t want_rows = (rows_ + block_.rows - 1) / block_.rows;
  const uint64_t want_cols = (cols_ + block_.cols - 1) / block_.cols;
  if (scale_->shape.size() != 2 || scale_->shape[0] != want_rows || scale_->shape[1] != want_cols) {
    throw Error(ErrorCode::invalid_file,
                describe(*scale_) + " has shape " + scale_->shape_string() + " but weight '" + tensor.name + "' " +
                    tensor.shape_string() + " with " + std::to_string(block_.rows) + "x" + std::to_string(block_.cols) +
                    " blocks needs [" + std::to_string(want_rows) + ", " + std::to_string(want_cols) + "]");
  }
  scale_cols_ = want_cols;
}

void SourceMatrix::decode_span(uint64_t row, uint64_t col, uint64_t count, float* dst) const {
  if (row >= rows_ || col > cols_ || count > cols_ - col) {
    throw Error(ErrorCode::invalid_argument, describe(*tensor_) + ": row " + std::to_string(row) + " columns [" +
                                                 std::to_string(col) + ", +" + std::to_string(count) + ") outside " +
                                                 std::to_string(rows_) + "x" + std::to_string(cols_));
  }
  decode_elements(*tensor_, row * cols_ + col, count, dst);
  if (!scale_) return;
  // One scale per block of block_.cols columns of this row's block row.
  float scales[64];
  const uint64_t scale_row = row / block_.rows;
  uint64_t c = col;
  while (c < col + count) {
    const uint64_t block = c / block_.cols;
    const uint64_t n_blocks = std::min<uint64_t>(64, scale_cols_ - block);
    decode_elements(*scale_, scale_row * scale_cols_ + block, n_blocks, scales);
    for (uint64_t b = 0; b < n_blocks && c < col + count; ++b) {
      const uint64_t end = std::min(col + count, (block + b + 1) * block_.cols);
      for (; c < end; ++c) dst[c - col] *= scales[b];
    }
  }
}

void SourceMatrix::decode_rows(uint64_t first, uint64_t count, float* dst) const {
  if (first > rows_ || count > rows_ - first) {
    throw Error(ErrorCode::invalid_argument, describe(*tensor_) + ": rows [" + std::to_string(first) + ", +" +
                                                 std::to_string(count) + ") outside " + std::to_string(rows_));
  }
  if (!scale_) {
    decode_elements(*tensor_, first * cols_, count * cols_, dst);
    return;
  }
  for (uint64_t r = 0; r < count; ++r) decode_span(first + r, 0, cols_, dst + r * cols_);
}

}  // namespace latte::convert
