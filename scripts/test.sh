#!/usr/bin/env bash
# Builds detnccl and runs the whole test suite: the README's test command, and what CI runs.
#   scripts/test.sh            release preset (CUDA parts built when the toolkit is found)
#   PRESET=asan scripts/test.sh   any preset of CMakePresets.json (debug, cpu, asan, tsan)
#   CTEST_EXCLUDE=REGEX, CTEST_EXCLUDE_LABEL=REGEX   tests left out (scripts/sanitize.sh asan)
set -euo pipefail
cd "$(dirname "$0")/.."

preset="${PRESET:-release}"
jobs="$(nproc)"

./scripts/install-deps.sh
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$jobs"

# Leftover shared memory or processes from an earlier, killed run would be blamed on this one: note them first.
shm_before="$(ls /dev/shm | grep -c '^hostnccl-' || true)"

status=0
exclude=()
[[ -n "${CTEST_EXCLUDE:-}" ]] && exclude+=(-E "$CTEST_EXCLUDE")
[[ -n "${CTEST_EXCLUDE_LABEL:-}" ]] && exclude+=(-LE "$CTEST_EXCLUDE_LABEL")
ctest --preset "$preset" -j "$jobs" --timeout 900 "${exclude[@]}" || status=$?

# hostnccl promises to leave nothing behind in /dev/shm and no test process running.
leftover="$(ls /dev/shm | grep '^hostnccl-' || true)"
if [[ -n "$leftover" && "$(echo "$leftover" | wc -l)" -gt "$shm_before" ]]; then
  echo "FAIL: the test suite left shared-memory segments behind in /dev/shm:" >&2
  echo "$leftover" >&2
  status=1
fi
# RATIONALE: only this checkout's processes: a pattern without the absolute path would also match (and kill) the
# tests of other checkouts running on the same machine. pgrep takes an extended regex, so the path's
# special characters are escaped, and it must start an argument or follow '=' or ':' (LD_PRELOAD=..., PATH lists).
build_root="$(pwd -P)/build/$preset"
ours="(^|[[:space:]=:])$(printf '%s' "$build_root" | sed 's/[][\.*^$+?(){}|]/\\&/g')/(tests|hostnccl|bench)/"
stray="$(pgrep -f -- "$ours" || true)"
if [[ -n "$stray" ]]; then
  echo "FAIL: test processes still running after the suite: $stray" >&2
  ps -o pid,args -p $stray >&2 || true
  pkill -KILL -f -- "$ours" || true
  status=1
fi
exit "$status"
