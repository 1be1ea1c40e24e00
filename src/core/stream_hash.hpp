// StreamHash64: a fast 64-bit non-cryptographic hash of a byte stream, for checksums of saved
// session states and for model fingerprints. Four independent 64-bit lanes each absorb one 8-byte
// word of every 32-byte stripe (multiply, rotate, multiply: ~10 GB/s on one core); the tail and the
// total length are folded in at the end, then the result is avalanched. Every step applied to a lane
// is a bijection, so any change confined to one 8-byte word always changes the digest.
//
//   latte::detail::StreamHash64 h;  h.update(bytes);  h.update_u64(n);  uint64_t d = h.digest();
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace latte::detail {

class StreamHash64 {
 public:
  explicit StreamHash64(uint64_t seed = 0) noexcept;

  /// Absorbs `bytes`; the digest depends on the concatenation of every update, not on how it was cut.
  void update(std::span<const std::byte> bytes) noexcept;
  /// Absorbs the 8 little-endian bytes of `value`.
  void update_u64(uint64_t value) noexcept;
  /// Absorbs the length (as update_u64) and then the bytes of `text`, so that adjacent strings cannot alias.
  void update_string(std::string_view text) noexcept;

  /// The hash of everything absorbed so far (the object stays usable).
  [[nodiscard]] uint64_t digest() const noexcept;
  /// Bytes absorbed so far.
  [[nodiscard]] uint64_t length() const noexcept { return length_; }

 private:
  uint64_t lanes_[4];
  std::byte stripe_[32];  // a partial stripe waiting for more bytes
  size_t buffered_ = 0;   // bytes of stripe_ in use
  uint64_t length_ = 0;
};

/// The StreamHash64 digest of `bytes` with seed 0.
[[nodiscard]] uint64_t hash64(std::span<const std::byte> bytes) noexcept;
/// The StreamHash64 digest of `bytes` with `seed`.
[[nodiscard]] uint64_t hash64_seeded(std::span<const std::byte> bytes, uint64_t seed) noexcept;

}  // namespace latte::detail
