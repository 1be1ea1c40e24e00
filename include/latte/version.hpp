// latte's version, for host applications that check what they linked.
//
//   std::printf("latte %s\n", latte::version_string());
#pragma once

namespace latte {

/// Library version as "major.minor.patch".
const char* version_string() noexcept;

}  // namespace latte
