# shellcheck shell=bash
# What the GPU-machine scripts (gpu-check.sh, tp-gpu-check.sh, bench-gpu.sh, bench-ab-gpu.sh,
# selftest-gpu.sh, diagnose-gpu-check.sh) share. Each sources it from the repository root, right after its own
# `cd "$(dirname "$0")/.."`:
#   source scripts/gpu-common.sh
# Sourcing sets ROOT (the repository root), ARCH (LATTE_GPU_ARCH, default 90a-real: Hopper only, fast
# to build) and JOBS (LATTE_JOBS, default nproc), and puts the CUDA toolkit's bin/ first on the PATH
# when it is in /usr/local/cuda. It defines:
#   gpu_require_deps SCRIPT       exits 2 unless .deps/ holds every header-only dependency
#   gpu_require_latte SCRIPT      exits 2 unless build-gpu/ holds the latte CLI
#   gpu_configure_command [-D...] sets GPU_CONFIGURE, the cmake command that configures build-gpu/
#   skipped NAME                  true when NAME is in $SKIP (a space-separated list with spaces around)
#   gpu_step NAME LOG TAIL TIMEOUT_STATUSES COMMAND...
#                                 runs a step and records it for the summary table
#   gpu_note NAME STATUS          records a summary row that ran no command of its own
#   gpu_summary TITLE WIDTH OK... prints the summary table; its status is 1 when a step failed

ROOT=$PWD
ARCH=${LATTE_GPU_ARCH:-90a-real}
# shellcheck disable=SC2034  # JOBS is for the scripts that source this file
JOBS=${LATTE_JOBS:-$(nproc)}
if [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi

# The GPU machine has CUDA, cmake and ninja but no Eigen/doctest/nlohmann-json and no network:
# scripts/prepare-gpu-deps.sh copies them into .deps/ on the build machine, which travels with the tree
# (or packed as .carry/deps.tar.xz, which is unpacked here when .deps/ is missing).
gpu_require_deps() {  # gpu_require_deps SCRIPT: SCRIPT names the caller in the message
  local dep
  if [ ! -d "$ROOT/.deps" ] && [ -f "$ROOT/.carry/deps.tar.xz" ]; then tar -C "$ROOT" -xJf "$ROOT/.carry/deps.tar.xz"; fi
  # prebuilt binaries alone (carry: .carry/bin.tar.xz, when the tree and both archives pass the call's size limit):
  # the dependencies are for building, which then does not happen
  if [ ! -d "$ROOT/.deps" ] && [ -f "$ROOT/.carry/bin.tar.xz" ]; then return 0; fi
  for dep in eigen3 doctest nlohmann_json; do
    if [ ! -d "$ROOT/.deps/$dep" ]; then
      echo "$1: .deps/$dep is missing: run scripts/prepare-gpu-deps.sh where the packages are installed" >&2
      exit 2
    fi
  done
}

gpu_require_latte() {  # gpu_require_latte SCRIPT: for the scripts that run what gpu-check.sh built
  if [ ! -x "$ROOT/build-gpu/tools/latte/latte" ]; then
    echo "$1: build-gpu/tools/latte/latte is missing: run scripts/gpu-check.sh first (it builds latte-cli)" >&2
    exit 2
  fi
}

# gpu_configure_command [-DOPTION...]: sets GPU_CONFIGURE to the cmake command that configures
# build-gpu/ for $ARCH against .deps/ (Ninja and ccache when installed), the options after -DLATTE_CUDA=ON.
gpu_configure_command() {
  GPU_CONFIGURE=(cmake -S . -B build-gpu -G Ninja)
  command -v ninja >/dev/null 2>&1 || GPU_CONFIGURE=(cmake -S . -B build-gpu -G "Unix Makefiles")
  GPU_CONFIGURE+=(-DCMAKE_BUILD_TYPE=Release -DLATTE_CUDA=ON "$@" -DCMAKE_CUDA_ARCHITECTURES="$ARCH"
    -DLATTE_BUILD_EXAMPLES=OFF)
  if command -v ccache >/dev/null 2>&1; then
    GPU_CONFIGURE+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  fi
  GPU_CONFIGURE+=(-DCMAKE_PREFIX_PATH="$ROOT/.deps/eigen3;$ROOT/.deps/doctest;$ROOT/.deps/nlohmann_json"
    -DEigen3_DIR="$ROOT/.deps/eigen3/share/eigen3/cmake" -Ddoctest_DIR="$ROOT/.deps/doctest/lib/cmake/doctest")
}

# gpu_prebuilt: when .carry/bin.tar.xz holds a latte CLI and latte_gpu_tests built elsewhere for this
# GPU (scripts/pack-gpu-binaries.sh) and they start here, puts them where a build would and returns 0.
gpu_prebuilt() {
  local pack=$ROOT/.carry/bin.tar.xz
  [ -f "$pack" ] || return 1
  export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  mkdir -p "$ROOT/build-gpu/tools/latte" "$ROOT/build-gpu/tests/gpu" "$ROOT/build-gpu/prebuilt"
  tar -C "$ROOT/build-gpu/prebuilt" -xJf "$pack" || return 1
  "$ROOT/build-gpu/prebuilt/latte" bench --help >/dev/null 2>&1 || return 1  # it starts (libraries found)
  cp "$ROOT/build-gpu/prebuilt/latte" "$ROOT/build-gpu/tools/latte/latte"
  cp "$ROOT/build-gpu/prebuilt/latte_gpu_tests" "$ROOT/build-gpu/tests/gpu/latte_gpu_tests"
}

skipped() { [[ "$SKIP" == *" $1 "* ]]; }

# The summary table's rows: a step's name, status word and seconds.
declare -a NAMES STATUS SECONDS_TAKEN
gpu_note() {  # gpu_note NAME STATUS: a row with no time of its own
  NAMES+=("$1")
  STATUS+=("$2")
  SECONDS_TAKEN+=(0)
}

# gpu_step NAME LOG TAIL TIMEOUT_STATUSES COMMAND...: runs COMMAND with its stdout and stderr appended
# to $LOG_DIR/LOG (the caller starts the log), records NAME with its status and seconds, prints the
# log's last TAIL lines indented and returns COMMAND's exit status. The status is "pass" for 0,
# "skipped (no GPU)" for 77 (the tests' exit status without a device), "TIMEOUT" for each status in
# the space-separated TIMEOUT_STATUSES (124 from timeout(1); 137 too where it kills with --kill-after)
# and "FAIL (rc N)" otherwise.
gpu_step() {
  local name=$1 log=$2 tail_lines=$3 timeout_statuses=" $4 "
  shift 4
  local start=$SECONDS
  "$@" >>"$LOG_DIR/$log" 2>&1
  local rc=$?
  NAMES+=("$name")
  SECONDS_TAKEN+=($((SECONDS - start)))
  if [ $rc = 0 ]; then
    STATUS+=("pass")
  elif [ $rc = 77 ]; then
    STATUS+=("skipped (no GPU)")
  elif [[ "$timeout_statuses" == *" $rc "* ]]; then
    STATUS+=("TIMEOUT")
  else
    STATUS+=("FAIL (rc $rc)")
  fi
  tail -n "$tail_lines" "$LOG_DIR/$log" | sed 's/^/   /'
  return $rc
}

# gpu_summary TITLE WIDTH OK...: prints "== TITLE summary" and a row per recorded step (the name column
# WIDTH wide); its status is 1 when a step's status matches none of the glob patterns OK, else 0.
gpu_summary() {
  local title=$1 width=$2
  shift 2
  echo
  echo "== $title summary (logs in $LOG_DIR) =="
  printf "%-${width}s %-18s %6s\n" step status seconds
  local failed=0 i ok pattern
  for i in "${!NAMES[@]}"; do
    printf "%-${width}s %-18s %6s\n" "${NAMES[$i]}" "${STATUS[$i]}" "${SECONDS_TAKEN[$i]}"
    ok=0
    for pattern in "$@"; do
      # shellcheck disable=SC2053  # the pattern is a glob on purpose (DIFFERENT*)
      [[ "${STATUS[$i]}" == $pattern ]] && ok=1
    done
    [ $ok = 1 ] || failed=1
  done
  return $failed
}
