#!/usr/bin/env bash
# Checks the include layering of docs/architecture.md: each folder includes only the folders its row below allows
# (its own always). Run by ctest (test "layering"); exits 1 naming every include that breaks a rule.
#   scripts/check-layering.sh [REPO_ROOT]
set -euo pipefail
root="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
cd "$root"

# folder -> the folders (or single headers, folder/file.h) its sources may include. Data flows one way: interpose ->
# (config, hash, records, collectives) -> abi; the offline tools (cli) read records and never include the shim.
declare -A allowed=(
  [abi]="cuda/host_device.h"
  [posix]=""
  [cuda]=""
  [hash]="cuda"
  [config]="abi collectives/algorithm_names.h steps/step_boundary.h"
  [records]="abi hash posix"
  [steps]="abi records"
  [collectives]="abi cuda"
  [interpose]="abi collectives config cuda hash posix records steps"
  [hostnccl]="abi collectives posix"
  [numerics]="abi collectives hostnccl/reduce.h"
  [launcher]="abi hostnccl posix"
  [cli]="abi config/env_vars.h hash numerics posix records steps"
  [examples]="abi hash launcher posix"
)

status=0
for folder in "${!allowed[@]}"; do
  [[ -d "$folder" ]] || continue
  while IFS= read -r line; do
    file="${line%%:*}"
    header="$(sed -E 's/.*#[[:space:]]*include "([^"]+)".*/\1/' <<<"$line")"
    included="${header%%/*}"
    [[ "$included" == "$folder" ]] && continue
    [[ -d "$included" ]] || continue  # a header of the build tree or a system path, not a folder of ours
    if [[ " ${allowed[$folder]} " != *" $included "* && " ${allowed[$folder]} " != *" $header "* ]]; then
      echo "layering: $file includes $included/ (a $folder/ source may include: ${allowed[$folder]:-nothing else})"
      status=1
    fi
  done < <(grep -rnE '^[[:space:]]*#[[:space:]]*include "[A-Za-z0-9_]+/' "$folder" \
             --include='*.h' --include='*.cc' --include='*.c' --include='*.cu' --include='*.inc' || true)
done
if ((status == 0)); then echo "layering: every include follows docs/architecture.md"; fi
exit "$status"
