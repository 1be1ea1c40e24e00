#!/usr/bin/env bash
# Builds the emulated GPU test binary: the real attention kernels (src/cuda) and their GPU tests
# (tests/gpu/attention_*.cpp) compiled as C++ against the CPU emulation of CUDA in this folder.
# No GPU or nvcc needed.
#   tests/emulation/build.sh [build-dir] [extra compiler flags...]   (objects are rebuilt when stale)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${1:-$root/build-emu}"
shift || true
mkdir -p "$out/src" "$out/obj"
cuda=${CUDA_HOME:-/usr/local/cuda}
flags=(-std=c++20 -O2 -g -fno-strict-aliasing -Wall -Wextra -Wno-unused-parameter -Wno-unknown-pragmas -Wno-unused-value
       -I"$here/include" -I"$root/src" -I"$root/include" -I"$root/tests" -I"$cuda/include"
       -include "$here/emulation.hpp" "$@")
sources=("$here/emulation.cpp" "$here/main.cpp" "$root/src/cuda/check.cpp" "$root/src/cuda/device_buffer.cpp"
         "$root/src/cuda/device_caps.cpp")
kernels=(split_kv_combine mla_decode mla_decode_wide standard_decode flash_prefill dsa_index_scores dsa_top_k kv_cache_append
         gemv_quant gemv_quant_float gemv_quant_legacy gemv_quant_kquants)
# Kernel headers that declare dynamic shared memory are translated too, next to the translated .cu files:
# a quoted include looks in the including file's folder first, so these shadow the originals.
mkdir -p "$out/src/cuda"
for cuh in "$root"/src/cuda/*.cuh; do
  grep -q "extern __shared__" "$cuh" || continue
  dst="$out/src/cuda/$(basename "$cuh")"
  python3 "$here/translate.py" "$cuh" "$dst.new"
  if ! cmp -s "$dst.new" "$dst"; then mv "$dst.new" "$dst"; else rm "$dst.new"; fi
done
# latte's CPU quantizer and decoder, plain C++ (no emulation header): the GEMV test's reference.
plain=("$root"/src/quant/*.cpp)
for name in "${kernels[@]}"; do
  cu="$root/src/cuda/$name.cu"
  cpp="$out/src/$(basename "$cu" .cu).cpp"
  python3 "$here/translate.py" "$cu" "$cpp.new"
  if ! cmp -s "$cpp.new" "$cpp"; then mv "$cpp.new" "$cpp"; else rm "$cpp.new"; fi
  sources+=("$cpp")
done
sources+=("$root"/tests/gpu/attention_*.cpp "$here/gemv_test.cpp")
headers=("$here"/emulation.hpp "$here"/include/*/*.cuh "$here"/include/cub/block/*.cuh "$root"/src/cuda/*.hpp
         "$root"/src/cuda/*.cuh "$root"/tests/gpu/*.hpp "$out"/src/cuda/*.cuh)
objects=()
for src in "${sources[@]}"; do
  obj="$out/obj/$(basename "$src").o"
  objects+=("$obj")
  stale=0
  [ -f "$obj" ] || stale=1
  if [ $stale = 0 ]; then
    for dep in "$src" "${headers[@]}"; do [ "$dep" -nt "$obj" ] && stale=1 && break; done
  fi
  if [ $stale = 1 ]; then
    echo "compiling $(basename "$src")"
    g++ "${flags[@]}" -c "$src" -o "$obj"
  fi
done
plain_flags=()
skip=0
for f in "${flags[@]}"; do
  if [ $skip = 1 ]; then skip=0; continue; fi
  if [ "$f" = -include ]; then skip=1; continue; fi
  plain_flags+=("$f")
done
for src in "${plain[@]}"; do
  obj="$out/obj/plain-$(basename "$src").o"
  objects+=("$obj")
  stale=0
  [ -f "$obj" ] || stale=1
  if [ $stale = 0 ]; then
    for dep in "$src" "$root"/src/quant/*.hpp "$root"/include/latte/quant.hpp; do [ "$dep" -nt "$obj" ] && stale=1 && break; done
  fi
  if [ $stale = 1 ]; then
    echo "compiling $(basename "$src")"
    g++ "${plain_flags[@]}" -c "$src" -o "$obj"
  fi
done
g++ "${flags[@]}" -o "$out/latte_emulated_gpu_tests" "${objects[@]}" -L"$cuda/lib64" -lcudart -Wl,-rpath,"$cuda/lib64"
echo "$out/latte_emulated_gpu_tests"
