// Helpers of the GPU tests: random valid GGUF rows of every type, uploads/downloads, poisoned
// outputs, and comparisons that print which kernel, which shape, the error and the first bad index.
#pragma once

#include <latte/model.hpp>
#include <latte/quant.hpp>

#include <cuda_runtime.h>

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cuda/device_buffer.hpp"

namespace latte::test::gpu {

using Rng = std::mt19937_64;

/// A fresh generator seeded from the test's name plus a random device (printed on failure).
Rng make_rng(const std::string& label);

/// `rows` random rows of `k` values of `type`: random bytes with sane scale fields (no NaN/Inf).
std::vector<uint8_t> random_rows(GgmlType type, int64_t rows, int64_t k, Rng& rng);
/// CPU reference: dequantize_row on every row -> [rows, k] floats.
std::vector<float> dequantize_reference(GgmlType type, const std::vector<uint8_t>& bytes, int64_t rows, int64_t k);
/// Normal(0, sigma) floats.
std::vector<float> random_floats(size_t n, Rng& rng, float sigma = 1.0f);
/// Round to bf16 and back (round to nearest even), the CPU twin of __float2bfloat16_rn.
float round_bf16(float x);

/// Every GPU-supported type, and the names used in messages.
const std::vector<GgmlType>& gpu_types();
std::string type_label(GgmlType type);

template <class T>
cuda::DeviceBuffer<T> upload(const std::vector<T>& host) {
  cuda::DeviceBuffer<T> d(host.size(), "test upload");
  if (!host.empty())
    LATTE_CUDA_CHECK(cudaMemcpy(d.data(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}
template <class T>
std::vector<T> download(const T* device, size_t n) {
  std::vector<T> host(n);
  LATTE_CUDA_CHECK(cudaDeviceSynchronize());
  if (n) LATTE_CUDA_CHECK(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}
/// Fills `bytes` at `device` with 0xFF (a NaN in fp32 and bf16): unwritten outputs show up as NaN.
void poison(void* device, size_t bytes);

/// Result of comparing an output against a reference.
struct Comparison {
  double rel_err = 0;  ///< ||out - ref|| / ||ref||
  double max_abs_err = 0;
  int64_t max_err_index = -1;
  int64_t nan_count = 0;  ///< NaN or Inf outputs (poisoned = never written)
  int64_t first_nan = -1;
};
Comparison compare(const std::vector<float>& out, const std::vector<double>& ref);

/// Checks cmp against tol with a message naming kernel and shape; returns whether it passed.
/// Non-fatal (doctest CHECK), so the test continues to the next case.
bool check_close(const std::string& kernel, const std::string& shape, const Comparison& cmp, double tol);

/// Prints "case: <what>" on stderr when LATTE_GPU_TEST_TRACE is set, so that a crash (a sticky CUDA
/// error) can be attributed to the last case started. scripts/gpu-check.sh sets it.
void trace(const std::string& what);

/// bf16 bits -> float.
float bf16_to_float(uint16_t bits);

/// Greedy continuation of n tokens after `prompt` in a fresh session (n_ctx 128) with `backend`; when
/// min_margin is set, the smallest top-2 logit margin seen over the n steps.
std::vector<Token> greedy(const Model& model, const std::string& backend, const std::vector<Token>& prompt, int n,
                          float* min_margin);

/// Logits of every prompt position (one eval, n_ctx 512), then of each decoded token (one eval each).
std::vector<float> run_session(const Model& model, const std::string& backend, std::span<const Token> prompt,
                               std::span<const Token> decode);

/// Whether every value is finite.
bool all_finite(std::span<const float> v);

/// Truncation against a fresh session, checked: one session evaluates `first`, truncates to `keep` and
/// evaluates `other`; a fresh one evaluates first[0, keep) and `other` in one eval (with `other` as long as
/// first's dropped tail, the kept rows take the same kernels in both); a third keeps all of `first` before
/// `other` (the control). The new rows are evaluated in chunks of other lengths in the two sessions, so a
/// routing or DSA selection near-tie may flip at a few positions: at most max(1, n / 6) of other's positions may be
/// over the bf16 bound 2e-2, the median must be within 5e-3, and the control must be over 8e-2 at half the positions or
/// more (as rows that survived a truncation would be). Prints the figures after `label`.
void check_truncation(const Model& model, const std::string& backend, std::span<const Token> first, int keep,
                      std::span<const Token> other, const std::string& label);

}  // namespace latte::test::gpu
