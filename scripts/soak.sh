#!/usr/bin/env bash
# Runs the soak test for longer than CI does: 8 ranks, mixed calls (every collective, groups, splits) with tracing,
# `detnccl check` at the end, memory sampled. Uses the release preset's build (PRESET=... for another).
#   scripts/soak.sh          100,000 steps (1.3 million calls per rank)
#   scripts/soak.sh 1000000
set -euo pipefail
cd "$(dirname "$0")/.."

steps="${1:-100000}"
preset="${PRESET:-release}"
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)" --target test_soak soak_job detnccl hostnccl-run detnccl-cli
SOAK_STEPS="$steps" "build/$preset/tests/test_soak" --gtest_brief=0
