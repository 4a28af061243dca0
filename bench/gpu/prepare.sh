#!/usr/bin/env bash
# Builds here (release, CUDA ON) everything the GPU validation needs on the device machine, which has no Debian
# development packages, and gathers it into one directory to carry there (the device tool's `carry`, 64 MiB at most):
#
#   bin/      detnccl (CLI), gpu_traced_job, gpu_fingerprint_check, gpu_shim_check, bench_deterministic_gpu
#   lib/      libdetnccl.so (the shim) and any shared library they need that the device lacks (none at present)
#   lib-fallback/ libstdc++.so.6, libgcc_s.so.1 of this machine, used by run.sh only if the device's are older
#   hostnccl/ libnccl.so.2 (hostnccl, with device buffers staged through host memory)
#
#   bench/gpu/prepare.sh [CARRY_DIR] [BUILD_DIR]     defaults: build/gpu-carry, build/gpu-prepare
# Then, on the device: bench/gpu/run.sh --prebuilt build/gpu-carry (docs/gpu-validation.md).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
carry="${1:-${root}/build/gpu-carry}"
build="${2:-${root}/build/gpu-prepare}"
targets=(detnccl detnccl-cli hostnccl gpu_traced_job gpu_fingerprint_check gpu_shim_check bench_deterministic_gpu)

cmake -S "${root}" -B "${build}" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDETNCCL_CUDA=ON -DDETNCCL_BUILD_TESTS=OFF \
  -DDETNCCL_WERROR=ON >/dev/null
cmake --build "${build}" -j 2 --target "${targets[@]}"

rm -rf "${carry}"
mkdir -p "${carry}/bin" "${carry}/lib" "${carry}/hostnccl"
cp "${build}/cli/detnccl" "${build}/bench/gpu_traced_job" "${build}/bench/gpu_fingerprint_check" \
  "${build}/bench/gpu_shim_check" "${build}/bench/bench_deterministic_gpu" "${carry}/bin/"
cp "${build}/lib/libdetnccl.so" "${carry}/lib/"
cp -L "${build}/hostnccl/lib/libnccl.so.2" "${carry}/hostnccl/libnccl.so.2"
strip --strip-unneeded "${carry}"/bin/* "${carry}"/lib/*.so "${carry}/hostnccl/libnccl.so.2"

# Every shared library they load that is not in glibc, libstdc++/libgcc, the CUDA driver or NCCL (found at run time
# on the device) is copied next to the shim; run.sh puts lib/ on LD_LIBRARY_PATH.
system='^(linux-vdso|ld-linux|libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|libcuda|libnccl)\.'
for file in "${carry}"/bin/* "${carry}"/lib/*.so "${carry}/hostnccl/libnccl.so.2"; do
  ldd "${file}" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  [[ "${name}" =~ ${system} ]] && continue
  cp -L "${path}" "${carry}/lib/${name}"
done

# The C++ runtime the binaries were built against, for a device image whose own is older (run.sh uses it only then).
mkdir -p "${carry}/lib-fallback"
for name in libstdc++.so.6 libgcc_s.so.1; do
  path="$(ldd "${carry}/lib/libdetnccl.so" | awk -v n="${name}" '$1 == n {print $3}')"
  [ -n "${path}" ] && cp -L "${path}" "${carry}/lib-fallback/${name}"
done

echo "carry directory ${carry}:"
(cd "${carry}" && find . -type f -printf '%10s  %p\n' | sort -k2)
bytes="$(du -sb "${carry}" | cut -f1)"
echo "total: ${bytes} bytes ($((bytes >> 20)) MiB; the device tool carries at most 64 MiB)"
[ "${bytes}" -lt $((64 << 20)) ] || { echo "too large to carry" >&2; exit 1; }
