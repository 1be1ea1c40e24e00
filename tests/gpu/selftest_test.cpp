// The GPU self-test on this machine's first GPU: it runs, every case passes, it is fast, and
// ensure_selftest caches its verdict per architecture/driver under $XDG_CACHE_HOME/latte.
#include "support/temp_dir.hpp"

#include <latte/diagnostics.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

TEST_CASE("the GPU self-test passes on this device in under 30 s") {
  const auto t0 = std::chrono::steady_clock::now();
  const latte::diagnostics::SelftestResult r = latte::diagnostics::run_selftest(latte::Device::cuda(0));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s(%.1f s)\n", r.table.c_str(), seconds);
  REQUIRE(r.ran);
  CHECK(r.passed);
  CHECK(r.table.find("MISMATCH") == std::string::npos);
  CHECK(seconds < 30.0);
}

TEST_CASE("ensure_selftest caches a pass per architecture and driver") {
  latte::test::TempDir dir;
  const char* old = std::getenv("XDG_CACHE_HOME");
  const std::string saved = old ? old : "";
  ::setenv("XDG_CACHE_HOME", dir.path().c_str(), 1);
  ::unsetenv("LATTE_NO_SELFTEST");
  latte::diagnostics::ensure_selftest(latte::Device::cuda(0));
  int found = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path() + "/latte")) {
    const std::string name = e.path().filename().string();
    CHECK(name.starts_with("selftest-sm"));
    std::ifstream in(e.path());
    std::ostringstream s;
    s << in.rdbuf();
    CHECK(s.str().find("\"passed\": true") != std::string::npos);
    ++found;
  }
  CHECK(found == 1);
  latte::diagnostics::ensure_selftest(latte::Device::cuda(0));  // cached: returns at once
  if (old) {
    ::setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  } else {
    ::unsetenv("XDG_CACHE_HOME");
  }  ::setenv("LATTE_NO_SELFTEST", "1", 1);  // as main() set it for the other cases
}
