// RAII owners for device memory, pinned host memory, streams and events. Plain cudaMalloc (never
// managed memory). Allocation failures say how many bytes were asked for and how many are free.
//
//   latte::cuda::DeviceBuffer<__nv_bfloat16> cache(n_tokens * 576);
//   latte::cuda::Stream stream; kernel<<<g, b, 0, stream.get()>>>(cache.data());
#pragma once

#include "cuda/check.hpp"

#include <cstddef>
#include <string>
#include <utility>

namespace latte::cuda {

/// Allocates `bytes` of device memory; throws Error(out_of_memory) naming `what`, the size and the
/// free memory on failure. Returns nullptr for 0 bytes.
void* device_alloc(size_t bytes, const char* what);
/// Frees memory from device_alloc (nullptr is fine). Never throws.
void device_free(void* ptr) noexcept;

/// A typed device array of `size()` elements. Move-only.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count, const char* what = "device buffer")
      : ptr_(static_cast<T*>(device_alloc(count * sizeof(T), what))), count_(count) {}
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      device_free(ptr_);
      ptr_ = std::exchange(o.ptr_, nullptr);
      count_ = std::exchange(o.count_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { device_free(ptr_); }

  [[nodiscard]] T* data() noexcept { return ptr_; }
  [[nodiscard]] const T* data() const noexcept { return ptr_; }
  [[nodiscard]] size_t size() const noexcept { return count_; }
  [[nodiscard]] size_t bytes() const noexcept { return count_ * sizeof(T); }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

/// Page-locked host memory (for logits and uploads). Move-only.
template <class T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t count) : count_(count) {
    if (count) LATTE_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&ptr_), count * sizeof(T)));
  }
  PinnedBuffer(PinnedBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    if (this != &o) {
      if (ptr_) cudaFreeHost(ptr_);
      ptr_ = std::exchange(o.ptr_, nullptr);
      count_ = std::exchange(o.count_, 0);
    }
    return *this;
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (ptr_) cudaFreeHost(ptr_);
  }
  [[nodiscard]] T* data() noexcept { return ptr_; }
  [[nodiscard]] const T* data() const noexcept { return ptr_; }
  [[nodiscard]] size_t size() const noexcept { return count_; }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

/// A non-blocking CUDA stream.
class Stream {
 public:
  Stream() { LATTE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  Stream(Stream&& o) noexcept : stream_(std::exchange(o.stream_, nullptr)) {}
  Stream& operator=(Stream&& o) noexcept {
    if (this != &o) {
      if (stream_) cudaStreamDestroy(stream_);
      stream_ = std::exchange(o.stream_, nullptr);
    }
    return *this;
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() {
    if (stream_) cudaStreamDestroy(stream_);
  }
  [[nodiscard]] cudaStream_t get() const noexcept { return stream_; }
  void synchronize() const { LATTE_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

 private:
  cudaStream_t stream_ = nullptr;
};

/// A CUDA event (timing enabled unless made with flags).
class Event {
 public:
  Event() { LATTE_CUDA_CHECK(cudaEventCreate(&event_)); }
  /// With cudaEventCreateWithFlags' flags (cudaEventDisableTiming: an ordering point between streams).
  explicit Event(unsigned int flags) { LATTE_CUDA_CHECK(cudaEventCreateWithFlags(&event_, flags)); }
  Event(Event&& o) noexcept : event_(std::exchange(o.event_, nullptr)) {}
  Event& operator=(Event&& o) noexcept {
    if (this != &o) {
      if (event_) cudaEventDestroy(event_);
      event_ = std::exchange(o.event_, nullptr);
    }
    return *this;
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() {
    if (event_) cudaEventDestroy(event_);
  }
  [[nodiscard]] cudaEvent_t get() const noexcept { return event_; }
  void record(cudaStream_t stream) { LATTE_CUDA_CHECK(cudaEventRecord(event_, stream)); }
  /// Milliseconds between `start` and this event (both recorded and complete).
  [[nodiscard]] float elapsed_ms_since(const Event& start) const {
    float ms = 0;
    LATTE_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, event_));
    return ms;
  }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace latte::cuda
