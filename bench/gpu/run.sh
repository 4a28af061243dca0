#!/usr/bin/env bash
# The GPU checks, one entry point: builds bench/gpu standalone and runs each check part, printing its table and
# saving it under $OUT (or build/gpu-checks/results). Later checks are new functions added to PARTS below.
#
#   bench/gpu/run.sh             build, then run every part on the GPU
#   bench/gpu/run.sh --dry-run   build, then run every part without launching kernels (works without a GPU)
#
# Needs CUDA (nvcc), cmake >= 3.25 and ninja; nothing from the network and no Debian development packages.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
build="${DETNCCL_GPU_BUILD_DIR:-${root}/build/gpu-checks}"
out="${OUT:-${build}/results}"
cuda_root="${CUDA_HOME:-/usr/local/cuda}"
mkdir -p "${out}"
stamp="$(date -u +%Y-%m-%dT%H%MZ)"

PARTS=(fingerprint shim)

log() { printf '== %s\n' "$*"; }

build_checks() {
  local nvcc="${cuda_root}/bin/nvcc"
  command -v nvcc >/dev/null 2>&1 && nvcc="$(command -v nvcc)"
  log "configure + build (${build})"
  cmake -S "${here}" -B "${build}" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="${nvcc}" >/dev/null
  cmake --build "${build}" -j "$(nproc)"
}

describe_machine() {
  echo "date: ${stamp}"
  echo "host: $(uname -srm), $(nproc) CPUs"
  echo "commit: $(git -C "${root}" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader || true
  fi
  "${cuda_root}/bin/nvcc" --version 2>/dev/null | tail -1 || true
}

part_fingerprint() {
  "${build}/gpu_fingerprint_check" "$@"
}

# The shim's device fingerprints: tickets vs the CPU reference, stream order, stream capture (bench/gpu/shim_check.cu).
part_shim() {
  "${build}/gpu_shim_check" "$@"
}

build_checks
status=0
for part in "${PARTS[@]}"; do
  file="${out}/gpu_${part}_${stamp}.txt"
  log "part ${part} -> ${file}"
  { describe_machine; echo; "part_${part}" "$@"; } 2>&1 | tee "${file}" || status=1
  # tee hides the check's status: read it from the table's last line.
  tail -1 "${file}" | grep -q '^PASS' || status=1
done
log "done: $([ "${status}" -eq 0 ] && echo PASS || echo FAIL)"
exit "${status}"
