#!/usr/bin/env bash
# Writes the fuzzers' seed corpus (fuzz/corpus/) from real logs: tests/trace_job under hostnccl-run with the shim
# preloaded, two ranks, one step, at each trace level, perturbed, killed (a torn tail) and under a small file size
# limit (a truncation marker). Run it when the log format changes; commit the result (a few KiB per file). The log
# seeds are named after the format version they were written in (v2-hash-rank0.dnc): only the current version's are
# rewritten, and those of earlier versions stay, since readers read every earlier version forever.
#   scripts/fuzz-seeds.sh            uses build/release (built here if need be; PRESET=... for another preset)
#   BUILD=build/mine scripts/fuzz-seeds.sh               builds the three targets it needs there first
#   BUILD=build/mine SKIP_BUILD=1 scripts/fuzz-seeds.sh  uses what that build holds
set -euo pipefail
cd "$(dirname "$0")/.."

preset="${PRESET:-release}"
build="${BUILD:-build/$preset}"
if [[ -z "${BUILD:-}" ]]; then
  cmake --preset "$preset" >/dev/null
fi
[[ -n "${SKIP_BUILD:-}" ]] || cmake --build "$build" -j "$(nproc)" --target detnccl trace_job unmarked_job hostnccl-run >/dev/null

shim="$(find "$build/lib" "$build/interpose" -name 'libdetnccl.so' 2>/dev/null | head -n1)"
launcher="$(find "$build" -name hostnccl-run -type f -perm -u+x | head -n1)"
job="$build/tests/trace_job"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# trace RUN [ENV...] -- [JOB ARGS...]: one 2-rank run; "ulimit -f" applies when FSIZE_KIB is set.
trace() {
  local run="$1"; shift
  local env=()
  while [[ "$1" != "--" ]]; do env+=("$1"); shift; done
  shift
  (
    [[ -n "${FSIZE_KIB:-}" ]] && ulimit -f "$FSIZE_KIB"
    env HOSTNCCL_TIMEOUT_S=20 "$launcher" -n 2 --timeout 60 --grace 1 -- env LD_PRELOAD="$shim" \
      DETNCCL_DIR="$work" DETNCCL_RUN="$run" "${env[@]}" "$job" --steps 1 "$@"
  ) >/dev/null 2>&1 || true
}

trace hash --
trace perturbed -- --perturb-rank 0 --perturb-step 0
trace meta DETNCCL_TRACE=meta --
trace segments DETNCCL_TRACE=segments DETNCCL_SEGMENT_BYTES=16K --
trace killed -- --steps 3 --die-at-step 1
# A job that marks no steps, numbered by the shim, and the same with no numbering (--infer-steps's input).
unmarked() {
  local run="$1"; shift
  env HOSTNCCL_TIMEOUT_S=20 "$launcher" -n 2 --timeout 60 --grace 1 -- env LD_PRELOAD="$shim" DETNCCL_DIR="$work" \
    DETNCCL_RUN="$run" DETNCCL_DETERMINISTIC=1 "$@" "$build/tests/unmarked_job" --iterations 5 >/dev/null 2>&1 || true
}
unmarked unmarked
unmarked unnumbered DETNCCL_STEP_INFERENCE=off
# DETNCCL_TRACE=steps: communicators and step digests only.
unmarked steps DETNCCL_TRACE=steps
# The file size limit also bounds hostnccl's shared-memory segment (sized with ftruncate): keep it small.
FSIZE_KIB=32 trace truncated HOSTNCCL_SLOT_BYTES=4096 HOSTNCCL_RING_BYTES=4096 DETNCCL_TRACE=segments \
  DETNCCL_SEGMENT_BYTES=16K -- --steps 30

# The format version the logs were written in: the header's u32 at offset 8.
version="$(od -An -tu4 -j8 -N4 "$work/hash/rank-00000.dnc" | tr -d ' ')"
[[ -n "$version" ]] || { echo "fuzz-seeds: the 'hash' run wrote no log (is $build up to date?)" >&2; exit 1; }
rm -rf fuzz/corpus/config
rm -f fuzz/corpus/log_reader/v"$version"-* fuzz/corpus/diff/v"$version"-*
mkdir -p fuzz/corpus/log_reader fuzz/corpus/config fuzz/corpus/diff
# A killed rank's log keeps its reserved, never-written space (zeros): cut it at the last 8-byte word holding data,
# which the reader still reads as the same torn tail, so that the seeds stay a few KiB.
trim_zeros() {
  python3 -c 'import sys; d = open(sys.argv[1], "rb").read().rstrip(b"\0"); n = -(-len(d) // 8) * 8
sys.stdout.buffer.write(d + b"\0" * (n - len(d)))' "$1" >"$1.trimmed"
  mv "$1.trimmed" "$1"
}
for f in "$work"/killed/*.dnc; do trim_zeros "$f"; done
for run in ${SEED_RUNS:-hash meta segments killed truncated}; do
  if [[ ! -f "$work/$run/rank-00000.dnc" ]]; then
    echo "fuzz-seeds: the '$run' run wrote no log (is $build up to date?)" >&2
    exit 1
  fi
  cp "$work/$run/rank-00000.dnc" "fuzz/corpus/log_reader/v$version-$run-rank0.dnc"
done
cp "$work/killed/rank-00001.dnc" "fuzz/corpus/log_reader/v$version-killed-rank1.dnc"

separator='@@DNC-NEXT-LOG@@'
pair() {  # pair NAME RUN_A RUN_B: ranks 0 and 1 of both runs, interleaved as diff_fuzz.cc reads them
  { cat "$work/$2/rank-00000.dnc"; printf '%s' "$separator"; cat "$work/$3/rank-00000.dnc"; printf '%s' "$separator"
    cat "$work/$2/rank-00001.dnc"; printf '%s' "$separator"; cat "$work/$3/rank-00001.dnc"; } >"fuzz/corpus/diff/v$version-$1"
}
pair identical hash hash
pair perturbed hash perturbed
pair killed hash killed
pair meta-vs-hash meta hash
pair unmarked-vs-unnumbered unmarked unnumbered
pair steps-vs-unmarked steps unmarked
cp "$work/steps/rank-00000.dnc" "fuzz/corpus/log_reader/v$version-steps-rank0.dnc"

# Capture files (DETNCCL_CAPTURE, records/capture_format.h): one closed cleanly, one whose budget ran out (a stop
# marker), and the first one cut inside a record (a killed writer's torn tail). Named after their own format version.
trace capture DETNCCL_CAPTURE=1 --
trace capture-budget DETNCCL_CAPTURE=1 DETNCCL_CAPTURE_BYTES=6K --
capture_version="$(od -An -tu4 -j8 -N4 "$work/capture/rank-00000.cap" | tr -d ' ')"
[[ -n "$capture_version" ]] || { echo "fuzz-seeds: the 'capture' run wrote no capture file" >&2; exit 1; }
mkdir -p fuzz/corpus/capture_reader
rm -f fuzz/corpus/capture_reader/v"$capture_version"-*
cp "$work/capture/rank-00000.cap" "fuzz/corpus/capture_reader/v$capture_version-closed.cap"
cp "$work/capture-budget/rank-00000.cap" "fuzz/corpus/capture_reader/v$capture_version-budget-stopped.cap"
head -c 1000 "$work/capture/rank-00000.cap" >"fuzz/corpus/capture_reader/v$capture_version-torn.cap"

# The configuration: the header's own configuration text of a real log, and lists exercising every variable.
strings -n 8 "$work/segments/rank-00000.dnc" | grep '^DETNCCL_' >fuzz/corpus/config/from-log-header.txt || true
cat >fuzz/corpus/config/every-variable.txt <<'SEED'
DETNCCL_DIR=/scratch/detnccl
DETNCCL_RUN=run-20261129.0
DETNCCL_TRACE=segments
DETNCCL_SEGMENT_BYTES=64K
DETNCCL_STEPS=1,5,40-44,100-
DETNCCL_RANKS=0,3,8-15
DETNCCL_OPS=AllReduce,reducescatter,Send,Recv
DETNCCL_MIN_BYTES=1M
DETNCCL_CAPTURE=1
DETNCCL_CAPTURE_BYTES=64M
DETNCCL_LOG_LEVEL=info
DETNCCL_LOG_FILE=/tmp/detnccl.log
DETNCCL_PRINT_CONFIG=1
DETNCCL_DETERMINISTIC=0
DETNCCL_ALGO=auto
DETNCCL_STEP_INFERENCE=calls
DETNCCL_STEP_BOUNDARY=AllReduce,count=1,datatype=float32,comm=0,at=end
NCCL_ALGO=Ring
RANK=3
WORLD_SIZE=16
TORCHELASTIC_RUN_ID=job/1
TORCHELASTIC_RESTART_COUNT=2
SLURM_JOB_ID=12345
SLURM_STEP_ID=0
SEED
printf 'DETNCCL_STPES=1\nDETNCCL_TRACE=everything\nDETNCCL_SEGMENT_BYTES=99999999999999999999G\nDETNCCL_OPS=,,\nDETNCCL_STEP_BOUNDARY=Send,,count=x\n' \
  >fuzz/corpus/config/errors.txt
printf '\0DETNCCL_DIR=/tmp/a\nb\0DETNCCL_RUN=x\0SLURM_PROCID=\xff\0' >fuzz/corpus/config/nul-separated.bin
chmod 0644 fuzz/corpus/*/*
du -sh fuzz/corpus/*
