// Standard (decompressed K/V) decode attention; see standard_decode.hpp for the contract.
//
// One CTA (4 warps) per (head, split, sequence). A warp takes kUnroll positions at a time: each lane
// loads 16 bytes of every K row (lanes < qk/8) and V row (lanes < v/8), the q.k dot products are
// finished with butterfly shuffles (identical on every lane), and the warp keeps its own online-softmax
// state; the 4 warp states are merged through shared memory at the end. fp32 throughout (no bf16
// rounding of P), so this path is also the more precise one.
//
// Back-of-envelope (DeepSeek dims, H200 4.28 TB/s): B=64, ctx 8192, 16 heads: 64 * 8192 * 16 * 640 B
// = 5.4 GB -> 1.25 ms at copy speed, vs 604 MB / 141 us for the MLA latent cache (8.9x the bytes).
#include "cuda/standard_decode.hpp"

#include "cuda/bf16_mma.cuh"
#include "cuda/check.hpp"
#include "cuda/kv_cache_layout.cuh"
#include "cuda/launch.cuh"
#include "cuda/split_kv_combine.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

namespace latte::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kUnroll = 4;         // positions per warp per step (independent loads in flight)
constexpr int kChunkGranule = 64;  // split chunks are multiples of this many positions

struct StandardDecodeLaunch {
  StandardDecodeParams p;
  int splits;
  int chunk;
  float score_scale;   // scale * log2(e)
  float* partial_out;  // [batch * n_heads, splits, head_dim_v]
  float* partial_lse;  // [batch * n_heads, splits]
};

/// The 8 bf16 values of a 16-byte load as floats (a bf16 is the high half of the float's bits).
__device__ __forceinline__ void unpack_bf16x8(const uint4& raw, float (&x)[8]) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    x[2 * i] = __uint_as_float(words[i] << 16);
    x[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
  }
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

template <int kDimQk, int kDimV>
__global__ void __launch_bounds__(kThreads, 8) standard_decode_kernel(const StandardDecodeLaunch L) {
  wait_for_producers();  // see launch.cuh
  allow_dependents();
  constexpr int kQkLanes = kDimQk / 8;  // lanes holding 8 q/k values
  constexpr int kVLanes = kDimV / 8;    // lanes holding 8 v/o values
  static_assert(kDimQk % 8 == 0 && kDimV % 8 == 0 && kQkLanes <= 32 && kVLanes <= 32);
  __shared__ float warp_m[kWarps];
  __shared__ float warp_l[kWarps];
  __shared__ float warp_o[kWarps][kDimV];

  const StandardDecodeParams& p = L.p;
  const int h = blockIdx.x;
  const int split = blockIdx.y;
  const int b = blockIdx.z;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int kv_len = max(0, p.kv_lens[b]);
  const bool sparse = p.indices != nullptr;
  const int n_slots = sparse ? p.top_k : kv_len;
  const int begin = split * L.chunk;
  const int end = min(n_slots, begin + L.chunk);

  float q[8] = {};
  if (lane < kQkLanes) {
    const uint4 raw =
        __ldg(reinterpret_cast<const uint4*>(p.q + b * p.q_batch_stride + h * p.q_head_stride + lane * 8));
    unpack_bf16x8(raw, q);
  }
  float o[8] = {};
  float m = -INFINITY;  // running max, log2 domain
  float l = 0.0f;

  for (int base = begin + warp * kUnroll; base < end; base += kWarps * kUnroll) {
    int pos[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int slot = base + u;
      int raw = -1;
      if (slot < end) raw = sparse ? __ldg(&p.indices[static_cast<int64_t>(b) * p.index_stride + slot]) : slot;
      pos[u] = raw >= 0 && raw < kv_len ? raw : -1;
    }
    uint4 k_raw[kUnroll], v_raw[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      k_raw[u] = make_uint4(0, 0, 0, 0);
      v_raw[u] = make_uint4(0, 0, 0, 0);
      if (pos[u] < 0) continue;
      if (lane < kQkLanes) {
        const bf16* k_row = p.k_cache.data + paged_rows_offset(p.k_cache, b, pos[u]) + h * p.k_cache.head_stride;
        k_raw[u] = __ldg(reinterpret_cast<const uint4*>(k_row + lane * 8));
      }
      if (lane < kVLanes) {
        const bf16* v_row = p.v_cache.data + paged_rows_offset(p.v_cache, b, pos[u]) + h * p.v_cache.head_stride;
        v_raw[u] = __ldg(reinterpret_cast<const uint4*>(v_row + lane * 8));
      }
    }
    float s[kUnroll];
    float step_max = -INFINITY;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float k[8];
      unpack_bf16x8(k_raw[u], k);
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < 8; ++i) dot += q[i] * k[i];
      dot = warp_sum(dot);
      s[u] = pos[u] >= 0 ? dot * L.score_scale : -INFINITY;
      step_max = fmaxf(step_max, s[u]);
    }
    const float m_new = fmaxf(m, step_max);
    const float alpha = mma::exp2_rescale(m, m_new);
    m = m_new;
    l *= alpha;
#pragma unroll
    for (int i = 0; i < 8; ++i) o[i] *= alpha;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const float pu = mma::exp2_shifted(s[u], m);
      l += pu;
      float v[8];
      unpack_bf16x8(v_raw[u], v);
#pragma unroll
      for (int i = 0; i < 8; ++i) o[i] += pu * v[i];
    }
  }

  if (lane == 0) {
    warp_m[warp] = m;
    warp_l[warp] = l;
  }
  if (lane < kVLanes) {
#pragma unroll
    for (int i = 0; i < 8; ++i) warp_o[warp][lane * 8 + i] = o[i];
  }
  __syncthreads();

  float m_all = -INFINITY;
  for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, warp_m[w]);
  float weight[kWarps];
  float l_all = 0.0f;
  for (int w = 0; w < kWarps; ++w) {
    weight[w] = mma::exp2_rescale(warp_m[w], m_all);
    l_all += warp_l[w] * weight[w];
  }
  const float inv_l = l_all > 0.0f ? 1.0f / l_all : 0.0f;
  const float lse = l_all > 0.0f ? (m_all + log2f(l_all)) * kLn2 : -INFINITY;
  const int64_t row = static_cast<int64_t>(b) * p.n_heads + h;
  for (int d = threadIdx.x; d < kDimV; d += kThreads) {
    float acc = 0.0f;
    for (int w = 0; w < kWarps; ++w) acc += warp_o[w][d] * weight[w];
    acc *= inv_l;
    if (L.splits == 1) {
      if (p.out_type == AttnOutputType::f32) {
        static_cast<float*>(p.out)[row * kDimV + d] = acc;
      } else {
        static_cast<bf16*>(p.out)[row * kDimV + d] = __float2bfloat16_rn(acc);
      }
    } else {
      L.partial_out[(row * L.splits + split) * kDimV + d] = acc;
    }
  }
  if (threadIdx.x == 0) {
    if (L.splits == 1) {
      if (p.lse != nullptr) p.lse[row] = lse;
    } else {
      L.partial_lse[row * L.splits + split] = lse;
    }
  }
}

using KernelFn = void (*)(StandardDecodeLaunch);

KernelFn kernel_for(int dim_qk, int dim_v) {
  if (dim_qk == 192 && dim_v == 128) return &standard_decode_kernel<192, 128>;
  if (dim_qk == 256 && dim_v == 256) return &standard_decode_kernel<256, 256>;
  return nullptr;
}

std::string describe(const StandardDecodeParams& p) {
  return "standard_decode(batch " + std::to_string(p.batch) + ", heads " + std::to_string(p.n_heads) + ", dims " +
         std::to_string(p.head_dim_qk) + "/" + std::to_string(p.head_dim_v) + ", " +
         (p.indices ? "sparse top_k " + std::to_string(p.top_k) : "max_kv_len " + std::to_string(p.max_kv_len)) + ")";
}

void check_params(const StandardDecodeParams& p) {
  const std::string what = describe(p);
  auto fail_unless = [&](bool ok, const std::string& message) {
    require(ok, ErrorCode::invalid_argument, what + ": " + message);
  };
  fail_unless(p.batch >= 1 && p.batch <= 65535 && p.n_heads >= 1, "batch (<= 65535) and n_heads must be positive");
  fail_unless(kernel_for(p.head_dim_qk, p.head_dim_v) != nullptr,
              "head dims must be 192/128 or 256/256 (the dims of the supported models)");
  fail_unless(p.q != nullptr && p.kv_lens != nullptr && p.out != nullptr, "q, kv_lens and out must be set");
  fail_unless(reinterpret_cast<uintptr_t>(p.q) % 16 == 0 && reinterpret_cast<uintptr_t>(p.out) % 16 == 0,
              "q and out must be 16-byte aligned");
  fail_unless(p.q_batch_stride % 8 == 0 && p.q_head_stride % 8 == 0, "query strides must be multiples of 8");
  fail_unless(p.scale > 0.0f && p.scale < 1e30f, "scale must be positive and finite");
  check_paged_rows(p.k_cache, "standard_decode", "k_cache");
  check_paged_rows(p.v_cache, "standard_decode", "v_cache");
  if (p.indices != nullptr) {
    fail_unless(p.top_k >= 1 && p.index_stride >= p.top_k, "sparse mode needs 1 <= top_k <= index_stride");
  } else {
    fail_unless(p.max_kv_len >= 1, "max_kv_len must be positive");
  }
}

}  // namespace

StandardDecodePlan plan_standard_decode(const StandardDecodeParams& p, int force_splits) {
  check_params(p);
  int device = 0, sm_count = 0;
  LATTE_CUDA_CHECK(cudaGetDevice(&device));
  LATTE_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
  const int slots = p.indices ? p.top_k : p.max_kv_len;
  const int granules = (slots + kChunkGranule - 1) / kChunkGranule;
  const int64_t base_ctas = static_cast<int64_t>(p.batch) * p.n_heads;
  const int64_t wanted_ctas = int64_t{16} * std::max(1, sm_count);  // about one full-occupancy wave
  int splits = force_splits > 0 ? force_splits : static_cast<int>((wanted_ctas + base_ctas - 1) / base_ctas);
  splits = std::clamp(splits, 1, std::min(granules, 256));
  const int granules_per_split = (granules + splits - 1) / splits;
  StandardDecodePlan plan;
  plan.splits = (granules + granules_per_split - 1) / granules_per_split;
  plan.chunk = granules_per_split * kChunkGranule;
  plan.workspace_bytes =
      plan.splits > 1 ? static_cast<size_t>(base_ctas) * plan.splits * (p.head_dim_v + 1) * sizeof(float) : 0;
  return plan;
}

void run_standard_decode(const StandardDecodeParams& p, const StandardDecodePlan& plan, void* workspace,
                         size_t workspace_bytes, cudaStream_t stream) {
  check_params(p);
  const std::string what = describe(p);
  const int slots = p.indices ? p.top_k : p.max_kv_len;
  require(plan.splits >= 1 && plan.splits <= 65535 && plan.chunk > 0 &&
              static_cast<int64_t>(plan.chunk) * plan.splits >= slots,
          ErrorCode::invalid_argument, what + ": the plan does not cover this shape");
  const int64_t rows = static_cast<int64_t>(p.batch) * p.n_heads;
  if (plan.splits > 1) {
    require(workspace != nullptr && workspace_bytes >= plan.workspace_bytes &&
                reinterpret_cast<uintptr_t>(workspace) % 16 == 0,
            ErrorCode::invalid_argument,
            what + ": needs a 16-byte aligned workspace of " + std::to_string(plan.workspace_bytes) + " bytes");
  }
  StandardDecodeLaunch launch{};
  launch.p = p;
  launch.splits = plan.splits;
  launch.chunk = plan.chunk;
  launch.score_scale = p.scale * kLog2e;
  if (plan.splits > 1) {
    launch.partial_out = static_cast<float*>(workspace);
    launch.partial_lse = launch.partial_out + rows * plan.splits * p.head_dim_v;
  }
  const dim3 grid(p.n_heads, plan.splits, p.batch);
  launch_kernel(kernel_for(p.head_dim_qk, p.head_dim_v), grid, kThreads, 0, stream, launch);
  if (plan.splits > 1) {
    run_split_kv_combine({.partial_out = launch.partial_out,
                          .partial_lse = launch.partial_lse,
                          .rows = static_cast<int>(rows),
                          .splits = plan.splits,
                          .dim = p.head_dim_v,
                          .out_type = p.out_type,
                          .out = p.out,
                          .lse = p.lse},
                         stream);
  }
}

}  // namespace latte::cuda
