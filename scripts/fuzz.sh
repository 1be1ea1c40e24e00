#!/usr/bin/env bash
# Builds latte's libFuzzer harnesses (tests/fuzz: Clang, AddressSanitizer, UndefinedBehaviorSanitizer,
# LeakSanitizer), writes their seed corpora with latte's own writers, replays the saved crashers of
# tests/fuzz/regressions, then fuzzes each harness for a bounded time.
#
#   scripts/fuzz.sh [SECONDS_PER_HARNESS (default 25)] [HARNESS...]
#   harnesses: gguf model_config tokenizer chat_template safetensors session_state (default: all)
#
# Fails on any crash, leak, sanitizer report, uncaught exception, timeout (-timeout) or allocation above
# -malloc_limit_mb. A failing input is left in $LATTE_FUZZ_BUILD_DIR/artifacts/<harness>/; once fixed,
# copy it to tests/fuzz/regressions/<harness>/ so the replay and tests/hostile_inputs_test.cpp keep it.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

seconds=${1:-25}
shift || true
harnesses=("$@")
if [ ${#harnesses[@]} -eq 0 ]; then harnesses=(gguf model_config tokenizer chat_template safetensors session_state); fi
build=${LATTE_FUZZ_BUILD_DIR:-build-fuzz}

# -O1 with line tables: the harnesses find bugs by coverage, not speed, and the build stays short.
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -gline-tables-only" \
      -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DLATTE_CUDA=OFF -DLATTE_FUZZ=ON \
      -DLATTE_BUILD_TESTS=OFF -DLATTE_BUILD_TOOLS=OFF -DLATTE_BUILD_EXAMPLES=OFF "${LATTE_CMAKE_LAUNCHER[@]}"
targets=(make_fuzz_seeds)
for h in "${harnesses[@]}"; do targets+=("fuzz_$h"); done
cmake --build "$build" --parallel "$LATTE_JOBS" --target "${targets[@]}"

rm -rf "$build/seeds"
"$build/tests/fuzz/make_fuzz_seeds" "$build/seeds"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
options=(-timeout=20 -malloc_limit_mb=512 -rss_limit_mb=2048)
for h in "${harnesses[@]}"; do
  if compgen -G "tests/fuzz/regressions/$h/*" >/dev/null; then
    echo "== fuzz_$h: replaying saved crashers"
    "$build/tests/fuzz/fuzz_$h" "${options[@]}" tests/fuzz/regressions/"$h"/*
  fi
done

# fuzz_one H: fuzzes harness H for $seconds into its own log; its exit status is the fuzzer's.
fuzz_one() {
  local h=$1
  mkdir -p "$build/corpus/$h" "$build/artifacts/$h"
  "$build/tests/fuzz/fuzz_$h" "${options[@]}" -artifact_prefix="$build/artifacts/$h/" -max_total_time="$seconds" \
    -print_final_stats=1 \
    "$build/corpus/$h" "$build/seeds/$h" >"$build/fuzz_$h.log" 2>&1
}
# report H RC: prints harness H's summary; on failure its log's tail, and returns 1.
report() {
  local h=$1 rc=$2
  echo "== fuzz_$h: ${seconds} s"
  grep -E "^(#[0-9]+ +DONE|stat::number_of_executed_units|stat::peak_rss_mb)" "$build/fuzz_$h.log" || true
  if [ "$rc" -ne 0 ]; then
    tail -n 60 "$build/fuzz_$h.log"
    echo "fuzz_$h failed (exit $rc): see $build/fuzz_$h.log and $build/artifacts/$h/" >&2
    return 1
  fi
}
# the harnesses in batches of LATTE_JOBS at once (each fuzzer is one process on one core)
for ((i = 0; i < ${#harnesses[@]}; i += LATTE_JOBS)); do
  batch=("${harnesses[@]:i:LATTE_JOBS}")
  pids=()
  for h in "${batch[@]}"; do
    fuzz_one "$h" &
    pids+=($!)
  done
  for j in "${!batch[@]}"; do
    rc=0
    wait "${pids[$j]}" || rc=$?
    if ! report "${batch[$j]}" "$rc"; then
      kill "${pids[@]}" 2>/dev/null || true
      exit 1
    fi
  done
done
echo "latte: fuzzers passed"
