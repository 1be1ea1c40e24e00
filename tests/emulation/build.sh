#!/usr/bin/env bash
# Builds the emulated GPU test binary: the real attention and GEMV kernels (src/cuda) and their tests
# (tests/gpu/attention_*.cpp, gemv_test.cpp here) compiled as C++ against the CPU emulation of CUDA in this folder.
# No GPU or nvcc needed.
#   tests/emulation/build.sh [build-dir] [extra compiler flags...]   (objects are rebuilt when stale)
#   LATTE_EMU_ONLY=fused tests/emulation/build.sh DIR                  (only the fused decode step)
#   LATTE_EMU_ONLY=gemv tests/emulation/build.sh DIR                   (only the GEMV kernels)
#   LATTE_EMU_ONLY=decode-attention tests/emulation/build.sh DIR       (only the decode attention kernels)
#   LATTE_EMU_ONLY=prefill tests/emulation/build.sh DIR                (only the flash prefill kernel)
#   LATTE_EMU_ONLY=heads tests/emulation/build.sh DIR                  (the per-head fp32 products, the MoE sort)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${1:-$root/build-emu}"
shift || true
mkdir -p "$out/src" "$out/obj"
cuda=${CUDA_HOME:-/usr/local/cuda}
common=(-std=c++20 -O2 -g -fno-strict-aliasing -Wall -Wextra -Wno-unused-parameter -Wno-unknown-pragmas -Wno-unused-value
        -I"$here/include" -I"$root/src" -I"$root/include" -I"$root/tests" -I"$cuda/include" "$@")  # latte's CPU code
# kernels, tests and stand-ins; translated kernel headers (below) before the originals, for every includer
flags=(-I"$out/src" "${common[@]}" -include "$here/emulation.hpp")

# translate SRC DST: the emulation's C++ form of a CUDA file, rewritten only when it changed.
translate() {
  python3 "$here/translate.py" "$1" "$2.new"
  if ! cmp -s "$2.new" "$2"; then mv "$2.new" "$2"; else rm "$2.new"; fi
}

objects=()
jobs=${LATTE_JOBS:-$(nproc)}
running=0
failed=0
# compile SRC OBJ FLAGS_ARRAY_NAME DEP...: compiles when OBJ is missing or older than SRC or a DEP, in the
# background, at most $jobs at once (finish_compiles waits for the rest). A failed compile removes its object.
compile() {
  local src=$1 obj=$2 stale=0
  local -n compile_flags=$3
  shift 3
  objects+=("$obj")
  [ -f "$obj" ] || stale=1
  if [ $stale = 0 ]; then
    for dep in "$src" "$@"; do [ "$dep" -nt "$obj" ] && stale=1 && break; done
  fi
  if [ $stale = 1 ]; then
    if [ "$running" -ge "$jobs" ]; then reap_compile; fi
    echo "compiling $(basename "$src")"
    { g++ "${compile_flags[@]}" -c "$src" -o "$obj.tmp" && mv "$obj.tmp" "$obj"; } || { rm -f "$obj.tmp"; exit 1; } &
    running=$((running + 1))
  fi
}
# reap_compile: waits for one background compile to end, noting a failure.
reap_compile() {
  wait -n || failed=1
  running=$((running - 1))
}
finish_compiles() {
  while [ "$running" -gt 0 ]; do reap_compile; done
  if [ "$failed" != 0 ]; then
    echo "tests/emulation/build.sh: a compile failed (above)" >&2
    exit 1
  fi
}

sources=("$here/emulation.cpp" "$here/main.cpp" "$root/src/cuda/check.cpp" "$root/src/cuda/device_buffer.cpp"
         "$root/src/cuda/device_caps.cpp" "$root/src/cuda/decode_step.cpp")
kernels=(gemv_quant_legacy gemv_quant_q8_iq4 gemv_quant_kquants split_kv_combine mla_decode mla_decode_wide standard_decode flash_prefill
         dsa_index_scores dsa_top_k kv_cache_append gemv_quant gemv_quant_float x_int8 norms rope_yarn decode_step_kernel moe_router moe_dispatch heads_product)
tests=("$root"/tests/gpu/attention_*.cpp "$root"/tests/gpu/decode_step_test.cpp "$here/gemv_test.cpp"
       "$root"/tests/gpu/gemv_int8_test.cpp "$root"/tests/gpu/heads_product_test.cpp "$root"/tests/gpu/moe_sort_route_test.cpp)
# LATTE_EMU_ONLY=fused: only the fused decode step and its test (what CI runs: a few minutes)
if [ "${LATTE_EMU_ONLY:-}" = fused ]; then
  kernels=(rope_yarn decode_step_kernel)
  tests=("$root"/tests/gpu/decode_step_test.cpp)
fi
# LATTE_EMU_ONLY=decode-attention: only the MLA and standard decode kernels, their split combine, the cache
# append and their tests
if [ "${LATTE_EMU_ONLY:-}" = decode-attention ]; then
  kernels=(split_kv_combine mla_decode mla_decode_wide standard_decode kv_cache_append)
  tests=("$root"/tests/gpu/attention_mla_decode.cpp "$root"/tests/gpu/attention_standard_decode.cpp
         "$root"/tests/gpu/attention_kv_append.cpp)
  sources=("${sources[@]/*decode_step.cpp/}")
fi
# LATTE_EMU_ONLY=gemv: only the GEMV kernels and their test
if [ "${LATTE_EMU_ONLY:-}" = gemv ]; then
  kernels=(gemv_quant_legacy gemv_quant_q8_iq4 gemv_quant_kquants gemv_quant gemv_quant_float x_int8 norms moe_router
           moe_dispatch heads_product)
  tests=("$here/gemv_test.cpp" "$root"/tests/gpu/gemv_int8_test.cpp "$root"/tests/gpu/heads_product_test.cpp
         "$root"/tests/gpu/moe_sort_route_test.cpp)
  sources=("${sources[@]/*decode_step.cpp/}")
fi
# LATTE_EMU_ONLY=heads: only the per-head fp32 products, the MoE sort (with its routing) and their tests
if [ "${LATTE_EMU_ONLY:-}" = heads ]; then
  kernels=(heads_product moe_router moe_dispatch)
  tests=("$root"/tests/gpu/heads_product_test.cpp "$root"/tests/gpu/moe_sort_route_test.cpp)
  sources=("${sources[@]/*decode_step.cpp/}")
fi
# LATTE_EMU_ONLY=prefill: only the flash prefill kernel, its split combine and its test
if [ "${LATTE_EMU_ONLY:-}" = prefill ]; then
  kernels=(split_kv_combine flash_prefill)
  tests=("$root"/tests/gpu/attention_flash_prefill.cpp)
  sources=("${sources[@]/*decode_step.cpp/}")
fi
# Kernel headers that declare dynamic shared memory are translated too, next to the translated .cu files:
# a quoted include looks in the including file's folder first, so these shadow the originals.
mkdir -p "$out/src/cuda"
for cuh in "$root"/src/cuda/*.cuh; do
  grep -q "extern __shared__" "$cuh" && translate "$cuh" "$out/src/cuda/$(basename "$cuh")"
done
# the kernels first, the longest compiles (the GEMVs' template instances) at the head of the list
translated=()
for name in "${kernels[@]}"; do
  translate "$root/src/cuda/$name.cu" "$out/src/$name.cpp"
  translated+=("$out/src/$name.cpp")
done
sources=("${translated[@]}" "${sources[@]}" "${tests[@]}")
headers=("$here"/emulation.hpp "$here"/include/*/*.cuh "$here"/include/cub/block/*.cuh "$root"/src/cuda/*.hpp
         "$root"/src/cuda/*.cuh "$root"/tests/gpu/*.hpp "$out"/src/cuda/*.cuh)
for src in "${sources[@]}"; do
  [ -n "$src" ] || continue
  compile "$src" "$out/obj/$(basename "$src").o" flags "${headers[@]}"
done
# latte's CPU quantizer and decoder, without the emulation header: the GEMV test's reference; the model's
# attention scale (the fused decode step's plan); the LATTE_* variables' readers (the kernels' switches).
for src in "$root"/src/quant/*.cpp "$root"/src/model/attention_scale.cpp "$root"/src/core/environment.cpp; do
  compile "$src" "$out/obj/plain-$(basename "$src").o" common "$root"/src/quant/*.hpp "$root"/include/latte/quant.hpp \
          "$root"/src/core/environment.hpp
done
finish_compiles
g++ "${flags[@]}" -o "$out/latte_emulated_gpu_tests" "${objects[@]}" -L"$cuda/lib64" -lcudart -Wl,-rpath,"$cuda/lib64"
echo "$out/latte_emulated_gpu_tests"
