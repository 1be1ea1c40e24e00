// Sets (or unsets) an environment variable for a scope and restores its old value after.
//
//   { const latte::test::EnvScope pdl("LATTE_PDL", "0"); run(); }  // LATTE_PDL as before here
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace latte::test {

class EnvScope {
 public:
  /// value nullptr: unset for the scope.
  EnvScope(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~EnvScope() {
    if (old_) {
      ::setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }
  EnvScope(const EnvScope&) = delete;
  EnvScope& operator=(const EnvScope&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace latte::test
