#!/usr/bin/env bash
# Copies the header-only build dependencies (Eigen 3, doctest, nlohmann-json) from this machine's
# Debian packages into .deps/, one CMake prefix each, so that a GPU machine with no package manager
# and no network can build the tests: scripts/gpu-check.sh points CMake at them. .deps/ is ignored
# by git; carry it to the GPU machine with the working tree.
set -euo pipefail
cd "$(dirname "$0")/.."
copy() {  # copy SRC DEST_PREFIX RELATIVE_DEST
  local src=$1 dest=$2/$3
  if [ ! -e "$src" ]; then
    echo "prepare-gpu-deps: $src is missing (run scripts/setup-deps.sh)" >&2
    exit 1
  fi
  mkdir -p "$(dirname "$dest")"
  rm -rf "$dest"
  cp -r "$src" "$dest"
}
rm -rf .deps
copy /usr/include/eigen3 .deps/eigen3 include/eigen3
copy /usr/share/eigen3/cmake .deps/eigen3 share/eigen3/cmake
copy /usr/include/doctest .deps/doctest include/doctest
copy /usr/lib/cmake/doctest .deps/doctest lib/cmake/doctest
copy /usr/include/nlohmann .deps/nlohmann_json include/nlohmann
copy /usr/share/cmake/nlohmann_json .deps/nlohmann_json share/cmake/nlohmann_json
# Debian's doctest package hard-codes its prefix (/usr): make it relative to the copied config.
sed -i 's|^set(_IMPORT_PREFIX "/usr")$|get_filename_component(_IMPORT_PREFIX "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)|' \
  .deps/doctest/lib/cmake/doctest/doctestTargets.cmake
if grep -rq '_IMPORT_PREFIX "/usr"' .deps; then
  echo "prepare-gpu-deps: a copied CMake config still points at /usr" >&2
  exit 1
fi
du -sh .deps/* | sed 's/^/prepare-gpu-deps: /'
