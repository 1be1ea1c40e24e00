// On/off switches read from the environment (LATTE_PDL=0, LATTE_GEMV_NORM=1, ...), for the call sites
// that cache them once:  static const bool on = env_switch("LATTE_X", true);
#pragma once

#include <cstdlib>
#include <string_view>

namespace latte::cuda {

/// Whether switch `name` is on: a default-on switch unless it is "0", a default-off one only when it is "1".
inline bool env_switch(const char* name, bool default_on) {
  const char* v = std::getenv(name);
  return default_on ? v == nullptr || std::string_view(v) != "0" : v != nullptr && std::string_view(v) == "1";
}

}  // namespace latte::cuda
