#include "gpu_test_support.hpp"

#include "support/random_models.hpp"

#include <doctest/doctest.h>
#include <latte/quant_blocks.hpp>
#include <latte/session.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace latte::test::gpu {

Rng make_rng(const std::string& label) {
  const uint64_t seed = std::random_device{}();
  MESSAGE(label << ": seed " << seed);
  return Rng(seed);
}

namespace {

void put_half(std::vector<uint8_t>& b, size_t at, float v) {
  const uint16_t h = fp32_to_fp16(v);
  std::memcpy(b.data() + at, &h, 2);
}

}  // namespace

std::vector<uint8_t> random_rows(GgmlType type, int64_t rows, int64_t k, Rng& rng) {
  const size_t bytes = static_cast<size_t>(row_bytes(type, static_cast<uint64_t>(k))) * static_cast<size_t>(rows);
  std::vector<uint8_t> b(bytes);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> mag(0.5f, 1.5f);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto sign = [&] { return byte(rng) & 1 ? -1.0f : 1.0f; };
  if (type == GgmlType::f32 || type == GgmlType::f16 || type == GgmlType::bf16) {
    const size_t n = static_cast<size_t>(rows * k);
    for (size_t i = 0; i < n; ++i) {
      const float v = normal(rng);
      if (type == GgmlType::f32) {
        std::memcpy(b.data() + 4 * i, &v, 4);
      } else {
        const uint16_t h = type == GgmlType::f16 ? fp32_to_fp16(v) : fp32_to_bf16(v);
        std::memcpy(b.data() + 2 * i, &h, 2);
      }
    }
    return b;
  }
  for (auto& x : b) x = static_cast<uint8_t>(byte(rng));
  const auto& tr = type_traits(type);
  const size_t n_blocks = bytes / tr.block_bytes;
  for (size_t blk = 0; blk < n_blocks; ++blk) {
    const size_t o = blk * tr.block_bytes;
    switch (type) {
      case GgmlType::q4_0:
        put_half(b, o, sign() * 0.1f * mag(rng));
        break;
      case GgmlType::q5_0:
        put_half(b, o, sign() * 0.05f * mag(rng));
        break;
      case GgmlType::q8_0:
        put_half(b, o, sign() * 0.01f * mag(rng));
        break;
      case GgmlType::q4_1:
      case GgmlType::q5_1:
        put_half(b, o, 0.1f * mag(rng));
        put_half(b, o + 2, -0.8f * mag(rng));
        break;
      case GgmlType::q2_k:
        put_half(b, o + 80, 0.05f * mag(rng)), put_half(b, o + 82, 0.02f * mag(rng));
        break;
      case GgmlType::q3_k:
        put_half(b, o + 108, 0.01f * mag(rng));
        break;
      case GgmlType::q4_k:
      case GgmlType::q5_k:
        put_half(b, o, 0.005f * mag(rng));
        put_half(b, o + 2, 0.01f * mag(rng));
        break;
      case GgmlType::q6_k:
        put_half(b, o + 208, 0.002f * mag(rng));
        break;
      case GgmlType::mxfp4:
        b[o] = static_cast<uint8_t>(120 + byte(rng) % 10);
        break;
      case GgmlType::iq4_nl:
        put_half(b, o, sign() * 0.01f * mag(rng));
        break;
      case GgmlType::iq4_xs:  // the random scale bytes give sub-block factors ls - 32 in -32 .. 31
        put_half(b, o, 0.0005f * mag(rng));
        break;
      default:
        FAIL("random_rows: no generator for " << type_label(type));
    }
  }
  return b;
}

std::vector<float> dequantize_reference(GgmlType type, const std::vector<uint8_t>& bytes, int64_t rows, int64_t k) {
  std::vector<float> out(static_cast<size_t>(rows * k));
  const size_t rb = row_bytes(type, static_cast<uint64_t>(k));
  for (int64_t r = 0; r < rows; ++r) dequantize_row(type, bytes.data() + r * rb, out.data() + r * k, k);
  return out;
}

std::vector<float> random_floats(size_t n, Rng& rng, float sigma) {
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

void trace(const std::string& what) {
  static const bool enabled = std::getenv("LATTE_GPU_TEST_TRACE") != nullptr;
  if (enabled) std::fprintf(stderr, "case: %s\n", what.c_str());
}

float round_bf16(float x) { return bf16_to_fp32(fp32_to_bf16(x)); }
float bf16_to_float(uint16_t bits) { return bf16_to_fp32(bits); }

const std::vector<GgmlType>& gpu_types() {
  static const std::vector<GgmlType> types = {GgmlType::f32,   GgmlType::f16,  GgmlType::bf16,   GgmlType::q4_0,
                                              GgmlType::q4_1,  GgmlType::q5_0, GgmlType::q5_1,   GgmlType::q8_0,
                                              GgmlType::mxfp4, GgmlType::q2_k, GgmlType::q3_k,   GgmlType::q4_k,
                                              GgmlType::q5_k,  GgmlType::q6_k, GgmlType::iq4_nl, GgmlType::iq4_xs};
  return types;
}

std::string type_label(GgmlType type) { return std::string(type_traits(type).name); }

void poison(void* device, size_t bytes) { LATTE_CUDA_CHECK(cudaMemset(device, 0xFF, bytes)); }

Comparison compare(const std::vector<float>& out, const std::vector<double>& ref) {
  Comparison c;
  double err2 = 0, ref2 = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) {
      if (c.first_nan < 0) c.first_nan = static_cast<int64_t>(i);
      ++c.nan_count;
      continue;
    }
    const double e = std::abs(static_cast<double>(out[i]) - ref[i]);
    err2 += e * e;
    ref2 += ref[i] * ref[i];
    if (e > c.max_abs_err) c.max_abs_err = e, c.max_err_index = static_cast<int64_t>(i);
  }
  c.rel_err = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  return c;
}

bool check_close(const std::string& kernel, const std::string& shape, const Comparison& cmp, double tol) {
  std::ostringstream m;
  m << kernel << " [" << shape << "]: rel err " << cmp.rel_err << " (tol " << tol << "), max abs err "
    << cmp.max_abs_err << " at " << cmp.max_err_index << ", NaN/unwritten " << cmp.nan_count;
  if (cmp.first_nan >= 0) m << " (first at " << cmp.first_nan << ")";
  const bool ok = cmp.nan_count == 0 && cmp.rel_err <= tol;
  if (!ok) {
    FAIL_CHECK(m.str());
  } else {
    CHECK(ok);
  }
  return ok;
}

std::vector<float> run_session(const Model& model, const std::string& backend, std::span<const Token> prompt,
                               std::span<const Token> decode) {
  Session s(model, {.n_ctx = 512, .attention = backend, .logits_all = true});
  s.eval(prompt);
  std::vector<float> out;
  for (int i = 0; i < static_cast<int>(prompt.size()); ++i) {
    const auto l = s.logits(i);
    out.insert(out.end(), l.begin(), l.end());
  }
  for (Token t : decode) {
    s.eval(std::span(&t, 1));
    const auto l = s.logits();
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

bool all_finite(std::span<const float> v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
}

void check_truncation(const Model& model, const std::string& backend, std::span<const Token> first, int keep,
                      std::span<const Token> other, const std::string& label) {
  constexpr double kBound = 2e-2;  // bf16 logits bound per position
  const SessionParams params{.n_ctx = 128, .attention = backend, .logits_all = true};
  Session truncated(model, params), fresh(model, params), kept(model, params);
  truncated.eval(first);
  truncated.truncate(keep);
  truncated.eval(other);
  // the fresh session takes the kept tokens and the new ones in one eval of first's length, so that the
  // kept rows go through the same kernels as in the truncated session's first eval (a 12-row and a 30-row
  // step take different paths, whose roundings may flip a near-tie in the kept rows, which every later
  // position then reads)
  std::vector<Token> joined(first.begin(), first.begin() + keep);
  joined.insert(joined.end(), other.begin(), other.end());
  fresh.eval(joined);
  kept.eval(first);
  kept.eval(other);
  const int n = static_cast<int>(other.size());
  std::vector<double> errors;
  int outside = 0, control_far = 0;
  for (int i = 0; i < n; ++i) {
    errors.push_back(relative_error(truncated.logits(i), fresh.logits(keep + i)));
    outside += errors.back() > kBound ? 1 : 0;
    control_far += relative_error(kept.logits(i), fresh.logits(keep + i)) > 4 * kBound ? 1 : 0;
  }
  std::sort(errors.begin(), errors.end());
  const double median = errors[errors.size() / 2];
  std::printf(
      "%s, eval %zu, truncate(%d), eval %d new vs eval %d kept + %d new: median error %.3g, worst %.3g, %d of %d "
      "over %.0e (without the truncation: %d of %d over %.0e)\n",
      label.c_str(), first.size(), keep, n, keep, n, median, errors.back(), outside, n, kBound, control_far, n,
      4 * kBound);
  // A near-tie flip (expert routing, or a DSA top-k selection, which every later position makes anew
  // over the kept rows) may push a few positions over the bound: at most one in six. Rows surviving
  // the truncation would move the median and most positions, as the control shows.
  CHECK(outside <= std::max(1, n / 6));
  CHECK(median <= kBound / 4);
  CHECK(control_far >= (n + 1) / 2);
}

std::vector<Token> greedy(const Model& model, const std::string& backend, const std::vector<Token>& prompt, int n,
                          float* min_margin) {
  Session s(model, {.n_ctx = 128, .attention = backend});
  s.eval(prompt);
  std::vector<Token> out;
  float margin = INFINITY;
  for (int i = 0; i < n; ++i) {
    const auto l = s.logits();
    float first = -INFINITY, second = -INFINITY;
    for (float v : l) {
      if (v > first) {
        second = first;
        first = v;
      } else if (v > second) {
        second = v;
      }
    }
    margin = std::min(margin, first - second);
    const auto next = static_cast<Token>(std::max_element(l.begin(), l.end()) - l.begin());
    out.push_back(next);
    s.eval(std::span(&next, 1));
  }
  if (min_margin) *min_margin = margin;
  return out;
}

}  // namespace latte::test::gpu
