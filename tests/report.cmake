# `detnccl report` in a real browser (tests/report_browser_test.sh, headless Chromium): the report of the demo's
# perturbed pair (written by demo_claims_hold), of a 64-rank synthetic pair (written by bench_scale) and of two runs
# with capture files (trace_job under the shim on hostnccl, so the hostnccl lock). Skipped, saying so, when Chromium is
# not installed (scripts/install-deps.sh installs it). The report's data is unit-tested in test_cli_analysis
# (Analysis.ReportMap*, Analysis.ReportNextCommand*) and test_cli (CliReport.*).
if(TARGET train AND TARGET detnccl-cli AND TARGET hostnccl-run AND TARGET trace_job AND DETNCCL_BUILD_BENCH)
  add_test(NAME report_in_a_browser
           COMMAND ${PROJECT_SOURCE_DIR}/tests/report_browser_test.sh $<TARGET_FILE:detnccl-cli>
                   $<TARGET_FILE:bench_scale> ${CMAKE_BINARY_DIR}/demo-report.html ${CMAKE_BINARY_DIR}/report-test
                   $<TARGET_FILE:hostnccl-run> $<TARGET_FILE:detnccl> $<TARGET_FILE:trace_job>)
  set_tests_properties(report_in_a_browser PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 RESOURCE_LOCK hostnccl_shm
                                                      FIXTURES_REQUIRED "demo_report;hostnccl_suite")
endif()
