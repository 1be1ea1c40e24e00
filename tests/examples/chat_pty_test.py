#!/usr/bin/env python3
"""Drives latte-chat through a pseudo-terminal, as a person at a keyboard would.

    chat_pty_test.py LATTE_CHAT MODEL.gguf WORK_DIR

1. -p mode gives a reference greedy answer (stdout) and a perf line (stderr).
2. An interactive session on a pty: the load progress bar and banner, /system, the streamed reply
   (it must start with the reference answer given the same system message), Ctrl-C during a long
   reply returns to the prompt, /save, /reset, /load (the next reply reuses the loaded cache), a
   stopped reply then Ctrl-C at the prompt exits.
3. A second session: Ctrl-C twice at the prompt exits; /quit exits.
"""
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time

TIMEOUT_S = 60.0
PERF = re.compile(r"\[prompt (\d+) tokens, (\d+) evaluated, [0-9.]+ t/s \| reply (\d+) tokens, [0-9.]+ t/s([^\]]*)\]")


class Chat:
    """A latte-chat child on a pty; `expect` waits for text on it."""

    def __init__(self, args):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            try:
                os.execv(args[0], args)
            finally:
                os._exit(127)
        self.output = ""  # everything read so far
        self.seen = 0  # expect() searches from here

    def read_some(self, timeout):
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return False
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            return None
        if not data:
            return None
        self.output += data.decode("utf-8", errors="replace")
        return True

    def expect(self, pattern, what):
        regex = re.compile(pattern, re.S)
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            m = regex.search(self.output, self.seen)
            if m:
                self.seen = m.end()
                return m
            left = deadline - time.monotonic()
            if left <= 0 or self.read_some(left) is None:
                fail(f"{what}: no match for {pattern!r}", self)

    def send(self, text):
        os.write(self.fd, text.encode())

    def wait_exit(self, what):
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                while self.read_some(0.05):
                    pass
                return os.waitstatus_to_exitcode(status)
            self.read_some(0.05)
        fail(f"{what}: latte-chat did not exit", self)

    def kill(self):
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def fail(message, chat=None):
    print("FAIL:", message, file=sys.stderr)
    if chat is not None:
        print("---- terminal output ----\n" + chat.output[-6000:], file=sys.stderr)
        chat.kill()
    sys.exit(1)


def main():
    exe, model, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    state = os.path.join(work, "chat-state.latte")
    if os.path.exists(state):
        os.remove(state)
    prompt = "hello there, tell me about the river"

    # 1. The reference: -p mode, greedy.
    system = "You answer briefly."
    ref = subprocess.run([exe, "--model", model, "--system", system, "-p", prompt, "-n", "12", "--temp", "0"],
                         capture_output=True, text=True, timeout=TIMEOUT_S)
    if ref.returncode != 0:
        fail(f"-p mode exited {ref.returncode}: {ref.stderr}")
    answer = ref.stdout[:-1] if ref.stdout.endswith("\n") else ref.stdout
    if len(answer.strip()) == 0:
        fail("-p mode printed no answer")
    m = PERF.search(ref.stderr)
    if not m or m.group(3) != "12":
        fail(f"-p mode: no perf line for 12 reply tokens on stderr: {ref.stderr!r}")

    # 2. Interactive: long greedy replies (-n 3000) that Ctrl-C cuts short.
    chat = Chat([exe, "--model", model, "--temp", "0", "-n", "3000", "--ctx", "4096"])
    try:
        chat.expect(r"loading \S+ \[#+\] 100%", "progress bar")
        chat.expect(r"latte-chat: latte-chat-test \(2 layers.*template plain", "banner")
        chat.expect(r"> ", "first prompt")
        chat.send(f"/system {system}\n")
        chat.expect(r"\(system message set\)", "/system")
        chat.expect(r"> ", "prompt after /system")
        chat.send(prompt + "\n")
        # Streamed text: the reply starts with the -p answer (the terminal turns \n into \r\n).
        chat.expect(re.escape(answer.replace("\n", "\r\n")), "streamed reply")
        chat.send("\x03")  # Ctrl-C: the terminal sends SIGINT to latte-chat
        chat.expect(r"\[interrupted\]", "reply stopped by Ctrl-C")
        m = chat.expect(PERF.pattern, "perf line after the stopped reply")
        if "interrupted" not in m.group(4) or int(m.group(3)) >= 3000:
            fail(f"the perf line does not show an interrupted reply: {m.group(0)}", chat)
        chat.expect(r"> ", "prompt after the stopped reply")

        chat.send(f"/save {state}\n")
        m = chat.expect(r"\(saved 2 messages, (\d+) tokens to ", "/save")
        saved_tokens = int(m.group(1))
        chat.expect(r"> ", "prompt after /save")
        if not os.path.getsize(state) > 0:
            fail("/save wrote no file", chat)
        chat.send("/reset\n")
        chat.expect(r"\(conversation reset\)", "/reset")
        chat.expect(r"> ", "prompt after /reset")
        chat.send(f"/load {state}\n")
        chat.expect(rf"\(loaded 2 messages, {saved_tokens} tokens from ", "/load")
        chat.expect(r"> ", "prompt after /load")
        chat.send(f"/load {state}.missing\n")
        chat.expect(r"error: .*chat-state\.latte\.missing: no such file", "/load of a missing file")
        chat.expect(r"> ", "prompt after a failed /load")

        # The next turn reuses the loaded cache: fewer tokens evaluated than the prompt holds.
        chat.send("and the town?\n")
        chat.expect(r"and the town\?\r\n.{16}", "the start of the second reply")
        chat.send("\x03")
        chat.expect(r"\[interrupted\]", "second reply stopped")
        m = chat.expect(PERF.pattern, "perf line of the second reply")
        prompt_tokens, evaluated = int(m.group(1)), int(m.group(2))
        if not 0 < evaluated < prompt_tokens or prompt_tokens <= saved_tokens:
            fail(f"no prefix reuse after /load: {m.group(0)} (saved {saved_tokens} tokens)", chat)
        chat.expect(r"> ", "prompt after the second reply")
        chat.send("\x03")  # Ctrl-C at the prompt right after a stopped reply: leave
        code = chat.wait_exit("Ctrl-C at the prompt after a stopped reply")
        if code != 0:
            fail(f"exit status {code} after Ctrl-C at the prompt", chat)
    finally:
        chat.kill()

    # 3. Ctrl-C twice at the prompt exits; so does /quit.
    chat = Chat([exe, "--model", model])
    try:
        chat.expect(r"> ", "prompt")
        chat.send("\x03")
        chat.expect(r"Ctrl-C again or /quit to leave", "first Ctrl-C at the prompt")
        chat.expect(r"> ", "prompt after one Ctrl-C")
        chat.send("\x03")
        if chat.wait_exit("second Ctrl-C") != 0:
            fail("non-zero exit after two Ctrl-C", chat)
    finally:
        chat.kill()
    chat = Chat([exe, "--model", model])
    try:
        chat.expect(r"> ", "prompt")
        chat.send("/nonsense\n")
        chat.expect(r"unknown command /nonsense", "unknown command")
        chat.send("/quit\n")
        if chat.wait_exit("/quit") != 0:
            fail("non-zero exit after /quit", chat)
    finally:
        chat.kill()
    print("latte-chat pty test: ok")


if __name__ == "__main__":
    main()
