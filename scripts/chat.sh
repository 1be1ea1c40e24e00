#!/usr/bin/env bash
# Builds latte-chat and runs it, from a fresh Debian machine: installs the build dependencies,
# configures (CPU only unless LATTE_CUDA=ON is set in the environment), builds only latte-chat,
# then runs it with this script's arguments. With no arguments: an interactive chat with the model
# shipped in models/.
#
#   scripts/chat.sh                              # chat with the shipped model
#   scripts/chat.sh -p "The river" -n 64         # one answer, then exit
#   LATTE_CUDA=ON scripts/chat.sh --device cuda:0 --model DeepSeek-V2-Lite-Chat.Q4_K_M.gguf
#
# Environment: LATTE_CUDA (OFF), LATTE_BUILD_DIR (build-chat), LATTE_JOBS (all cores).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup-deps.sh" >&2
source "$root/scripts/env.sh"
build=${LATTE_BUILD_DIR:-$root/build-chat}
cuda=${LATTE_CUDA:-OFF}
if [ ! -f "$build/CMakeCache.txt" ] || ! grep -q "^LATTE_CUDA:BOOL=$cuda\$" "$build/CMakeCache.txt"; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLATTE_CUDA="$cuda" \
    -DLATTE_BUILD_TESTS=OFF -DLATTE_BUILD_TOOLS=OFF -DLATTE_BUILD_EXAMPLES=ON "${LATTE_CMAKE_LAUNCHER[@]}" >&2
fi
cmake --build "$build" --target latte-chat -j "$LATTE_JOBS" >&2
exec "$build/examples/latte-chat" "$@"
