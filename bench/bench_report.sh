#!/usr/bin/env bash
# bench_report: the size of `detnccl report`'s page and its load time in a browser (headless Chromium) for the
# headline pair: bench_scale's two synthetic runs of 2,432 ranks x 800 steps with one planted divergence. Prints the
# time `detnccl report` takes (with and without its stats panel), the page's size, and per load the page's own time
# from navigation to rendered (data-render-ms: reading, parsing, the map drawn) and the browser's wall time, next to
# the wall time of a blank page (the browser's start).
#   bench/bench_report.sh [--build-dir DIR] [--level steps|hash] [--ranks N] [--steps N] [--loads N] [--keep]
#                         [--runs DIR]   (reuse the pair a kept run wrote: DIR holds a/ and b/)
set -euo pipefail

build_dir="build/release"
level="steps"
ranks=2432
steps=800
loads=3
keep=0
runs=""
while (($#)); do
  case "$1" in
    --build-dir) build_dir="$2"; shift ;;
    --level) level="$2"; shift ;;
    --ranks) ranks="$2"; shift ;;
    --steps) steps="$2"; shift ;;
    --loads) loads="$2"; shift ;;
    --keep) keep=1 ;;
    --runs) runs="$(realpath -- "$2")"; shift ;;
    -h|--help) sed -n '2,/^[^#]/{s/^# \{0,1\}//p}' "$0"; exit 0 ;;
    *) echo "bench_report.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
  shift
done
cli="$build_dir/cli/detnccl"
bench_scale="$build_dir/bench/bench_scale"
for f in "$cli" "$bench_scale"; do [[ -x "$f" ]] || { echo "bench_report.sh: $f is missing (build it)" >&2; exit 2; }; done
browser="$(command -v chromium || command -v chromium-browser || true)"
[[ -n "$browser" ]] || { echo "bench_report.sh: no chromium (scripts/install-deps.sh installs it)" >&2; exit 2; }

work="$(mktemp -d /tmp/detnccl-bench-report.XXXXXX)"
((keep)) || trap 'rm -rf "$work"' EXIT
now() { date +%s.%N; }
seconds() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

echo "== $(uname -sm), $(nproc) CPUs, $("$browser" --version 2>/dev/null | head -1)"
if [[ -z "$runs" ]]; then
  echo "== writing two runs of $ranks ranks x $steps steps (bench_scale --level $level)"
  "$bench_scale" --ranks "$ranks" --steps "$steps" --level "$level" --dir "$work" --keep | sed 's/^/   /'
  runs="$(ls -d "$work"/detnccl-bench-scale-*-"$level")"
else
  echo "== the runs in $runs ($(du -sh "$runs/a" | cut -f1) and $(du -sh "$runs/b" | cut -f1))"
fi

for stats in with without; do
  flags=()
  [[ "$stats" == without ]] && flags=(--no-stats)
  start="$(now)"
  status=0
  "$cli" report "$runs/a" "$runs/b" -o "$work/report-$stats.html" "${flags[@]}" 2>"$work/report.err" || status=$?
  end="$(now)"
  echo "[report] detnccl report ($stats the stats panel): $(seconds "$start" "$end") s, exit status $status," \
       "page $(stat -c %s "$work/report-$stats.html") bytes ($(awk -v b="$(stat -c %s "$work/report-$stats.html")" 'BEGIN { printf "%.2f", b / 1048576 }') MiB)"
done
page="$work/report-with.html"

chrome() {
  timeout 120 "$browser" --headless=new --no-sandbox --disable-gpu --no-first-run --disable-extensions \
    --disable-background-networking --disable-sync --hide-scrollbars --user-data-dir="$work/profile" "$@"
}
echo '<!doctype html><html><body>blank</body></html>' >"$work/blank.html"
for ((i = 1; i <= loads; ++i)); do
  start="$(now)"
  chrome --dump-dom "file://$work/blank.html" >/dev/null 2>&1
  blank="$(seconds "$start" "$(now)")"
  start="$(now)"
  chrome --dump-dom "file://$page" >"$work/dom.html" 2>/dev/null
  wall="$(seconds "$start" "$(now)")"
  rendered="$(sed -n 's/.*data-render-ms="\([0-9]*\)".*/\1/p' "$work/dom.html")"
  errors="$(grep -c 'data-errors=' "$work/dom.html" || true)"
  first="$(sed -n 's/.*id="first-rank">\([0-9]*\)<.*/\1/p' "$work/dom.html") $(sed -n 's/.*id="first-step">\([0-9]*\)<.*/\1/p' "$work/dom.html")"
  echo "[load $i] rendered in ${rendered:-?} ms after navigation (page's own clock); browser wall ${wall} s," \
       "blank page ${blank} s; first divergence shown: rank/step ${first}; script errors: ${errors}"
done
chrome --window-size=1280,1100 --screenshot="$work/shot.png" "file://$page" >/dev/null 2>&1
echo "[screenshot] $(stat -c %s "$work/shot.png") bytes"
((keep)) && echo "(kept in $work)"
exit 0
