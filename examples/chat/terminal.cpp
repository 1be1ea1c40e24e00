#include "terminal.hpp"

#include <cerrno>
#include <csignal>
#include <cstdio>

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

namespace chat {

namespace {

volatile std::sig_atomic_t g_interrupted = 0;
// Self-pipe: the handler may run on any thread (the session's workers too), so a blocked read on
// the main thread is not reliably interrupted; read_line polls this pipe next to stdin instead.
int g_wake[2] = {-1, -1};

void on_sigint(int) {
  const int saved = errno;
  g_interrupted = 1;
  if (g_wake[1] >= 0) {
    const char byte = 1;
    [[maybe_unused]] const ssize_t n = ::write(g_wake[1], &byte, 1);  // full pipe: a wake-up is pending anyway
  }
  errno = saved;
}

void drain_wake_pipe() {
  char buffer[64];
  while (g_wake[0] >= 0 && ::read(g_wake[0], buffer, sizeof buffer) > 0) {
  }
}

void write_fd(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // the terminal is gone: nothing sensible left to do with the text
    }
    text.remove_prefix(static_cast<size_t>(n));
  }
}

std::string g_pending;  // bytes read past the last returned line

}  // namespace

void install_interrupt_handler() {
  if (g_wake[0] < 0 && ::pipe2(g_wake, O_NONBLOCK | O_CLOEXEC) != 0) g_wake[0] = g_wake[1] = -1;
  struct sigaction action {};
  action.sa_handler = on_sigint;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: a blocked poll returns on the thread that takes the signal
  sigaction(SIGINT, &action, nullptr);
}

bool interrupted() noexcept { return g_interrupted != 0; }
void clear_interrupt() noexcept {
  g_interrupted = 0;
  drain_wake_pipe();
}

ReadResult read_line(std::string& line) {
  line.clear();
  for (;;) {
    if (const size_t newline = g_pending.find('\n'); newline != std::string::npos) {
      line = g_pending.substr(0, newline);
      g_pending.erase(0, newline + 1);
      return ReadResult::line;
    }
    if (g_interrupted) {
      g_pending.clear();  // Ctrl-C discards the half-typed line, as a shell does
      drain_wake_pipe();
      return ReadResult::interrupted;
    }
    pollfd fds[2] = {{.fd = STDIN_FILENO, .events = POLLIN, .revents = 0},
                     {.fd = g_wake[0], .events = POLLIN, .revents = 0}};
    if (::poll(fds, g_wake[0] >= 0 ? 2 : 1, -1) < 0) {
      if (errno == EINTR) continue;
      return ReadResult::end_of_input;
    }
    if (fds[1].revents != 0) continue;  // woken by Ctrl-C: g_interrupted is set
    char buffer[4096];
    const ssize_t n = ::read(STDIN_FILENO, buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ReadResult::end_of_input;
    }
    if (n == 0) {
      if (g_pending.empty()) return ReadResult::end_of_input;
      line.swap(g_pending);  // a last line without a newline
      return ReadResult::line;
    }
    g_pending.append(buffer, static_cast<size_t>(n));
  }
}

void write_out(std::string_view text) { write_fd(STDOUT_FILENO, text); }
void write_err(std::string_view text) { write_fd(STDERR_FILENO, text); }

bool stdin_is_terminal() { return ::isatty(STDIN_FILENO) == 1; }
bool stderr_is_terminal() { return ::isatty(STDERR_FILENO) == 1; }

void draw_progress(const std::string& name, float fraction) {
  constexpr int kWidth = 30;
  const float f = fraction < 0.0f ? 0.0f : fraction > 1.0f ? 1.0f : fraction;
  const int filled = static_cast<int>(f * kWidth + 0.5f);
  std::string bar = "\rloading " + name + " [";
  bar.append(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(kWidth - filled), '.');
  char percent[16];
  std::snprintf(percent, sizeof percent, "] %3d%%", static_cast<int>(f * 100.0f + 0.5f));
  bar += percent;
  if (f >= 1.0f) bar += "\n";
  write_err(bar);
}

}  // namespace chat
