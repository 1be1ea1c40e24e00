#include "core/stream_hash.hpp"

#include <bit>
#include <cstring>

namespace latte::detail {

namespace {

static_assert(std::endian::native == std::endian::little, "latte reads and writes little-endian data");

// Odd 64-bit multipliers with well-spread bits (the golden ratio and two avalanche constants).
constexpr uint64_t kMulA = 0x9E3779B97F4A7C15ull;
constexpr uint64_t kMulB = 0xBF58476D1CE4E5B9ull;
constexpr uint64_t kMulC = 0x94D049BB133111EBull;

uint64_t load_u64(const std::byte* p) noexcept {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// One lane absorbs one word: an add, an odd multiply and a rotation are each invertible.
uint64_t absorb(uint64_t lane, uint64_t word) noexcept { return std::rotl(lane + word * kMulB, 31) * kMulA; }

uint64_t avalanche(uint64_t h) noexcept {
  h ^= h >> 30;
  h *= kMulB;
  h ^= h >> 27;
  h *= kMulC;
  h ^= h >> 31;
  return h;
}

}  // namespace

StreamHash64::StreamHash64(uint64_t seed) noexcept
    : lanes_{seed + kMulA, seed ^ kMulB, seed - kMulC, std::rotl(seed, 17) + kMulC} {}

void StreamHash64::update(std::span<const std::byte> bytes) noexcept {
  if (bytes.empty()) return;  // (its data() may be null, which memcpy must not see)
  length_ += bytes.size();
  const std::byte* p = bytes.data();
  size_t n = bytes.size();
  if (buffered_ > 0) {
    const size_t take = n < 32 - buffered_ ? n : 32 - buffered_;
    std::memcpy(stripe_ + buffered_, p, take);
    buffered_ += take;
    p += take;
    n -= take;
    if (buffered_ < 32) return;
    for (int l = 0; l < 4; ++l) lanes_[l] = absorb(lanes_[l], load_u64(stripe_ + 8 * l));
    buffered_ = 0;
  }
  uint64_t a = lanes_[0], b = lanes_[1], c = lanes_[2], d = lanes_[3];
  for (; n >= 32; p += 32, n -= 32) {
    a = absorb(a, load_u64(p));
    b = absorb(b, load_u64(p + 8));
    c = absorb(c, load_u64(p + 16));
    d = absorb(d, load_u64(p + 24));
  }
  lanes_[0] = a, lanes_[1] = b, lanes_[2] = c, lanes_[3] = d;
  if (n > 0) {
    std::memcpy(stripe_, p, n);
    buffered_ = n;
  }
}

void StreamHash64::update_u64(uint64_t value) noexcept {
  std::byte bytes[8];
  std::memcpy(bytes, &value, sizeof value);
  update(bytes);
}

void StreamHash64::update_string(std::string_view text) noexcept {
  update_u64(text.size());
  update(std::as_bytes(std::span(text.data(), text.size())));
}

uint64_t StreamHash64::digest() const noexcept {
  uint64_t h = std::rotl(lanes_[0], 1) + std::rotl(lanes_[1], 7) + std::rotl(lanes_[2], 12) + std::rotl(lanes_[3], 18);
  h ^= length_ * kMulC;
  size_t i = 0;
  for (; i + 8 <= buffered_; i += 8) h = std::rotl(h ^ (load_u64(stripe_ + i) * kMulB), 27) * kMulA + kMulC;
  for (; i < buffered_; ++i) h = std::rotl(h ^ (static_cast<uint64_t>(stripe_[i]) * kMulA), 11) * kMulB;
  return avalanche(h);
}

uint64_t hash64(std::span<const std::byte> bytes) noexcept { return hash64_seeded(bytes, 0); }

uint64_t hash64_seeded(std::span<const std::byte> bytes, uint64_t seed) noexcept {
  StreamHash64 h(seed);
  h.update(bytes);
  return h.digest();
}

}  // namespace latte::detail
