#!/usr/bin/env bash
# Builds detnccl with sanitizers and runs the tests they watch. CI runs both, before the release suite.
#   scripts/sanitize.sh asan   ASan + UBSan: the whole CPU-only tree and its whole test suite (preset asan)
#   scripts/sanitize.sh tsan   TSan: the threaded parts only (record writer, hostnccl, the shim with several
#                              communicators on several threads) and their tests (preset tsan)
# The sanitizer options (halt on the first report, leak checks) are in CMakePresets.json's test presets.
set -euo pipefail
cd "$(dirname "$0")/.."

kind="${1:-}"
jobs="$(nproc)"
case "$kind" in
  asan)
    # RATIONALE (CI time, which must stay under 30 minutes on 2 cores): left out under ASan are the slowest tests
    # whose code the rest of the suite already runs under it; the release suite runs them all:
    #   the include-layering script (no compiled code); the soak (its point is flat memory over a long run, which
    #   ASan's allocator changes); the merge commands' end-to-end splits (CliMerge*, many CLI processes each: the
    #   splitting and combining run in test_cli_analysis's in-process split tests, the part parser in fuzz_merge);
    #   the log fixtures (the CLI run 30 times each on small logs); the collectives' bit-exactness at 5 to 8 ranks
    #   (2 to 4 stay); Python jobs with the shim preloaded (Autostep, ShimStepHelper: the step API runs in the C++
    #   jobs); an installed tree's job (RunCommandInstalled: cmake --install); the report in a browser
    #   (report_in_a_browser: Chromium's time, and the page's script, which ASan does not watch; `detnccl report`
    #   itself runs under ASan in demo_claims_hold, and its data in test_cli_analysis's ReportMap tests).
    exclude='^layering$|^CliMerge(Check)?\.|^records_v[0-9_]+_log_fixture_reads_the_same$|^report_in_a_browser$'
    exclude+='|^Ranks/EveryShape\..*/[5-8]ranks( |$)|^Autostep\.|^autostep_python$|^ShimStepHelper\.|^RunCommandInstalled\.'
    PRESET=asan CTEST_EXCLUDE="$exclude" CTEST_EXCLUDE_LABEL=soak exec ./scripts/test.sh
    ;;
  tsan)
    ./scripts/install-deps.sh >/dev/null
    cmake --preset tsan >/dev/null
    # The threaded targets and the tests of their threads; nothing single-threaded is worth TSan's slowdown.
    cmake --build --preset tsan -j "$jobs" --target test_records test_hostnccl_collectives test_hostnccl_p2p \
      test_hostnccl_api test_hostnccl_failures test_hostnccl_nonblocking test_shim_trace test_shim_process test_faults detnccl \
      trace_job trace_threads_job test_faults_job shim_process_job hostnccl-run detnccl-cli
    # Parameterised tests are named "Ranks/Suite.Test/N": match the suite after the start or a slash.
    tests='(^|/)(RecordWriter\.|LogReader\.|Hostnccl|ShimTrace\.|ShimTraceThreads\.|ShimTraceLateCommunicator\.|'
    tests+='ShimDeterministic\.NonBlocking|ShimFork\.|ShimTracerStop\.|FaultThreads\.|'
    tests+='FaultKilledRank\.|FaultDiskFull\.)|^hostnccl_leaves_no_shared_memory$'
    ctest --preset tsan -j "$jobs" --timeout 900 -R "$tests"
    ;;
  *)
    echo "usage: $0 asan|tsan" >&2
    exit 2
    ;;
esac
