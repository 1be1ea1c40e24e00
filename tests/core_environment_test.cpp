// The LATTE_* variables: strict parsing, ranges, the load-time check, and that the table, the readers in
// the sources and docs/environment.md name the same variables.
#include "core/environment.hpp"
#include "support/env_scope.hpp"
#include "support/temp_dir.hpp"

#include <latte/error.hpp>
#include <latte/model.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace {

using latte::ErrorCode;
using latte::test::EnvScope;
namespace env = latte::detail;

/// The message of the Error `f` throws, with its code checked; "" when it throws none.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const latte::Error& e) {
    CHECK(e.code() == ErrorCode::invalid_argument);
    return e.what();
  }
  return "";
}

/// Every variable of the table unset for the scope.
struct CleanEnvironment {
  CleanEnvironment() {
    for (const env::EnvVariable& v : env::env_variables()) {
      scopes.push_back(std::make_unique<EnvScope>(std::string(v.name).c_str(), nullptr));
    }
  }
  std::vector<std::unique_ptr<EnvScope>> scopes;
};

}  // namespace

TEST_CASE("env_flag takes 0/1 and their spellings, and rejects anything else by name") {
  {
    const EnvScope unset("LATTE_PDL", nullptr);
    CHECK(env::env_flag("LATTE_PDL", true));
    CHECK_FALSE(env::env_flag("LATTE_PDL", false));
  }
  {
    const EnvScope empty("LATTE_PDL", "");  // empty is unset
    CHECK(env::env_flag("LATTE_PDL", true));
  }
  for (const char* on : {"1", "on", "ON", "true", "True", "yes"}) {
    const EnvScope v("LATTE_PDL", on);
    CHECK_MESSAGE(env::env_flag("LATTE_PDL", false), on);
  }
  for (const char* off : {"0", "off", "FALSE", "no"}) {
    const EnvScope v("LATTE_PDL", off);
    CHECK_FALSE_MESSAGE(env::env_flag("LATTE_PDL", true), off);
  }
  for (const char* bad : {"2", "maybe", " 1", "1 ", "01x", "enable"}) {
    const EnvScope v("LATTE_PDL", bad);
    const std::string message = error_of([] { (void)env::env_flag("LATTE_PDL", true); });
    INFO(bad, " -> ", message);
    CHECK(message.find("LATTE_PDL='" + std::string(bad) + "'") != std::string::npos);
    CHECK(message.find("0 or 1") != std::string::npos);
  }
}

TEST_CASE("env_int parses a whole decimal integer inside the variable's range") {
  const auto& v = env::env_variable("LATTE_BLAS_MIN_ROWS");
  REQUIRE(v.kind == env::EnvKind::integer);
  {
    const EnvScope unset("LATTE_BLAS_MIN_ROWS", nullptr);
    CHECK(env::env_int("LATTE_BLAS_MIN_ROWS", 17) == 17);
  }
  for (int n : {static_cast<int>(v.min), 100, static_cast<int>(v.max)}) {
    const std::string text = std::to_string(n);
    const EnvScope e("LATTE_BLAS_MIN_ROWS", text.c_str());
    CHECK(env::env_int("LATTE_BLAS_MIN_ROWS", 17) == n);
  }
  for (const char* bad : {"8", "4097", "-1", "12x", "1e3", "0x20", " 32", "32.0", "99999999999999999999"}) {
    const EnvScope e("LATTE_BLAS_MIN_ROWS", bad);
    const std::string message = error_of([] { (void)env::env_int("LATTE_BLAS_MIN_ROWS", 17); });
    INFO(bad, " -> ", message);
    CHECK(message.find("LATTE_BLAS_MIN_ROWS='" + std::string(bad) + "'") != std::string::npos);
    CHECK(message.find("an integer from 9 to 4096") != std::string::npos);
  }
}

TEST_CASE("env_real and env_choice accept their forms and name the accepted ones otherwise") {
  {
    const EnvScope e("LATTE_GEMV_WAVES", "2.5");
    CHECK(env::env_real("LATTE_GEMV_WAVES", 1.0) == 2.5);
  }
  for (const char* bad : {"0", "-1", "nan", "inf", "2.5x", "1e9"}) {
    const EnvScope e("LATTE_GEMV_WAVES", bad);
    CHECK_MESSAGE(
        error_of([] { (void)env::env_real("LATTE_GEMV_WAVES", 1.0); }).find("LATTE_GEMV_WAVES") != std::string::npos,
        bad);
  }
  {
    const EnvScope e("LATTE_GEMV_X", "warp");
    CHECK(env::env_choice("LATTE_GEMV_X", "rows") == "warp");
  }
  {
    const EnvScope e("LATTE_GEMV_X", nullptr);
    CHECK(env::env_choice("LATTE_GEMV_X", "rows") == "rows");
  }
  for (const char* bad : {"row", "Rows", "rows|warp", "", "direct "}) {
    const EnvScope e("LATTE_GEMV_X", bad);
    const std::string message = error_of([] { (void)env::env_choice("LATTE_GEMV_X", "rows"); });
    if (*bad == '\0') {
      CHECK(message.empty());  // empty is unset
    } else {
      CHECK_MESSAGE(message.find("one of rows,warp,direct") != std::string::npos, bad, " -> ", message);
    }
  }
}

TEST_CASE("a reader asking for a variable the table lacks, or as another kind, is an internal error") {
  CHECK_THROWS_AS((void)env::env_variable("LATTE_NO_SUCH_THING"), latte::Error);
  try {
    (void)env::env_int("LATTE_PDL", 1);  // a flag
    FAIL("read a flag as an integer");
  } catch (const latte::Error& e) {
    CHECK(e.code() == ErrorCode::internal);
  }
}

TEST_CASE("check_environment rejects a bad value of any checked variable, and Model::load fails on it first") {
  const CleanEnvironment clean;
  CHECK_NOTHROW(env::check_environment());
  int checked = 0;
  for (const env::EnvVariable& v : env::env_variables()) {
    if (v.kind == env::EnvKind::text) continue;
    const std::string name(v.name);
    const EnvScope bad(name.c_str(), "not-a-value");
    const std::string message = error_of([] { env::check_environment(); });
    CHECK_MESSAGE(message.find(name + "='not-a-value'") != std::string::npos, name, " -> ", message);
    ++checked;
  }
  CHECK(checked >= 40);
  const std::filesystem::path model = std::filesystem::path(LATTE_SOURCE_DIR) / "models" / "latte-tiny-brown.gguf";
  {
    const EnvScope bad("LATTE_MOE_GEMV_TOKENS", "4");
    const std::string message = error_of([&] { (void)latte::Model::load(model.string()); });
    CHECK(message.find("LATTE_MOE_GEMV_TOKENS='4': expected an integer from 8 to 128") != std::string::npos);
  }
  CHECK_NOTHROW((void)latte::Model::load(model.string()));
}

TEST_CASE("environment_summary lists the set variables, in table order") {
  const CleanEnvironment clean;
  CHECK(env::environment_summary().empty());
  const EnvScope pdl("LATTE_PDL", "0");
  const EnvScope graphs("LATTE_CUDA_GRAPHS", "off");
  const EnvScope empty("LATTE_GEMV_X", "");
  CHECK(env::environment_summary() == "LATTE_CUDA_GRAPHS=off LATTE_PDL=0");
}

TEST_CASE("the table is sorted, and it, the sources' readers and docs/environment.md name the same variables") {
  const auto vars = env::env_variables();
  std::set<std::string> table;
  for (size_t i = 0; i < vars.size(); ++i) {
    CHECK(vars[i].name.starts_with("LATTE_"));
    CHECK(!vars[i].meaning.empty());
    if (i > 0) CHECK_MESSAGE(vars[i - 1].name < vars[i].name, vars[i].name);
    if (vars[i].kind == env::EnvKind::integer || vars[i].kind == env::EnvKind::real) {
      CHECK(vars[i].min <= vars[i].max);
    }
    table.insert(std::string(vars[i].name));
  }
  CHECK(table.size() == vars.size());

  // every variable the library reads goes through the table (the readers check it at run time too, but
  // only on the paths a test takes)
  const std::filesystem::path root(LATTE_SOURCE_DIR);
  std::set<std::string> read;
  for (const char* dir : {"src", "tools/latte", "include"}) {
    for (const auto& entry : std::filesystem::recursive_directory_iterator(root / dir)) {
      if (!entry.is_regular_file()) continue;
      const std::string text = latte::test::read_text_file(entry.path().string());
      // reader("LATTE_NAME": a call of one of the readers, or of getenv, with a literal name
      for (const std::string reader : {"env_flag(", "env_int(", "env_real(", "env_choice(", "getenv("}) {
        for (size_t at = text.find(reader); at != std::string::npos; at = text.find(reader, at + 1)) {
          size_t i = at + reader.size();
          while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
          if (text.compare(i, 7, "\"LATTE_") != 0) continue;
          size_t end = i + 1;
          while (end < text.size() && (std::isupper(static_cast<unsigned char>(text[end])) ||
                                       std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '_')) {
            ++end;
          }
          if (end < text.size() && text[end] == '"') read.insert(text.substr(i + 1, end - i - 1));
        }
      }
    }
  }
  for (const std::string& name : read) CHECK_MESSAGE(table.count(name) == 1, name, " is read but not in the table");
  CHECK(read.size() >= 40);

  const std::string doc = latte::test::read_text_file((root / "docs" / "environment.md").string());
  for (const std::string& name : table) {
    CHECK_MESSAGE(doc.find("`" + name + "`") != std::string::npos, name, " is missing from docs/environment.md");
  }
}
