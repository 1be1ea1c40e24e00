#include "cuda/device_caps.hpp"

#include "core/environment.hpp"

#include <latte/error.hpp>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "cuda/check.hpp"

namespace latte::cuda {
namespace {

std::atomic<bool> g_force_portable{false};

/// Set to true once a Hopper-only kernel is part of the library.
constexpr bool kHopperPathBuiltIn = false;

}  // namespace

const DeviceCaps& device_caps(int ordinal) {
  static std::mutex mutex;
  static std::map<int, std::unique_ptr<DeviceCaps>> cache;
  std::lock_guard lock(mutex);
  auto& slot = cache[ordinal];
  if (!slot) {
    cudaDeviceProp prop{};
    LATTE_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal));
    auto caps = std::make_unique<DeviceCaps>();
    caps->ordinal = ordinal;
    caps->name = prop.name;
    caps->cc_major = prop.major;
    caps->cc_minor = prop.minor;
    caps->sm_count = prop.multiProcessorCount;
    caps->l2_bytes = prop.l2CacheSize;
    caps->global_bytes = static_cast<int64_t>(prop.totalGlobalMem);
    caps->smem_per_block_optin = static_cast<int>(prop.sharedMemPerBlockOptin);
    slot = std::move(caps);
  }
  return *slot;
}

void set_force_portable(bool force) noexcept { g_force_portable.store(force); }

bool portable_forced() {
  if (g_force_portable.load()) return true;
  return latte::detail::env_flag("LATTE_CUDA_PORTABLE", false);
}

KernelPath select_kernel_path(int ordinal) {
  const DeviceCaps& caps = device_caps(ordinal);
  const bool hopper = caps.cc_major == 9 && caps.cc_minor == 0;
  return (kHopperPathBuiltIn && hopper && !portable_forced()) ? KernelPath::hopper : KernelPath::portable;
}

const char* kernel_path_name(KernelPath path) noexcept { return path == KernelPath::hopper ? "hopper" : "portable"; }

}  // namespace latte::cuda
