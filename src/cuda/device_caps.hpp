// What the current CUDA device can do, read from the device itself (cudaGetDeviceProperties), and the
// switch that forces the portable kernels. Kernel dispatch depends on the device's compute capability,
// never on the architectures the binary was compiled for.
//
//   if (latte::cuda::select_kernel_path(device) == KernelPath::hopper) { /* sm_90a-only path */ }
//   latte::cuda::set_force_portable(true);   // same as LATTE_CUDA_PORTABLE=1
#pragma once

#include <cstdint>
#include <string>

namespace latte::cuda {

/// Facts about one device, cached per ordinal.
struct DeviceCaps {
  int ordinal = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;  ///< compute capability
  int sm_count = 0;                ///< multiprocessors
  int64_t l2_bytes = 0;            ///< L2 cache size
  int64_t global_bytes = 0;        ///< device memory
  int smem_per_block_optin = 0;    ///< bytes a block may get after cudaFuncSetAttribute
};

/// The capabilities of device `ordinal` (read once, then cached). Throws Error(device).
const DeviceCaps& device_caps(int ordinal);

/// Which family of kernels to run where several exist.
enum class KernelPath {
  portable,  ///< mma.sync / CUDA-core kernels: sm_90, sm_100, sm_120
  hopper,    ///< wgmma / TMA / setmaxnreg kernels: sm_90a only (compute capability 9.0)
};

/// Forces (or stops forcing) the portable kernels process-wide. The environment variable
/// LATTE_CUDA_PORTABLE=1 forces them too.
void set_force_portable(bool force) noexcept;
/// Whether the portable kernels are forced (API flag or LATTE_CUDA_PORTABLE=1).
bool portable_forced();

/// The kernel path for device `ordinal`: hopper only on compute capability 9.0, when not forced
/// portable and when a Hopper path is built in. Today every kernel of this library is portable
/// (mma.sync, CUDA cores; cuBLAS chooses its own), so this returns portable.
KernelPath select_kernel_path(int ordinal);

/// "portable" or "hopper".
const char* kernel_path_name(KernelPath path) noexcept;

}  // namespace latte::cuda
