#!/usr/bin/env bash
# A recorded fuzz campaign of one target (issue #20): minimise the committed corpus, fuzz from it for a number of
# executions (or until a time limit), minimise again, and print the figures bench/results/ records. Uses the fuzz
# preset's binaries (ASan + UBSan, libFuzzer); builds them when missing.
#
#   scripts/fuzz-campaign.sh TARGET [--runs N] [--max-time SECONDS] [--max-len BYTES] [--grow-corpus]
#
#   TARGET         log_reader, capture_reader, config, diff, merge or cli_args
#   --runs N       executions to reach (default 10000000)
#   --max-time S   stop after S seconds even if N is not reached (default: no limit)
#   --max-len B    the longest input libFuzzer makes (default 65536, as scripts/fuzz.sh)
#   --grow-corpus  afterwards, add to fuzz/corpus/TARGET the inputs of the run that add coverage (libFuzzer -merge=1)
#
# Exit status: 0 when the run ended without a finding, 1 when it found one (the input is under
# build/fuzz/campaign/TARGET/artifacts/: copy it into fuzz/regressions/TARGET/, fix the bug, rerun), 2 on bad arguments.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; }
target="" runs=10000000 max_time=0 max_len=65536 grow=0
while (($#)); do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --runs) runs="${2:?--runs needs a number}"; shift 2 ;;
    --max-time) max_time="${2:?--max-time needs seconds}"; shift 2 ;;
    --max-len) max_len="${2:?--max-len needs bytes}"; shift 2 ;;
    --grow-corpus) grow=1; shift ;;
    -*) echo "fuzz-campaign.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) [[ -z "$target" ]] || { echo "fuzz-campaign.sh: one target only" >&2; exit 2; }; target="$1"; shift ;;
  esac
done
case "$target" in
  log_reader | capture_reader | config | diff | merge | cli_args) ;;
  *) echo "fuzz-campaign.sh: TARGET must be log_reader, capture_reader, config, diff, merge or cli_args" \
          "(got '${target}')" >&2; exit 2 ;;
esac
for number in "$runs" "$max_time" "$max_len"; do
  [[ "$number" =~ ^[0-9]+$ ]] || { echo "fuzz-campaign.sh: '$number' is not a whole number" >&2; exit 2; }
done

binary="build/fuzz/fuzz/fuzz_$target"
if [[ ! -x "$binary" ]]; then
  cmake --preset fuzz >/dev/null
  cmake --build build/fuzz -j "$(nproc)" --target "fuzz_$target"
fi
work="build/fuzz/campaign/$target"
rm -rf "$work"
mkdir -p "$work/before" "$work/after" "$work/artifacts"
dict=()
[[ -f "fuzz/$target.dict" ]] && dict=(-dict="fuzz/$target.dict")
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1" UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
# -entropic_feature_frequency_threshold: see scripts/fuzz.sh.
common=(-timeout=20 -rss_limit_mb=2048 -max_len="$max_len" -entropic_feature_frequency_threshold=16 "${dict[@]}")

files() { find "$1" -type f | wc -l; }
bytes() { du -sb "$1" | cut -f1; }

echo "== fuzz_$target: minimising the committed corpus ($(files "fuzz/corpus/$target") files," \
     "$(bytes "fuzz/corpus/$target") bytes)"
"$binary" -merge=1 "${common[@]}" "$work/before" "fuzz/corpus/$target" >"$work/minimise-before.log" 2>&1
echo "   minimised: $(files "$work/before") files, $(bytes "$work/before") bytes"
cp -r "$work/before" "$work/run"

echo "== fuzz_$target: $runs executions$( ((max_time)) && echo " or $max_time s") from the minimised corpus" \
     "(log: $work/run.log)"
time_limit=()
((max_time)) && time_limit=(-max_total_time="$max_time")
began=$SECONDS
status=0
"$binary" -runs="$runs" "${time_limit[@]}" "${common[@]}" -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/" "$work/run" >"$work/run.log" 2>&1 || status=$?
elapsed=$((SECONDS - began))

stat() { grep -m1 "^stat::$1:" "$work/run.log" | awk '{print $2}'; }
coverage() { grep -E "$1" "$work/run.log" | sed -n "$2" | grep -oE 'cov: [0-9]+ ft: [0-9]+' || echo "cov: ? ft: ?"; }
echo "   ended in $elapsed s with status $status"
echo "   executions $(stat number_of_executed_units), exec/s $(stat average_exec_per_sec)," \
     "new units $(stat new_units_added), peak RSS $(stat peak_rss_mb) MB"
echo "   coverage at start: $(coverage 'INITED' 1p); at end: $(coverage '(pulse|NEW|REDUCE|DONE|INITED) ' '$p')"
if ((status != 0)); then
  tail -n 40 "$work/run.log" >&2
  echo "FINDING: fuzz_$target failed (status $status); the input is in $work/artifacts/" >&2
  exit 1
fi

"$binary" -merge=1 "${common[@]}" "$work/after" "fuzz/corpus/$target" "$work/run" >"$work/minimise-after.log" 2>&1
echo "   corpus: committed $(files "fuzz/corpus/$target") files -> minimised $(files "$work/before")" \
     "-> after the run, minimised $(files "$work/after") files ($(bytes "$work/after") bytes)"
if ((grow)); then
  before=$(files "fuzz/corpus/$target")
  "$binary" -merge=1 "${common[@]}" "fuzz/corpus/$target" "$work/run" >"$work/grow.log" 2>&1
  echo "   fuzz/corpus/$target grown: $before -> $(files "fuzz/corpus/$target") files" \
       "($(bytes "fuzz/corpus/$target") bytes)"
fi
echo "== fuzz_$target: no finding"
