// dequantize_rows(): one warp per output row, walking the row in steps of 1024 values; quantized rows
// are staged with coalesced 16-byte loads and realigned (row_staging), each lane decodes 32 values
// and writes them with 16-byte stores. Bandwidth-bound: bytes = source bytes + output bytes.
#include "cuda/dequantize.hpp"

#include <latte/error.hpp>

#include <cuda_bf16.h>

#include <cstdint>
#include <string>

#include "cuda/check.hpp"
#include "cuda/gemv_quant.hpp"
#include "cuda/launch.cuh"
#include "cuda/quant_decode.cuh"
#include "cuda/row_staging.cuh"

namespace latte::cuda {
namespace {

constexpr int kDequantWarps = 4;

template <GgmlType T>
struct DequantTraits {
  using Block = quant::BlockTraits<T>;
  static constexpr int step_values = 32 * 32;
  static constexpr int step_bytes = step_values / Block::values * Block::bytes;
  static constexpr int chunks_per_lane = ((step_bytes + 15 + 15) / 16 + 31) / 32;
  static constexpr int stage_bytes = 16 * 32 * chunks_per_lane;
};

template <GgmlType T, class Out>
__global__ void __launch_bounds__(32 * kDequantWarps) dequantize_kernel(const DequantizeParams p) {
  wait_for_producers();  // see launch.cuh
  allow_dependents();
  using Tr = DequantTraits<T>;
  using Block = quant::BlockTraits<T>;
  constexpr int CPL = Tr::chunks_per_lane;
  __shared__ __align__(16) uint8_t stage[kDequantWarps][Tr::stage_bytes];
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int row = static_cast<int>(blockIdx.x) * kDequantWarps + warp;
  if (row >= p.n_rows) return;  // warp-uniform
  int src_row = row;
  if (p.row_ids != nullptr) src_row = min(max(p.row_ids[row], 0), p.n_source_rows - 1);  // defensive clamp
  const int64_t row_bytes = static_cast<int64_t>(p.k) / Block::values * Block::bytes;
  const uint8_t* lo = static_cast<const uint8_t*>(p.weight);
  const uint8_t* hi = lo + p.weight_bytes;
  const uint8_t* src = lo + src_row * row_bytes;
  Out* dst = static_cast<Out*>(p.out) + row * p.out_stride;

  for (int k0 = 0; k0 < p.k; k0 += Tr::step_values) {
    const int step_values = min(Tr::step_values, p.k - k0);
    const uint8_t* blocks = src + static_cast<int64_t>(k0) / Block::values * Block::bytes;
    if constexpr (!Block::is_float) {
      uint4 regs[CPL];
      const StagedRange range =
          stage_begin<CPL>(blocks, step_values / Block::values * Block::bytes, lo, hi, lane, regs);
      stage_finish<CPL>(range, regs, stage[warp], lane);
      __syncwarp();
      blocks = stage[warp];
    }
    if (32 * lane < step_values) {
      float v[32];
      quant::decode_values<T>(blocks, lane, v);
      Out* o = dst + k0 + 32 * lane;
      if constexpr (sizeof(Out) == 2) {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          uint32_t w[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const __nv_bfloat162 pair = __floats2bfloat162_rn(v[8 * c + 2 * i], v[8 * c + 2 * i + 1]);
            w[i] = *reinterpret_cast<const uint32_t*>(&pair);
          }
          reinterpret_cast<uint4*>(o)[c] = make_uint4(w[0], w[1], w[2], w[3]);
        }
      } else {
#pragma unroll
        for (int c = 0; c < 8; ++c) {
          reinterpret_cast<float4*>(o)[c] = make_float4(v[4 * c], v[4 * c + 1], v[4 * c + 2], v[4 * c + 3]);
        }
      }
    }
    __syncwarp();
  }
}

void require_arg(bool ok, const std::string& what) {
  if (!ok) throw Error(ErrorCode::invalid_argument, "dequantize_rows: " + what);
}

}  // namespace

template <GgmlType T>
void launch_dequantize(const DequantizeParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((p.n_rows + kDequantWarps - 1) / kDequantWarps));
  if (p.out_type == DequantOut::bf16) {
    launch_kernel(dequantize_kernel<T, __nv_bfloat16>, grid, 32 * kDequantWarps, 0, stream, p);
  } else {
    launch_kernel(dequantize_kernel<T, float>, grid, 32 * kDequantWarps, 0, stream, p);
  }
}

void dequantize_rows(const DequantizeParams& p, cudaStream_t stream) {
  const auto type_name = std::string(type_traits(p.type).name);
  if (!gemv_supports(p.type)) throw Error(ErrorCode::unsupported, "dequantize_rows: no decoder for type " + type_name);
  const bool is_float = p.type == GgmlType::f32 || p.type == GgmlType::f16 || p.type == GgmlType::bf16;
  const int64_t block_values = is_float ? 32 : type_traits(p.type).block_values;
  require_arg(p.weight != nullptr && p.out != nullptr, "weight and out must be set");
  require_arg(p.n_rows >= 0 && p.k > 0 && p.n_source_rows > 0, "need k > 0, n_source_rows > 0, n_rows >= 0");
  require_arg(p.k % block_values == 0, "k = " + std::to_string(p.k) + " is not a multiple of " +
                                           std::to_string(block_values) + " for type " + type_name);
  const int64_t rb = static_cast<int64_t>(row_bytes(p.type, static_cast<uint64_t>(p.k)));
  require_arg(p.weight_bytes >= rb * p.n_source_rows, "weight_bytes = " + std::to_string(p.weight_bytes) +
                                                          " is less than n_source_rows rows (" +
                                                          std::to_string(rb * p.n_source_rows) + " bytes)");
  require_arg(p.row_ids != nullptr || p.n_rows <= p.n_source_rows, "n_rows > n_source_rows without row_ids");
  require_arg(p.out_stride >= p.k && p.out_stride % 8 == 0, "out_stride must be >= k and a multiple of 8");
  require_arg(reinterpret_cast<uintptr_t>(p.out) % 16 == 0, "out must be 16-byte aligned");
  if (is_float) require_arg(reinterpret_cast<uintptr_t>(p.weight) % 16 == 0, "float rows must be 16-byte aligned");
  if (p.n_rows == 0) return;
  switch (p.type) {
    case GgmlType::f32:
      return launch_dequantize<GgmlType::f32>(p, stream);
    case GgmlType::f16:
      return launch_dequantize<GgmlType::f16>(p, stream);
    case GgmlType::bf16:
      return launch_dequantize<GgmlType::bf16>(p, stream);
    case GgmlType::q4_0:
      return launch_dequantize<GgmlType::q4_0>(p, stream);
    case GgmlType::q4_1:
      return launch_dequantize<GgmlType::q4_1>(p, stream);
    case GgmlType::q5_0:
      return launch_dequantize<GgmlType::q5_0>(p, stream);
    case GgmlType::q5_1:
      return launch_dequantize<GgmlType::q5_1>(p, stream);
    case GgmlType::q8_0:
      return launch_dequantize<GgmlType::q8_0>(p, stream);
    case GgmlType::mxfp4:
      return launch_dequantize<GgmlType::mxfp4>(p, stream);
    case GgmlType::q2_k:
      return launch_dequantize<GgmlType::q2_k>(p, stream);
    case GgmlType::q3_k:
      return launch_dequantize<GgmlType::q3_k>(p, stream);
    case GgmlType::q4_k:
      return launch_dequantize<GgmlType::q4_k>(p, stream);
    case GgmlType::q5_k:
      return launch_dequantize<GgmlType::q5_k>(p, stream);
    case GgmlType::q6_k:
      return launch_dequantize<GgmlType::q6_k>(p, stream);
    case GgmlType::iq4_nl:
      return launch_dequantize<GgmlType::iq4_nl>(p, stream);
    case GgmlType::iq4_xs:
      return launch_dequantize<GgmlType::iq4_xs>(p, stream);
    default:
      break;
  }
  throw Error(ErrorCode::internal, "dequantize_rows: dispatch missed type " + type_name);
}

double dequantize_min_bytes(const DequantizeParams& p) {
  const double out_bytes = p.out_type == DequantOut::bf16 ? 2.0 : 4.0;
  return static_cast<double>(p.n_rows) *
         (static_cast<double>(row_bytes(p.type, static_cast<uint64_t>(p.k))) + out_bytes * p.k);
}

}  // namespace latte::cuda
