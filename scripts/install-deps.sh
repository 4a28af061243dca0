#!/usr/bin/env bash
# Installs the Debian packages detnccl needs to build, test and benchmark. Idempotent:
# packages already present are skipped and apt is only consulted when something is missing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libxxhash-dev xxhash
  libzstd-dev  # capture files (DETNCCL_CAPTURE): the header at build time, libzstd1 loaded at run time
  libboost-dev
  libgtest-dev libgmock-dev
  libbenchmark-dev
  libcli11-dev
  nlohmann-json3-dev
  python3
  python3-torch  # Debian's CPU PyTorch: the PyTorch step hook's tests (tests/autostep.cmake, docs/python.md)
  clang libclang-rt-14-dev  # libFuzzer and its runtime (scripts/fuzz.sh, the fuzz preset)
  chromium  # headless, for `detnccl report`'s browser test (tests/report.cmake) and bench/bench_report.sh
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
