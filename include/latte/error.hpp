// latte::Error — the one exception type latte throws for anything a file, a caller or a user can cause.
//
//   try { auto m = latte::Model::load("bad.gguf"); }
//   catch (const latte::Error& e) { std::cerr << e.code_name() << ": " << e.what() << "\n"; }
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace latte {

/// What kind of failure an Error reports. Stable: host applications may switch on it.
enum class ErrorCode {
  invalid_argument,  ///< a caller passed a value outside the documented range
  invalid_file,      ///< a file (GGUF, safetensors, state, tokenizer) is malformed or inconsistent
  unsupported,       ///< valid input that this build cannot handle (a quant type, an architecture)
  not_found,         ///< a named thing (file, key, tensor, backend) does not exist
  io,                ///< the operating system refused a read, write, map or open
  out_of_memory,     ///< an allocation (host or device) failed; the message says how much was asked
  context_overflow,  ///< a session was asked to hold more tokens than its n_ctx
  device,            ///< a GPU or communicator failure (no device, driver error, NCCL error)
  cancelled,         ///< a progress callback asked to stop
  internal,          ///< a broken invariant inside latte: a bug, please report it
};

/// Human-readable name of an ErrorCode ("invalid_file", ...).
constexpr std::string_view error_code_name(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::invalid_argument:
      return "invalid_argument";
    case ErrorCode::invalid_file:
      return "invalid_file";
    case ErrorCode::unsupported:
      return "unsupported";
    case ErrorCode::not_found:
      return "not_found";
    case ErrorCode::io:
      return "io";
    case ErrorCode::out_of_memory:
      return "out_of_memory";
    case ErrorCode::context_overflow:
      return "context_overflow";
    case ErrorCode::device:
      return "device";
    case ErrorCode::cancelled:
      return "cancelled";
    case ErrorCode::internal:
      return "internal";
  }
  return "unknown";
}

/// The exception latte throws. what() names the file, key, tensor or byte offset at fault.
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}

  /// The failure's category.
  [[nodiscard]] ErrorCode code() const noexcept { return code_; }
  /// The category's name, e.g. "invalid_file".
  [[nodiscard]] std::string_view code_name() const noexcept { return error_code_name(code_); }

 private:
  ErrorCode code_;
};

/// Throws Error(code, message) unless `condition` holds. For checks on input, not for asserts.
inline void require(bool condition, ErrorCode code, const std::string& message) {
  if (!condition) throw Error(code, message);
}

}  // namespace latte
