#include <latte/version.hpp>

namespace latte {

const char* version_string() noexcept { return "0.1.0"; }

}  // namespace latte
