#!/usr/bin/env bash
# The GPU validation, one entry point (docs/gpu-validation.md): runs every part, prints one summary table
# (check | result | figure) and writes it, with each part's full output, under $OUT (or build/gpu-checks/results).
#
#   bench/gpu/run.sh --prebuilt DIR      the device machine: binaries carried from here (bench/gpu/prepare.sh)
#   bench/gpu/run.sh                     build the CUDA check programs standalone with nvcc; the parts that need the
#                                        shim, the CLI or hostnccl are skipped (they need Debian packages to build)
#   bench/gpu/run.sh --build-dir DIR     binaries of a main build tree (CUDA ON)
#   ... --dry-run                        no GPU: every part's CPU side (ctest gpu_run_dry_run)
#   ... --parts a,b                      only these parts (default: all)
#
# Exit status 0 when every required check passed or was skipped, 1 otherwise (the optional part never fails it).
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
cuda_root="${CUDA_HOME:-/usr/local/cuda}"
dry_run=0
prebuilt=""
build_dir=""
parts_wanted=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry_run=1 ;;
    --prebuilt) prebuilt="$(cd "$2" && pwd)" || exit 2; shift ;;
    --build-dir) build_dir="$(cd "$2" && pwd)" || exit 2; shift ;;
    --parts) parts_wanted="$2"; shift ;;
    *) echo "unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
  shift
done

# Not a DETNCCL_* name: the preloaded shim stops a job over any DETNCCL_* variable it does not know.
standalone="${GPU_CHECKS_BUILD_DIR:-${root}/build/gpu-checks}"
out="${OUT:-${standalone}/results}"
mkdir -p "${out}"
stamp="$(date -u +%Y-%m-%dT%H%MZ)"
work="$(mktemp -d "${TMPDIR:-/tmp}/detnccl-gpu.XXXXXX")"
trap 'rm -rf "${work}"' EXIT
summary="${out}/gpu_summary_${stamp}.txt"

# Every part in order, with its time budget in seconds (the whole script must stay under 8 minutes on the device;
# the budgets add up to 470 s and the parts usually take a fraction of theirs).
PARTS=(fingerprint deterministic shim nccl ranks pytorch two_ranks_real_nccl)
declare -A BUDGET=([fingerprint]=60 [deterministic]=60 [shim]=80 [nccl]=90 [ranks]=60 [pytorch]=80
                   [two_ranks_real_nccl]=40)

log() { printf '== %s\n' "$*"; }

# One summary row. A failed row of a required part fails the script.
row() {  # check result figure
  printf '%-58s | %-13s | %s\n' "$1" "$2" "$3" >>"${summary}"
}

# --- where the binaries are ------------------------------------------------------------------------------------
if [ -n "${prebuilt}" ]; then
  bin="${prebuilt}/bin"; shim="${prebuilt}/lib/libdetnccl.so"; cli="${prebuilt}/bin/detnccl"
  hostnccl_dir="${prebuilt}/hostnccl"; extra_libs="${prebuilt}/lib"
  check_bin() { echo "${bin}/$1"; }
  # The binaries were built with GCC 12: a device image whose libstdc++ is older lacks symbols they need. Only then
  # is the carried C++ runtime used (lib-fallback/); a newer system one is never replaced (PyTorch may need it).
  if ! "${cli}" --version >/dev/null 2>"${work:-/tmp}/loader-check.txt" &&
    grep -q "GLIBCXX\|CXXABI\|GCC_" "${work:-/tmp}/loader-check.txt" && [ -d "${prebuilt}/lib-fallback" ]; then
    echo "the system's C++ runtime is older than the binaries need: using the carried one (lib-fallback/)"
    extra_libs="${extra_libs}:${prebuilt}/lib-fallback"
  fi
elif [ -n "${build_dir}" ]; then
  shim="${build_dir}/lib/libdetnccl.so"; cli="${build_dir}/cli/detnccl"
  hostnccl_dir="${build_dir}/hostnccl/lib"; extra_libs=""
  check_bin() { echo "${build_dir}/bench/$1"; }
else
  shim=""; cli=""; hostnccl_dir=""; extra_libs=""
  check_bin() { echo "${standalone}/$1"; }
  nvcc="${cuda_root}/bin/nvcc"
  command -v nvcc >/dev/null 2>&1 && nvcc="$(command -v nvcc)"
  log "configure + build the standalone checks (${standalone})"
  cmake -S "${here}" -B "${standalone}" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="${nvcc}" >/dev/null &&
    cmake --build "${standalone}" -j "$(nproc)" || { echo "standalone build failed" >&2; exit 1; }
fi
have_shim() { [ -n "${shim}" ] && [ -f "${shim}" ] && [ -x "${cli}" ] && [ -x "$(check_bin gpu_traced_job)" ]; }
memory=device; [ "${dry_run}" -eq 1 ] && memory=host

# The NCCL that PyTorch brings (the device machine has no other): its directory, or empty.
real_nccl_dir() {
  python3 - <<'EOF' 2>/dev/null
import glob, os
dirs = []
try:
    import nvidia.nccl
    dirs += [os.path.join(p, "lib") for p in nvidia.nccl.__path__]
except Exception:
    pass
try:
    import torch
    dirs.append(os.path.join(os.path.dirname(torch.__file__), "lib"))
    # Whatever the wheels' layout: libtorch_cuda.so needs libnccl.so.2, so importing torch loads it.
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if os.path.basename(path).startswith("libnccl.so"):
                dirs.append(os.path.dirname(path))
except Exception:
    pass
for d in dirs:
    if glob.glob(os.path.join(d, "libnccl.so*")):
        print(d)
        break
EOF
}

# Runs the traced job with NCCL from $1 (a directory) under the shim: job_env DIR [VAR=value...] -- job args.
with_nccl() {
  local nccl_dir="$1"; shift
  local vars=()
  while [ "$1" != "--" ]; do vars+=("$1"); shift; done
  shift
  env LD_LIBRARY_PATH="${nccl_dir}${extra_libs:+:${extra_libs}}${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}" "${vars[@]}" "$@"
}

describe_machine() {
  echo "date: ${stamp}"
  echo "host: $(uname -srm), $(nproc) CPUs"
  echo "commit: $(git -C "${root}" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "mode: $([ "${dry_run}" -eq 1 ] && echo dry-run || echo gpu); binaries: ${prebuilt:-${build_dir:-standalone}}"
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
  fi
  "${cuda_root}/bin/nvcc" --version 2>/dev/null | tail -1 || true
}

# --- parts 1, 2 and the shim's device fingerprints: the check programs print their own table ---------------------
run_check_program() {  # part program
  local program; program="$(check_bin "$2")"
  if [ ! -x "${program}" ]; then row "$1" "skip" "not built (${program})"; return; fi
  local args=(); [ "${dry_run}" -eq 1 ] && args=(--dry-run)
  "${program}" "${args[@]}" 2>&1 | tee "${work}/$2.txt"
  local status=${PIPESTATUS[0]}
  # The program's own table is in the part's file; its last line is the verdict or the count of cases.
  local last; last="$(grep -v '^[[:space:]]*$' "${work}/$2.txt" | tail -1 | cut -c1-60)"
  if [ "${status}" -eq 0 ]; then
    row "$1" "ok" "${last} (table in $(basename "${part_file}"))"
  else
    row "$1" "FAIL" "exit ${status}: $(grep -c '| FAIL' "${work}/$2.txt") failed rows (see $(basename "${part_file}"))"
  fi
}
part_fingerprint() { run_check_program "GPU fingerprints = CPU; throughput vs D2D copy" gpu_fingerprint_check; }
part_deterministic() {
  run_check_program "reduce kernels = CPU arithmetic; throughput" bench_deterministic_gpu
  # #21 item 2 for the reduction kernels, in a process of its own (see part_shim's lazy rows).
  local label="deterministic: LAZY loading, kernel spinning: launch returns"
  local program; program="$(check_bin bench_deterministic_gpu)"
  if [ "${dry_run}" -eq 1 ]; then row "${label}" "skip" "dry run (needs a GPU)"; return; fi
  if [ ! -x "${program}" ]; then row "${label}" "skip" "not built (${program})"; return; fi
  CUDA_MODULE_LOADING=LAZY timeout 60 "${program}" --lazy-load 2>&1 | tee "${work}/deterministic-lazy.txt"
  local status=${PIPESTATUS[0]}
  local seen; seen="$(grep '^lazy-load:' "${work}/deterministic-lazy.txt" | cut -c12-)"
  if [ "${status}" -eq 0 ]; then row "${label}" "ok" "${seen}"; else row "${label}" "FAIL" "exit ${status}: ${seen}"; fi
}
part_shim() {
  run_check_program "shim device fingerprints (tickets, capture, driver)" gpu_shim_check
  # #21 item 2, in processes of their own (nothing loaded before): under lazy loading, with a kernel spinning on a
  # host flag, the first fingerprint call must return before the flag is set (the kernels were loaded at
  # "communicator creation"). The control, without that preload, says whether this driver's lazy load would wait.
  local label="shim: LAZY loading, kernel spinning: fingerprint returns"
  local program; program="$(check_bin gpu_shim_check)"
  if [ "${dry_run}" -eq 1 ]; then row "${label}" "skip" "dry run (needs a GPU)"; return; fi
  if [ ! -x "${program}" ]; then row "${label}" "skip" "not built (${program})"; return; fi
  local mode
  for mode in lazy-load lazy-load-control; do
    CUDA_MODULE_LOADING=LAZY timeout 60 "${program}" "--${mode}" 2>&1 | tee "${work}/${mode}.txt"
    local status=${PIPESTATUS[0]}
    local seen; seen="$(grep 'first fingerprint call' "${work}/${mode}.txt" | head -1 | cut -d'|' -f3 | cut -c2-)"
    if [ "${mode}" = lazy-load-control ]; then
      row "shim: lazy-load control, no preload (info)" "info" "${seen:-exit ${status}}"
    elif [ "${status}" -eq 0 ]; then
      row "${label}" "ok" "${seen}"
    else
      row "${label}" "FAIL" "exit ${status}: ${seen:-no row} (see the part's file)"
    fi
  done
}

# --- part 3: the shim over the real NCCL, one rank --------------------------------------------------------------
part_nccl() {
  if ! have_shim; then row "nccl: shim over real NCCL" "skip" "needs --prebuilt or --build-dir"; return; fi
  local nccl_dir job; job="$(check_bin gpu_traced_job)"
  if [ "${dry_run}" -eq 1 ]; then nccl_dir="${hostnccl_dir}"; else nccl_dir="$(real_nccl_dir)"; fi
  if [ -z "${nccl_dir}" ]; then row "nccl: shim over real NCCL" "FAIL" "no libnccl.so.2 (PyTorch's) found"; return; fi
  echo "NCCL from ${nccl_dir}"
  local traces="${work}/traces"
  # One traced run of gpu_traced_job whose records must equal the CPU fingerprints it wrote: label run mode [args].
  traced_calls_row() {
    local label="$1" run="$2"; shift 2
    if with_nccl "${nccl_dir}" LD_PRELOAD="${shim}" DETNCCL_DIR="${traces}" DETNCCL_RUN="${run}" -- \
        "${job}" "$@" --memory "${memory}" --expect "${work}/${run}.expect" &&
       "${cli}" dump "${traces}/${run}" --format jsonl >"${work}/${run}.jsonl"; then
      local figure; figure="$(python3 "${here}/records.py" fingerprints "${work}/${run}.expect" "${work}/${run}.jsonl")"
      if [ $? -eq 0 ]; then row "nccl: ${label}" "ok" "${figure}"; else row "nccl: ${label}" "FAIL" "${figure}"; fi
    else
      row "nccl: ${label}" "FAIL" "the traced job or the dump failed (see the part's file)"
    fi
  }
  traced_calls_row "every call, grouped, in place: records = CPU fingerprints" calls calls
  # The same on a non-blocking communicator: calls may return ncclInProgress before NCCL has enqueued them, and the
  # shim must fingerprint the outputs only after that.
  traced_calls_row "non-blocking communicator: records = CPU fingerprints" calls-nb calls --nonblocking
  # main returns right after its last AllReduce is enqueued: the shim's exit drain must still record every call with
  # its fingerprints, whatever the CUDA runtime's own exit handlers do.
  traced_calls_row "return from main after the last call: records complete" exit exit
  # #21 item 5: the same exit, its warnings read: the drain must run before the CUDA runtime's exit handlers, so no
  # device fingerprint may fail (or be reported lost) at exit.
  label="return from main: no device fingerprint lost at exit"
  if with_nccl "${nccl_dir}" LD_PRELOAD="${shim}" DETNCCL_DIR="${traces}" DETNCCL_RUN=exit-warnings -- \
      "${job}" exit --memory "${memory}" --expect "${work}/exit-warnings.expect" 2>"${work}/exit-warnings.stderr"; then
    if grep -q "device fingerprint" "${work}/exit-warnings.stderr"; then
      row "nccl: ${label}" "FAIL" "$(grep -m1 "device fingerprint" "${work}/exit-warnings.stderr" | cut -c1-160)"
    else
      row "nccl: ${label}" "ok" "no fingerprint warning in the job's stderr"
    fi
  else
    row "nccl: ${label}" "FAIL" "the traced job failed (see ${work}/exit-warnings.stderr)"
  fi
  # Deterministic AllReduces of one communicator on two streams: ordered as NCCL orders them (shared scratch).
  label="deterministic, one communicator, two streams: outputs exact"
  local streams_out
  if streams_out="$(with_nccl "${nccl_dir}" LD_PRELOAD="${shim}" DETNCCL_DETERMINISTIC=1 DETNCCL_ACCUMULATE=fp32 -- \
      "${job}" streams --memory "${memory}")"; then
    row "nccl: ${label}" "ok" "$(grep '^streams:' <<<"${streams_out}" | cut -c10-)"
  else
    echo "${streams_out}"
    row "nccl: ${label}" "FAIL" "$(grep '^streams:' <<<"${streams_out}" | cut -c10-) (see the part's file)"
  fi

  if [ "${dry_run}" -eq 1 ]; then
    row "nccl: CUDA graph, traced AllReduce" "skip" "dry run (needs a GPU)"
    row "nccl: CUDA graph, deterministic AllReduce" "skip" "dry run (needs a GPU)"
  else
    local mode
    for mode in traced deterministic; do
      local det=0; [ "${mode}" = deterministic ] && det=1
      if with_nccl "${nccl_dir}" LD_PRELOAD="${shim}" DETNCCL_DIR="${traces}" DETNCCL_RUN="graph-${mode}" \
          DETNCCL_DETERMINISTIC="${det}" -- "${job}" graph --memory device &&
         "${cli}" dump "${traces}/graph-${mode}" --format jsonl >"${work}/graph-${mode}.jsonl"; then
        row "nccl: CUDA graph, ${mode} AllReduce: captured, 3 replays" "ok" \
          "$(python3 "${here}/records.py" flag "${work}/graph-${mode}.jsonl" 64)"
      else
        row "nccl: CUDA graph, ${mode} AllReduce: captured, 3 replays" "FAIL" "see the part's file"
      fi
    done
  fi

  # The added cost of tracing: the same AllReduce loop without the shim, then traced (hash), in this run.
  local bytes=268435456 iterations=20
  [ "${dry_run}" -eq 1 ] && bytes=4194304 iterations=3
  local base traced
  base="$(with_nccl "${nccl_dir}" -- "${job}" time --memory "${memory}" --bytes "${bytes}" --iterations "${iterations}" |
    awk '/^seconds_per_call/ {print $2}')"
  traced="$(with_nccl "${nccl_dir}" LD_PRELOAD="${shim}" DETNCCL_DIR="${traces}" DETNCCL_RUN=cost -- \
    "${job}" time --memory "${memory}" --bytes "${bytes}" --iterations "${iterations}" | awk '/^seconds_per_call/ {print $2}')"
  if [ -n "${base}" ] && [ -n "${traced}" ]; then
    row "nccl: tracing cost, AllReduce $((bytes >> 20)) MiB" "info" \
      "$(awk -v b="${base}" -v t="${traced}" 'BEGIN {printf "traced/untraced %.2fx (%.3f ms vs %.3f ms)", t / b, t * 1e3, b * 1e3}')"
  else
    row "nccl: tracing cost, AllReduce $((bytes >> 20)) MiB" "FAIL" "a timing run failed"
  fi
}

# --- part 4: 4 ranks on one GPU through hostnccl (device buffers staged), deterministic ----------------------------
ranks_job() {  # nccl_dir run_name memory nranks prefix [extra job args] -- [extra env]
  local nccl_dir="$1" run="$2" mem="$3" n="$4" prefix="$5"; shift 5
  local args=() vars=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do args+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  vars=("$@")
  with_nccl "${nccl_dir}" LD_PRELOAD="${shim}" DETNCCL_DIR="${work}/traces" DETNCCL_RUN="${run}" \
    DETNCCL_DETERMINISTIC=1 HOSTNCCL_TIMEOUT_S=60 "${vars[@]}" -- \
    "$(check_bin gpu_traced_job)" ranks --ranks "${n}" --memory "${mem}" --out "${prefix}" "${args[@]}"
}
same_outputs() {  # prefix_a prefix_b nranks
  local r
  for ((r = 0; r < $3; r++)); do cmp -s "$1.rank-${r}" "$2.rank-${r}" || return 1; done
}
part_ranks() {
  if ! have_shim; then row "ranks: 4 ranks on one GPU via hostnccl" "skip" "needs --prebuilt or --build-dir"; return; fi
  local label="ranks: 4 ranks, deterministic, ${memory} buffers = host buffers"
  # Two runs under distinct names (in a dry run both use host memory: the same name would switch tracing off).
  if ranks_job "${hostnccl_dir}" ranks-a-host host 4 "${work}/host" &&
     ranks_job "${hostnccl_dir}" "ranks-b-${memory}" "${memory}" 4 "${work}/${memory}-4"; then
    if same_outputs "${work}/host" "${work}/${memory}-4" 4; then
      row "${label}" "ok" "9 reductions x 4 ranks bitwise equal ($(du -cb "${work}"/host.rank-* | tail -1 | cut -f1) bytes)"
    else
      row "${label}" "FAIL" "outputs differ"
    fi
    if "${cli}" diff "${work}/traces/ranks-a-host" "${work}/traces/ranks-b-${memory}" >"${work}/ranks-diff.txt" 2>&1; then
      row "ranks: detnccl diff of the two runs (fingerprints)" "ok" "identical"
    else
      row "ranks: detnccl diff of the two runs (fingerprints)" "FAIL" "$(head -3 "${work}/ranks-diff.txt" | tr '\n' ' ')"
    fi
  else
    row "${label}" "FAIL" "a rank failed (see the part's file)"
  fi
  # Pinned host buffers, each input copied in on the stream just before the call (#21 item 4): hostnccl must read
  # and write them in stream order, like device memory.
  if [ "${dry_run}" -eq 1 ]; then
    row "ranks: pinned host buffers in stream order = host buffers" "skip" "dry run: needs a GPU"
  elif ranks_job "${hostnccl_dir}" ranks-c-pinned pinned 4 "${work}/pinned-4"; then
    if same_outputs "${work}/host" "${work}/pinned-4" 4; then
      row "ranks: pinned host buffers in stream order = host buffers" "ok" "9 reductions x 4 ranks bitwise equal"
    else
      row "ranks: pinned host buffers in stream order = host buffers" "FAIL" "outputs differ"
    fi
  else
    row "ranks: pinned host buffers in stream order = host buffers" "FAIL" "a rank failed (see the part's file)"
  fi
}

# --- part 5: PyTorch DDP, world size 1, under LD_PRELOAD, twice ---------------------------------------------------
part_pytorch() {
  local script="${root}/examples/pytorch/train_ddp.py"
  if [ "${dry_run}" -eq 1 ]; then
    if python3 -m py_compile "${script}" "${root}/interpose/python/detnccl_step.py" 2>&1; then
      row "pytorch: train_ddp.py and detnccl_step.py compile" "ok" "dry run: not started (needs a GPU and PyTorch)"
    else
      row "pytorch: train_ddp.py and detnccl_step.py compile" "FAIL" "syntax error"
    fi
    return
  fi
  if ! have_shim; then row "pytorch: DDP world size 1, traced twice" "skip" "needs --prebuilt or --build-dir"; return; fi
  local steps=20 run
  for run in a b; do
    env LD_PRELOAD="${shim}" DETNCCL_DIR="${work}/traces" DETNCCL_RUN="torch-${run}" \
      LD_LIBRARY_PATH="${extra_libs}${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}" \
      RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$((29500 + RANDOM % 1000)) \
      python3 "${script}" --steps "${steps}" --checkpoint-dir "${work}/checkpoints" ||
      { row "pytorch: DDP world size 1, traced run ${run}" "FAIL" "the job failed (see the part's file)"; return; }
  done
  if "${cli}" diff "${work}/traces/torch-a" "${work}/traces/torch-b" >"${work}/torch-diff.txt" 2>&1; then
    row "pytorch: detnccl diff of two traced DDP runs" "ok" "identical ($(tail -1 "${work}/torch-diff.txt"))"
  else
    row "pytorch: detnccl diff of two traced DDP runs" "FAIL" "$(head -3 "${work}/torch-diff.txt" | tr '\n' ' ')"
  fi
  "${cli}" dump "${work}/traces/torch-a" --format jsonl >"${work}/torch-a.jsonl"
  local figure; figure="$(python3 "${here}/records.py" steps "${work}/torch-a.jsonl" "${steps}")"
  if [ $? -eq 0 ]; then row "pytorch: records stamped by detnccl_step" "ok" "${figure}"; else row "pytorch: records stamped by detnccl_step" "FAIL" "${figure}"; fi
}

# --- optional: 2 ranks of the real NCCL on one GPU (a host id each, sockets over loopback) -----------------------
part_two_ranks_real_nccl() {
  local label="OPTIONAL: 2 ranks real NCCL, deterministic = hostnccl host"
  if ! have_shim; then row "${label}" "skip" "needs --prebuilt or --build-dir"; return; fi
  local nccl_dir mem=device
  if [ "${dry_run}" -eq 1 ]; then nccl_dir="${hostnccl_dir}"; mem=host; else nccl_dir="$(real_nccl_dir)"; fi
  if ranks_job "${hostnccl_dir}" two-host host 2 "${work}/two-host" &&
     ranks_job "${nccl_dir}" two-real "${mem}" 2 "${work}/two-real" --distinct-hosts -- NCCL_P2P_DISABLE=1 \
       NCCL_SHM_DISABLE=1 NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo; then
    if same_outputs "${work}/two-host" "${work}/two-real" 2; then
      row "${label}" "ok" "bitwise equal"
    else
      row "${label}" "FAIL (opt.)" "outputs differ"
    fi
  else
    row "${label}" "FAIL (opt.)" "a rank failed (see the part's file)"
  fi
}

# --- the run -------------------------------------------------------------------------------------------------------
{ describe_machine; echo; printf '%-58s | %-13s | %s\n' check result figure; } >"${summary}"
# Each part runs under timeout(1) in its own bash: the budget ends the part's whole process group (the job's ranks
# included), and the rows it wrote so far stay in the summary.
export -f $(declare -F | awk '{print $3}')
export here root cuda_root dry_run prebuilt build_dir standalone out stamp work summary shim cli hostnccl_dir \
  extra_libs memory bin
for part in "${PARTS[@]}"; do
  if [ -n "${parts_wanted}" ] && [[ ",${parts_wanted}," != *",${part},"* ]]; then continue; fi
  part_file="${out}/gpu_${part}_${stamp}.txt"
  log "part ${part} (budget ${BUDGET[${part}]} s) -> ${part_file}"
  rows_before="$(wc -l <"${summary}")"
  started=${SECONDS}
  { describe_machine; echo; } >"${part_file}"
  part_file="${part_file}" timeout --kill-after=5 "${BUDGET[${part}]}" bash -c "part_${part}" 2>&1 | tee -a "${part_file}"
  part_status=${PIPESTATUS[0]}
  echo "part status ${part_status}, $((SECONDS - started)) s" | tee -a "${part_file}"
  if [ "${part_status}" -eq 124 ] || [ "${part_status}" -eq 137 ]; then
    optional=0; [ "${part}" = two_ranks_real_nccl ] && optional=1
    row "${part}: ran out of its ${BUDGET[${part}]} s budget" "FAIL$([ "${optional}" -eq 1 ] && echo ' (opt.)')" \
      "rows above are what finished"
  elif [ "$(wc -l <"${summary}")" -eq "${rows_before}" ]; then
    row "${part}: ended without a result" "FAIL" "status ${part_status} (see $(basename "${part_file}"))"
  fi
done

echo
cat "${summary}"
# Required rows say exactly "FAIL"; the optional part's failures say "FAIL (opt.)".
if grep -Eq '\| FAIL +\|' "${summary}"; then verdict=FAIL; else verdict=PASS; fi
echo "${verdict}" | tee -a "${summary}"
log "summary: ${summary}"
[ "${verdict}" = PASS ]
