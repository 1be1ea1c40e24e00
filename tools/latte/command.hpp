// Subcommand registry of the `latte` tool. Each cmd_*.cpp defines one command and registers it with
//   static const latte::cli::Registration reg{{"inspect", "print a GGUF file's header", run_inspect}};
#pragma once

#include <functional>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace latte::cli {

/// One subcommand. `run` gets the arguments after the subcommand name and returns the exit status.
/// It may throw latte::Error: main prints "error: <message>" on stderr and exits with status 1.
struct Command {
  std::string name;
  std::string summary;
  std::function<int(std::span<const std::string> args)> run;
};

/// All registered commands, sorted by name.
std::vector<Command>& commands();

/// Registers a command at static-initialisation time.
struct Registration {
  explicit Registration(Command command);
};

/// Small argument helpers shared by the commands.
class Args {
 public:
  explicit Args(std::span<const std::string> args) : args_(args.begin(), args.end()) {}
  /// Removes and returns the value of `--name VALUE` or `--name=VALUE` (or any alias), if present.
  std::optional<std::string> take(std::initializer_list<std::string_view> names);
  /// Removes `--name` if present and returns whether it was.
  bool flag(std::initializer_list<std::string_view> names);
  /// What is left (positional arguments). Throws Error(invalid_argument) for leftover --options.
  std::vector<std::string> positionals() const;

 private:
  std::vector<std::string> args_;
};

}  // namespace latte::cli
