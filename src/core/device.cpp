#include <latte/device.hpp>
#include <latte/error.hpp>

#include <charconv>

#include "cuda/runtime_probe.hpp"

namespace latte {

Device Device::parse(const std::string& text) {
  if (text == "cpu") return cpu();
  if (text == "cuda" || text == "gpu") return cuda(0);
  if (text.rfind("cuda:", 0) == 0) {
    int ordinal = -1;
    const char* first = text.data() + 5;
    const char* last = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(first, last, ordinal);
    if (ec == std::errc() && ptr == last && ordinal >= 0) return cuda(ordinal);
  }
  throw Error(ErrorCode::invalid_argument, "invalid device '" + text + "': expected cpu, cuda or cuda:N");
}

int Device::cuda_device_count() noexcept { return cuda::probe_device_count(); }

std::string Device::to_string() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

}  // namespace latte
