// KV-cache append: the listed (sequence, position) rows receive bf16(src) exactly (round to nearest
// even) at the given offset, and nothing else in the cache changes.
#include "attention_test_support.hpp"
#include "cuda/kv_cache_append.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <latte/error.hpp>

namespace {

using namespace latte::test::attention;
using latte::cuda::AppendSourceType;

constexpr uint16_t kUntouched = 0x1234;  // pattern of cache elements nobody wrote

}  // namespace

TEST_CASE("kv cache append writes the MLA latent rows (c then k_pe) through the page table") {
  for (const bool one_launch : {false, true}) {  // two appends, or c with k_pe as the tail segment
    CAPTURE(one_launch);
    Rng rng;
    const int B = 3, page_size = 16, pages_per_seq = 4, row = 576;
    const int n_pages = B * pages_per_seq;
    std::vector<int64_t> table(static_cast<size_t>(B) * pages_per_seq);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng.engine);
    std::vector<uint16_t> pool(static_cast<size_t>(n_pages) * page_size * row, kUntouched);
    // New tokens: (sequence, position) pairs, fp32 c [n, 520-stride] and k_pe [n, 64].
    const std::vector<int32_t> batch = {0, 2, 2, 1, 0};
    const std::vector<int32_t> positions = {0, 17, 63, 31, 40};
    const int n = static_cast<int>(batch.size());
    const int c_stride = 520;
    std::vector<float> c(static_cast<size_t>(n) * c_stride), k_pe(static_cast<size_t>(n) * 64);
    for (float& x : c) x = rng.uniform(-3.0f, 3.0f);
    for (float& x : k_pe) x = rng.uniform(-3.0f, 3.0f);

    auto pool_device = upload(pool);
    auto table_device = upload(table);
    auto batch_device = upload(batch);
    auto positions_device = upload(positions);
    auto c_device = upload(c);
    auto k_pe_device = upload(k_pe);
    const latte::cuda::PagedRows<__nv_bfloat16> cache{.data = reinterpret_cast<__nv_bfloat16*>(pool_device.data()),
                                                      .page_table = table_device.data(),
                                                      .page_stride = int64_t{page_size} * row,
                                                      .token_stride = row,
                                                      .page_size = page_size,
                                                      .page_table_stride = pages_per_seq};
    latte::cuda::KvCacheAppendParams c_append{.src = c_device.data(),
                                              .src_type = AppendSourceType::f32,
                                              .src_token_stride = c_stride,
                                              .n_tokens = n,
                                              .dim = 512,
                                              .dst = cache,
                                              .dst_offset = 0,
                                              .batch_index = batch_device.data(),
                                              .positions = positions_device.data()};
    if (one_launch) {
      c_append.tail_src = k_pe_device.data();
      c_append.tail_src_token_stride = 64;
      c_append.tail_dim = 64;
      c_append.tail_dst_offset = 512;
      latte::cuda::run_kv_cache_append(c_append, nullptr);
    } else {
      latte::cuda::run_kv_cache_append(c_append, nullptr);
      latte::cuda::run_kv_cache_append({.src = k_pe_device.data(),
                                        .src_type = AppendSourceType::f32,
                                        .src_token_stride = 64,
                                        .n_tokens = n,
                                        .dim = 64,
                                        .dst = cache,
                                        .dst_offset = 512,
                                        .batch_index = batch_device.data(),
                                        .positions = positions_device.data()},
                                       nullptr);
    }
    const std::vector<uint16_t> got = download(pool_device.data(), pool.size());
    std::vector<uint16_t> want = pool;
    for (int i = 0; i < n; ++i) {
      const int page = table[static_cast<size_t>(batch[i]) * pages_per_seq + positions[i] / page_size];
      const size_t base = (static_cast<size_t>(page) * page_size + positions[i] % page_size) * row;
      for (int d = 0; d < 512; ++d) want[base + d] = bf16_bits(c[static_cast<size_t>(i) * c_stride + d]);
      for (int d = 0; d < 64; ++d) want[base + 512 + d] = bf16_bits(k_pe[static_cast<size_t>(i) * 64 + d]);
    }
    size_t differences = 0, first = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      if (want[i] != got[i] && differences++ == 0) first = i;
    }
    CHECK_MESSAGE(differences == 0, "kv_cache_append mla [seed "
                                        << rng.seed << "]: " << differences << " elements differ, first at " << first
                                        << " (want 0x" << std::hex << want[first] << ", got 0x" << got[first] << ")");
  }
}

TEST_CASE("kv cache append writes per-head bf16 K rows into a contiguous head-major cache") {
  Rng rng;
  const int heads = 4, dim = 192, capacity = 40, n = 3;
  const int64_t head_stride = int64_t{capacity} * dim;  // [1, N, capacity, D]
  std::vector<uint16_t> cache(static_cast<size_t>(heads) * capacity * dim, kUntouched);
  const Bf16Values src = random_bf16(static_cast<size_t>(n) * heads * (dim + 8), rng);  // head stride dim + 8
  const std::vector<int32_t> positions = {39, 0, 7};
  auto cache_device = upload(cache);
  auto src_device = upload(src.bits);
  auto positions_device = upload(positions);
  latte::cuda::run_kv_cache_append({.src = src_device.data(),
                                    .src_type = AppendSourceType::bf16,
                                    .src_token_stride = int64_t{heads} * (dim + 8),
                                    .src_head_stride = dim + 8,
                                    .n_tokens = n,
                                    .n_heads = heads,
                                    .dim = dim,
                                    .dst = {.data = reinterpret_cast<__nv_bfloat16*>(cache_device.data()),
                                            .page_stride = heads * head_stride,
                                            .token_stride = dim,
                                            .head_stride = head_stride},
                                    .positions = positions_device.data()},
                                   nullptr);
  const std::vector<uint16_t> got = download(cache_device.data(), cache.size());
  std::vector<uint16_t> want = cache;
  for (int i = 0; i < n; ++i) {
    for (int h = 0; h < heads; ++h) {
      for (int d = 0; d < dim; ++d) {
        want[h * head_stride + static_cast<int64_t>(positions[i]) * dim + d] =
            src.bits[(static_cast<size_t>(i) * heads + h) * (dim + 8) + d];
      }
    }
  }
  CHECK_MESSAGE(want == got, "kv_cache_append head-major [seed " << rng.seed << "]: cache differs");
}

TEST_CASE("kv cache append broadcasts one bf16 row to every head (the decompressed prefill's k_pe)") {
  // More (token, head) rows than one wave of the launch's threads takes at once, so every thread strides on;
  // each of the 16 heads' rows of K [n, 16, 192] gets the token's k_pe at 128 onwards. The launch copies 8
  // values per access where every address allows it: a width that is not a multiple of 8 leaves a short
  // last unit, a source one element off 16 bytes makes it copy value by value.
  struct Shape {
    int rope;        // values per row
    int src_offset;  // first value inside the latent row (512: k_pe)
    int latent_row;  // source token stride
  };
  for (const Shape shape : {Shape{64, 512, 576}, Shape{60, 512, 576}, Shape{64, 513, 577}}) {
    CAPTURE(shape.rope);
    CAPTURE(shape.src_offset);
    Rng rng;
    const int heads = 16, qk = 192, nope = 128, n = 700;
    std::vector<uint16_t> k(static_cast<size_t>(n) * heads * qk, kUntouched);
    const Bf16Values cache = random_bf16(static_cast<size_t>(n) * shape.latent_row, rng);
    std::vector<int32_t> positions(static_cast<size_t>(n));
    std::iota(positions.begin(), positions.end(), 0);
    std::shuffle(positions.begin(), positions.end(), rng.engine);
    auto k_device = upload(k);
    auto cache_device = upload(cache.bits);
    auto positions_device = upload(positions);
    latte::cuda::run_kv_cache_append(
        {.src = reinterpret_cast<const __nv_bfloat16*>(cache_device.data()) + shape.src_offset,
         .src_type = AppendSourceType::bf16,
         .src_token_stride = shape.latent_row,
         .src_head_stride = 0,
         .n_tokens = n,
         .n_heads = heads,
         .dim = shape.rope,
         .dst = {.data = reinterpret_cast<__nv_bfloat16*>(k_device.data()),
                 .token_stride = heads * qk,
                 .head_stride = qk},
         .dst_offset = nope,
         .positions = positions_device.data()},
        nullptr);
    const std::vector<uint16_t> got = download(k_device.data(), k.size());
    std::vector<uint16_t> want = k;
    for (int i = 0; i < n; ++i) {
      for (int h = 0; h < heads; ++h) {
        for (int d = 0; d < shape.rope; ++d) {
          want[(static_cast<size_t>(positions[i]) * heads + h) * qk + nope + d] =
              cache.bits[static_cast<size_t>(i) * shape.latent_row + shape.src_offset + d];
        }
      }
    }
    size_t differences = 0;
    for (size_t i = 0; i < want.size(); ++i) differences += want[i] != got[i] ? 1 : 0;
    CHECK_MESSAGE(differences == 0, "kv_cache_append broadcast [seed " << rng.seed << "]: " << differences << " of "
                                                                       << want.size() << " elements differ");
  }
}

TEST_CASE("kv cache append rejects missing pointers with latte::Error") {
  latte::cuda::KvCacheAppendParams p;
  p.n_tokens = 1;
  p.dim = 4;
  CHECK_THROWS_AS(latte::cuda::run_kv_cache_append(p, nullptr), latte::Error);
}
