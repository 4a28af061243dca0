#!/usr/bin/env bash
# The README's first command: installs what is missing, builds what the demo needs, and runs it. No GPU needed.
set -euo pipefail
cd "$(dirname "$0")/.."

preset="${PRESET:-release}"
./scripts/install-deps.sh >/dev/null
echo "== building (preset '$preset'; the first build takes a few minutes on 2 cores)"
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)" --target hostnccl-run allreduce_variation >/dev/null

launch="build/$preset/hostnccl/bin/hostnccl-run"
example="build/$preset/examples/allreduce_variation"
calls=30

echo
echo "== 1. Four ranks all-reduce the same fp32 data $calls times, adding contributions in arrival order"
echo "      (the way NCCL's algorithm and channel choices reorder additions on a GPU cluster):"
HOSTNCCL_REDUCE_ORDER=arrival "$launch" -n 4 -- "$example" --calls "$calls" | tee /tmp/detnccl-demo-arrival.$$
echo
echo "== 2. The same job, adding contributions in a fixed (rank) order:"
HOSTNCCL_REDUCE_ORDER=rank "$launch" -n 4 -- "$example" --calls "$calls" --expect-identical

arrival_distinct="$(grep -o '[0-9]* distinct result' /tmp/detnccl-demo-arrival.$$ | cut -d' ' -f1)"
rm -f /tmp/detnccl-demo-arrival.$$
echo
echo "== Summary: identical inputs gave ${arrival_distinct:-?} different fp32 results in arrival order and exactly one"
echo "   in a fixed order. detnccl's deterministic mode gives every NCCL reduction such a fixed order; its tracer"
echo "   and 'detnccl diff' find the first call where two runs part ways (both are being built: see README)."
