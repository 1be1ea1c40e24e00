// The LATTE_* environment variables the library reads: one table with each variable's kind, accepted
// values and meaning, and strict readers over it. A set variable whose value does not parse, or lies
// outside its range, is a latte::Error naming the variable and what it accepts, never a silent fallback
// to the default (atoi("12x") = 12, "yes" read as off, ...).
//
//   static const bool on = latte::detail::env_flag("LATTE_PDL", true);        // unset: the default
//   static const int rows = latte::detail::env_int("LATTE_BLAS_MIN_ROWS", 17);
//
// Model::load checks every set variable of the table up front (check_environment), so a bad value fails
// the load and not a kernel launch inside a CUDA graph capture. docs/environment.md lists them all.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace latte::detail {

enum class EnvKind {
  flag,     ///< 0/1 (also off/on, false/true, no/yes, any case)
  integer,  ///< a decimal integer in [min, max]
  real,     ///< a decimal number in [min, max]
  choice,   ///< one of `choices` ("rows|warp|direct")
  text,     ///< read and checked by its own reader (attention backend names, launch variables)
};

/// One variable: what it holds and what it does (the table is docs/environment.md's source of names).
struct EnvVariable {
  std::string_view name = {};
  EnvKind kind = EnvKind::flag;
  double min = 0;                 ///< integer / real: smallest accepted value
  double max = 0;                 ///< integer / real: largest accepted value
  std::string_view choices = {};  ///< choice: the accepted values, '|'-separated
  std::string_view meaning = {};  ///< one line: what it changes, and the default
};

/// Every variable the library reads, in name order.
std::span<const EnvVariable> env_variables() noexcept;

/// The table entry of `name`; Error(internal) for a name the table does not have (a reader's typo).
const EnvVariable& env_variable(std::string_view name);

/// The value of flag `name`: `fallback` when unset or empty, else its parse. Error(invalid_argument) when set
/// to anything but the accepted spellings.
bool env_flag(std::string_view name, bool fallback);

/// The value of integer `name`: `fallback` when unset or empty, else its parse, within the table's range.
int env_int(std::string_view name, int fallback);

/// The value of real `name`: `fallback` when unset or empty, else its parse, within the table's range.
double env_real(std::string_view name, double fallback);

/// The value of choice `name`: `fallback` when unset or empty, else one of the table's choices.
std::string env_choice(std::string_view name, std::string_view fallback);

/// Parses every set variable of the table by its kind (text variables are left to their readers); throws
/// the first Error. Cheap: a getenv per entry.
void check_environment();

/// "NAME=value" of every set, non-empty variable of the table, space-separated ("" when none): what a
/// benchmark ran with besides the defaults.
std::string environment_summary();

}  // namespace latte::detail
