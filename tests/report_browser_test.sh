#!/usr/bin/env bash
# `detnccl report` in a real browser (headless Chromium): the report of the demo's perturbed pair (written by
# scripts/demo.sh, the demo_claims_hold test) and of a 64-rank synthetic pair (bench_scale's four communicators, one
# planted divergence). For each page: the report's data agrees with `detnccl diff --json` (the same analysis); the page
# holds no external URL and forbids every request (its Content-Security-Policy); Chromium renders it (--dump-dom) with
# the verdict, the first divergence's rank and step and the legend, no JavaScript error and no console message (CSP
# refusals included); its screenshot is not blank. The demo page's screenshot is the README's
# (docs/report-screenshot.png): the test leaves it in OUT_DIR and says how to update it. A third page, of two runs
# captured with DETNCCL_CAPTURE=1 (trace_job under the shim on hostnccl, one AllReduce output corrupted by
# HOSTNCCL_CORRUPT in the second), shows the first divergence's magnitude and `detnccl replay` as the next command.
#   tests/report_browser_test.sh DETNCCL BENCH_SCALE DEMO_REPORT OUT_DIR HOSTNCCL_RUN SHIM TRACE_JOB
# Exit status 77 (ctest SKIP_RETURN_CODE) when no Chromium is installed: scripts/install-deps.sh installs it.
set -euo pipefail

cli="$1"
bench_scale="$2"
demo_report="$(realpath -m -- "$3")"
out="$(realpath -m -- "$4")"
launcher="$5"
shim="$6"
trace_job="$7"

browser=""
for candidate in chromium chromium-browser; do
  if command -v "$candidate" >/dev/null 2>&1; then browser="$(command -v "$candidate")"; break; fi
done
if [[ -z "$browser" ]]; then
  echo "SKIPPED: no chromium on PATH (apt-get install chromium, or scripts/install-deps.sh)"
  exit 77
fi
python="$(command -v python3)"

mkdir -p "$out"
work="$(mktemp -d /tmp/detnccl-report-test.XXXXXX)"
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# The browser, headless, as root too (--no-sandbox), with its own profile: no first-run work, no shared state.
chrome() {
  local profile="$1"; shift
  timeout 60 "$browser" --headless=new --no-sandbox --disable-gpu --no-first-run --disable-extensions \
    --disable-background-networking --disable-sync --hide-scrollbars --user-data-dir="$work/$profile" "$@"
}

# field JSON_FILE EXPR: a value of a JSON document (a Python expression over `d`).
field() { "$python" -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }

# The 64-rank synthetic pair: bench_scale writes it (and diffs it), kept in $work.
"$bench_scale" --ranks 64 --steps 48 --level hash --seed 64 --threads 2 --dir "$work" --keep >"$work/bench.out" 2>&1 ||
  { cat "$work/bench.out" >&2; echo "FAIL: bench_scale could not write the synthetic runs" >&2; exit 1; }
synthetic="$(ls -d "$work"/detnccl-bench-scale-*-hash)"

# report NAME RUN_A RUN_B: the page, its --json data, and diff's --json for the same pair; checks they agree.
report() {
  local name="$1" a="$2" b="$3" status=0
  "$cli" report "$a" "$b" -o "$work/$name.html" --json >"$work/$name.json" 2>"$work/$name.err" || status=$?
  [[ "$status" == 1 ]] || fail "$name: detnccl report exited $status, not diff's 1 (diverged): $(cat "$work/$name.err")"
  status=0
  "$cli" diff "$a" "$b" --json >"$work/$name.diff.json" 2>/dev/null || status=$?
  [[ "$status" == 1 ]] || fail "$name: detnccl diff exited $status"
  local same
  same="$("$python" - "$work/$name.json" "$work/$name.diff.json" <<'EOF'
import json, sys
report, diff = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
first, d = report["first"], diff["first_divergence"]
checks = [report["verdict"] == diff["verdict"], report["receivers"] == diff["receivers"],
          all(first[k] == d[k] for k in ("rank", "step", "kind", "role", "op", "seq", "comm_id")),
          report["diff"] == diff]
print("yes" if all(checks) else "no: %s" % checks)
EOF
)"
  [[ "$same" == yes ]] || fail "$name: the report's data disagrees with detnccl diff --json ($same)"
}
report synthetic "$synthetic/a" "$synthetic/b"
synthetic_rank="$(field "$work/synthetic.diff.json" 'd["first_divergence"]["rank"]')"
synthetic_step="$(field "$work/synthetic.diff.json" 'd["first_divergence"]["step"]')"
planted="$(sed -n 's/.*(planted \([0-9]*\) \([0-9]*\)).*/\1 \2/p' "$work/bench.out" | head -1)"
[[ "$planted" == "$synthetic_rank $synthetic_step" ]] ||
  fail "synthetic: diff's first divergence is rank $synthetic_rank step $synthetic_step, bench_scale planted $planted"
# The captured pair: rank 1's first AllReduce of step 1 (its seq read from the clean run's log) gets element 17
# multiplied by 1001 in the second run: an output divergence beyond the reordering bound, every input captured.
# --keep-going: rank 1 does not stop the job at its wrong output, so every rank's log is whole.
traced() {
  env HOSTNCCL_TIMEOUT_S=20 HOSTNCCL_REDUCE_ORDER=rank "${@:2}" "$launcher" -n 4 --timeout 120 --grace 1 -- \
    env LD_PRELOAD="$shim" DETNCCL_DIR="$work/captured" DETNCCL_RUN="$1" DETNCCL_CAPTURE=1 "$trace_job" --steps 3 \
    --keep-going >"$work/$1.out" 2>&1
}
traced clean || { cat "$work/clean.out" >&2; fail "the captured run did not complete"; }
fault_seq="$("$cli" dump "$work/captured/clean" --rank 1 --format jsonl | "$python" -c '
import json, sys
calls = [c for c in map(json.loads, sys.stdin) if c.get("type") == "call"]
print(next(c["seq"] for c in calls if c["step"] == 1 and c["op"] == "AllReduce"))')"
traced faulty "HOSTNCCL_CORRUPT=rank:1,call:$fault_seq,element:17,factor:1001" ||
  { cat "$work/faulty.out" >&2; fail "the captured run with a fault did not complete"; }
report captured "$work/captured/clean" "$work/captured/faulty"
[[ -s "$demo_report" ]] || fail "no demo report at $demo_report (the demo_claims_hold test writes it)"

# page NAME FILE: the page's content checks, then the browser's DOM and screenshot of it.
page() {
  local name="$1" file="$2"
  # No external URL anywhere in the file (attributes, CSS, script), and the policy that refuses every request.
  if grep -nEo "(https?:)?//[A-Za-z0-9.-]+\.[A-Za-z]{2,}|(src|href|action)[[:space:]]*=[[:space:]]*[\"']?[[:space:]]*//|url\([[:space:]]*[\"']?[[:space:]]*(https?:)?//|@import" "$file" >"$work/$name.urls"; then
    fail "$name: the page names external URLs: $(head -3 "$work/$name.urls")"
  fi
  grep -q "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:" "$file" ||
    fail "$name: the page has no Content-Security-Policy refusing requests"
  chrome "$name-dom" --enable-logging=stderr --v=0 --virtual-time-budget=3000 --dump-dom "file://$file" \
    >"$work/$name.dom" 2>"$work/$name.log" || fail "$name: chromium --dump-dom failed: $(tail -3 "$work/$name.log")"
  chrome "$name-shot" --window-size=1280,1100 --virtual-time-budget=3000 --screenshot="$out/$name-report.png" \
    "file://$file" >/dev/null 2>"$work/$name.shot.log" || fail "$name: chromium --screenshot failed"
}
page demo "$demo_report" &
page synthetic "$work/synthetic.html" &
page captured "$work/captured.html" &
wait

# check NAME RANK STEP: what the browser rendered.
check() {
  local name="$1" rank="$2" step="$3" dom="$work/$1.dom"
  grep -q 'data-rendered="1"' "$dom" || fail "$name: the page did not finish rendering"
  if grep -q 'data-errors=' "$dom"; then
    fail "$name: JavaScript errors: $(sed -n 's/.*<div id="errors"[^>]*>\([^<]*\).*/\1/p' "$dom")"
  fi
  grep -q '<div id="errors" hidden="">' "$dom" || fail "$name: the error box is shown"
  grep -q 'id="verdict" class="verdict bad">DIVERGED<' "$dom" || fail "$name: the verdict is not DIVERGED"
  grep -q "id=\"first-rank\">$rank<" "$dom" || fail "$name: the first divergence's rank is not $rank"
  grep -q "id=\"first-step\">$step<" "$dom" || fail "$name: the first divergence's step is not $step"
  for status in identical origin receiver missing not_traced; do
    grep -q "class=\"legend-item\" data-status=\"$status\"" "$dom" || fail "$name: the legend lacks $status"
  done
  local colours
  colours="$(sed -n 's/.*data-map-colours="\([0-9]*\)".*/\1/p' "$dom")"
  ((${colours:-0} >= 3)) || fail "$name: the map shows ${colours:-no} colours"
  # The page logs nothing: a console message is a script error or a request the policy refused.
  if grep -E "CONSOLE|Uncaught|Refused to" "$work/$name.log" >"$work/$name.console"; then
    fail "$name: console messages: $(head -3 "$work/$name.console")"
  fi
  # The screenshot is not blank: a one-colour page filters to a few byte values (mostly zeros).
  "$python" - "$out/$name-report.png" <<'EOF' || fail "$name: the screenshot is blank or unreadable"
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n"
pos, idat = 8, b""
while pos < len(data):
    length, kind = struct.unpack(">I4s", data[pos:pos + 8])
    if kind == b"IDAT": idat += data[pos + 8:pos + 8 + length]
    pos += 12 + length
raw = zlib.decompress(idat)
sample = raw[::97]
distinct, nonzero = len(set(raw)), sum(1 for b in sample if b) / len(sample)
print("screenshot %s: %d bytes, %d distinct filtered byte values, %.1f%% non-zero" % (sys.argv[1], len(data), distinct, 100 * nonzero))
sys.exit(0 if distinct > 32 and nonzero > 0.02 else 1)
EOF
}
check demo 2 10
check synthetic "$synthetic_rank" "$synthetic_step"
check captured 1 1
grep -q 'id="first-magnitude">outputs differ by at most [0-9]* ulp in 1 element — beyond the reordering bound: not summation order (1 beyond it, the first at 17' \
  "$work/captured.dom" || fail "captured: the first divergence's magnitude is not shown beyond the reordering bound"
grep -q "id=\"next-command\">detnccl replay $work/captured/clean --rank 1 --seq $fault_seq<" "$work/captured.dom" ||
  fail "captured: the next command is not detnccl replay of rank 1's call $fault_seq"
size="$(stat -c %s "$out/demo-report.png")"
((size <= 200 * 1024)) || fail "the README's screenshot is $size bytes (over 200 KiB)"
echo "pages: $(stat -c %s "$demo_report") bytes (demo), $(stat -c %s "$work/synthetic.html") bytes (64 ranks x 48 steps)"
echo "the README's screenshot: cp $out/demo-report.png docs/report-screenshot.png"
if ((failures)); then echo "$failures check(s) failed" >&2; exit 1; fi
echo "every check passed"
