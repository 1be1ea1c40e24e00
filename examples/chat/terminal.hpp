// The terminal side of latte-chat: Ctrl-C (SIGINT) as a flag instead of an exit, line input that a
// Ctrl-C interrupts, unbuffered output, and the load progress bar.
#pragma once

#include <string>
#include <string_view>

namespace chat {

/// Installs the SIGINT handler: Ctrl-C then only sets a flag that interrupted() reads, and wakes
/// read_line (whichever thread the signal lands on).
void install_interrupt_handler();
/// Whether Ctrl-C was pressed since the last clear_interrupt().
bool interrupted() noexcept;
void clear_interrupt() noexcept;

/// Reads one line from stdin (without its newline); `interrupted` when Ctrl-C is pressed (or was,
/// since the last clear_interrupt()).
enum class ReadResult { line, end_of_input, interrupted };
ReadResult read_line(std::string& line);

/// Writes all of `text` to stdout / stderr at once (retrying after signals), no buffering.
void write_out(std::string_view text);
void write_err(std::string_view text);

/// Whether stdin / stderr is a terminal.
bool stdin_is_terminal();
bool stderr_is_terminal();

/// Draws "loading NAME [#####.....]  50%" on stderr (overwriting itself); a newline at 100%.
void draw_progress(const std::string& name, float fraction);

}  // namespace chat
