// doctest entry point. Extra option: --attention=mla|standard|auto selects the attention backend
// that model-level tests use (the same as setting LATTE_ATTENTION); ctest runs the suite once per
// backend.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "support/test_options.hpp"

#include <cstring>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  std::vector<char*> passthrough;
  for (int i = 0; i < argc; ++i) {
    constexpr const char* prefix = "--attention=";
    if (std::strncmp(argv[i], prefix, std::strlen(prefix)) == 0) {
      latte::test::set_attention_backend(argv[i] + std::strlen(prefix));
      continue;
    }
    passthrough.push_back(argv[i]);
  }
  doctest::Context context;
  context.applyCommandLine(static_cast<int>(passthrough.size()), passthrough.data());
  return context.run();
}
