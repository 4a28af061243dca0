#!/usr/bin/env bash
# Runs detnccl's libFuzzer targets (fuzz/) for a bounded time each, starting from the committed seed corpus.
#   scripts/fuzz.sh                      every target, 45 s each (CI passes --seconds 30)
#   scripts/fuzz.sh --seconds 600 diff   one target, longer
#   scripts/fuzz.sh --make-seeds         (re)write the seed corpus from logs the shim writes over hostnccl
# Builds the "fuzz" preset (clang, ASan + UBSan, libFuzzer) in build/fuzz. New interesting inputs stay in
# build/fuzz/corpus/<target> (not committed). A failing input is saved as build/fuzz/artifacts/<target>-crash-...;
# copy it into fuzz/regressions/<target>/ (ctest replays that folder in every build), fix the bug, rerun.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=45
make_seeds=0
targets=()
while (($#)); do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --make-seeds) make_seeds=1; shift ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) targets+=("$1"); shift ;;
  esac
done
((${#targets[@]})) || targets=(log_reader config diff merge capture_reader cli_args)

if ((make_seeds)); then
  exec ./scripts/fuzz-seeds.sh
fi

./scripts/install-deps.sh >/dev/null
cmake --preset fuzz >/dev/null
build_targets=()
for t in "${targets[@]}"; do build_targets+=("fuzz_$t"); done
cmake --build build/fuzz -j "$(nproc)" --target "${build_targets[@]}"

status=0
mkdir -p build/fuzz/artifacts
for t in "${targets[@]}"; do
  work="build/fuzz/corpus/$t"
  mkdir -p "$work"
  echo "== fuzz_$t for ${seconds} s (seeds: fuzz/corpus/$t)"
  # -rss_limit_mb and -timeout turn a memory blow-up or a hang into a finding; -dict guides the mutations.
  # -entropic_feature_frequency_threshold=16: a feature counts as rare for libFuzzer's entropic schedule until it has
  # been seen 16 times, not 255. RATIONALE: libFuzzer looks each feature of each execution up in its list of rare
  # features, which keeps every feature seen fewer times than the threshold; these targets have thousands of such
  # features at 255, and the lookups took 47% of fuzz_diff's time. Executions per CPU-second, default -> 16, same
  # coverage (bench/results/fuzz_speed_entropic_2026-12-03_2cpu-vm.txt): diff 826 -> 1,570, config 2,230 -> 2,801.
  dict=()
  [[ -f "fuzz/$t.dict" ]] && dict=(-dict="fuzz/$t.dict")
  if ! ASAN_OPTIONS="detect_leaks=1:halt_on_error=1" UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" \
      "build/fuzz/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 -max_len=65536 \
      -entropic_feature_frequency_threshold=16 -print_final_stats=1 "${dict[@]}" \
      -artifact_prefix="build/fuzz/artifacts/$t-" "$work" "fuzz/corpus/$t" \
      2>"build/fuzz/fuzz_$t.log"; then
    tail -n 60 "build/fuzz/fuzz_$t.log" >&2
    echo "FAIL: fuzz_$t found an input it cannot survive (build/fuzz/artifacts/$t-*). Copy it into" \
         "fuzz/regressions/$t/, fix the bug, and rerun." >&2
    status=1
  else
    grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|stat::new_units_added)" "build/fuzz/fuzz_$t.log" |
      tr '\n' ' '
    echo
  fi
done
exit "$status"
