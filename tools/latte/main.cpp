// `latte` — inspect, convert, tokenize, logits, generate, perplexity, bench, diagnose.
#include "command.hpp"

#include <latte/error.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

namespace latte::cli {

std::vector<Command>& commands() {
  static std::vector<Command> list;
  return list;
}

Registration::Registration(Command command) {
  auto& list = commands();
  auto at = std::lower_bound(list.begin(), list.end(), command.name,
                             [](const Command& c, const std::string& n) { return c.name < n; });
  list.insert(at, std::move(command));
}

std::optional<std::string> Args::take(std::initializer_list<std::string_view> names) {
  for (size_t i = 0; i < args_.size(); ++i) {
    for (auto name : names) {
      const std::string& a = args_[i];
      if (a == name) {
        if (i + 1 >= args_.size()) throw Error(ErrorCode::invalid_argument, "option " + a + " needs a value");
        std::string value = args_[i + 1];
        args_.erase(args_.begin() + static_cast<std::ptrdiff_t>(i), args_.begin() + static_cast<std::ptrdiff_t>(i + 2));
        return value;
      }
      if (a.size() > name.size() && a.compare(0, name.size(), name) == 0 && a[name.size()] == '=') {
        std::string value = a.substr(name.size() + 1);
        args_.erase(args_.begin() + static_cast<std::ptrdiff_t>(i));
        return value;
      }
    }
  }
  return std::nullopt;
}

bool Args::flag(std::initializer_list<std::string_view> names) {
  for (size_t i = 0; i < args_.size(); ++i) {
    for (auto name : names) {
      if (args_[i] == name) {
        args_.erase(args_.begin() + static_cast<std::ptrdiff_t>(i));
        return true;
      }
    }
  }
  return false;
}

std::vector<std::string> Args::positionals() const {
  for (const auto& a : args_) {
    if (a.size() > 1 && a[0] == '-' && !(a[1] >= '0' && a[1] <= '9')) {
      throw Error(ErrorCode::invalid_argument, "unknown option " + a);
    }
  }
  return args_;
}

}  // namespace latte::cli

namespace {
void print_usage() {
  std::fprintf(stderr, "usage: latte <command> [options]\n\ncommands:\n");
  for (const auto& c : latte::cli::commands()) std::fprintf(stderr, "  %-12s %s\n", c.name.c_str(), c.summary.c_str());
  std::fprintf(stderr, "\nRun `latte <command> --help` for a command's options.\n");
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    print_usage();
    return argc < 2 ? 1 : 0;
  }
  const std::string name = argv[1];
  const auto& list = latte::cli::commands();
  auto it = std::find_if(list.begin(), list.end(), [&](const auto& c) { return c.name == name; });
  if (it == list.end()) {
    std::fprintf(stderr, "error: unknown command '%s'\n", name.c_str());
    print_usage();
    return 1;
  }
  std::vector<std::string> args(argv + 2, argv + argc);
  try {
    return it->run(args);
  } catch (const latte::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: internal: %s\n", e.what());
    return 1;
  }
}
