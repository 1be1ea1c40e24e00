// Collective operations between the ranks of a tensor-parallel group. Two implementations:
// InProcessGroup (ranks are threads of one process sharing host memory; the CPU tests and the CPU
// forward pass use it) and NcclCommunicator (one GPU per rank, nccl_communicator.hpp, built with
// LATTE_NCCL). Every rank calls the same collectives in the same order.
//
//   InProcessGroup group(4);                           // ranks 0..3, one thread each
//   group.rank(r).all_reduce_sum(std::span<float>(partial));  // on every rank's thread
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace latte::detail {

/// Element type of a collective's buffers.
enum class CollectiveType {
  f32,   ///< float
  bf16,  ///< uint16_t holding bfloat16 bits; sums accumulate in fp32 where the implementation can
};

/// Bytes of one element of `type`.
constexpr size_t collective_type_size(CollectiveType type) noexcept { return type == CollectiveType::f32 ? 4 : 2; }

/// One rank's endpoint of a group. Buffers are host memory for host communicators and device memory
/// (on the rank's GPU, ordered on its stream) for device communicators. Every call is collective: all
/// ranks must make it with the same counts and types. Failures throw Error(device); when one rank
/// fails, the others' pending and later calls throw too rather than wait forever.
class Communicator {
 public:
  virtual ~Communicator() = default;

  /// This rank, 0 <= rank() < world_size().
  [[nodiscard]] virtual int rank() const noexcept = 0;
  /// Ranks in the group.
  [[nodiscard]] virtual int world_size() const noexcept = 0;

  /// data[i] = sum over ranks of data[i], in place; every rank ends with identical bits.
  virtual void all_reduce_sum(void* data, size_t count, CollectiveType type) = 0;
  /// recv[r * count + i] = rank r's send[i]; recv holds world_size() * count elements.
  virtual void all_gather(const void* send, void* recv, size_t count, CollectiveType type) = 0;
  /// Every rank's data becomes rank `root`'s.
  virtual void broadcast(void* data, size_t count, CollectiveType type, int root) = 0;

  void all_reduce_sum(std::span<float> data) { all_reduce_sum(data.data(), data.size(), CollectiveType::f32); }
  void all_reduce_sum(std::span<uint16_t> bf16) { all_reduce_sum(bf16.data(), bf16.size(), CollectiveType::bf16); }
  void all_gather(std::span<const float> send, std::span<float> recv) {
    all_gather(send.data(), recv.data(), send.size(), CollectiveType::f32);
  }
  void broadcast(std::span<float> data, int root) { broadcast(data.data(), data.size(), CollectiveType::f32, root); }
};

}  // namespace latte::detail
