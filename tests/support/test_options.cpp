#include "support/test_options.hpp"

#include <cstdlib>

namespace latte::test {
namespace {
std::string& backend_storage() {
  static std::string name = [] {
    const char* env = std::getenv("LATTE_ATTENTION");
    return std::string(env && *env ? env : "mla");
  }();
  return name;
}
}  // namespace

const std::string& attention_backend() { return backend_storage(); }
void set_attention_backend(std::string name) { backend_storage() = std::move(name); }

std::string data_path(const std::string& relative) { return std::string(LATTE_TESTDATA_DIR) + "/" + relative; }

}  // namespace latte::test
