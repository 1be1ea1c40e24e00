#!/usr/bin/env bash
# Installs what latte needs to build and test on Debian 12: compilers, CMake, Ninja, Eigen 3.4,
# doctest, and clang's sanitizer/fuzzer runtimes. The CUDA toolkit (with NCCL) is expected under
# /usr/local/cuda when the CUDA backend is wanted; without it latte builds CPU-only.
set -euo pipefail
need=()
for pkg in build-essential cmake ninja-build pkg-config libeigen3-dev doctest-dev nlohmann-json3-dev clang libclang-rt-14-dev \
           python3 tmux; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if ((${#need[@]})); then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
