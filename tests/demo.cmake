# The README's demo, end to end: scripts/demo.sh asserts each of its claims (exit status 1 if one fails).
if(TARGET train AND TARGET detnccl-cli AND TARGET hostnccl-run)
  # It also writes the report of its perturbed pair, which report_in_a_browser (tests/report.cmake) opens.
  add_test(NAME demo_claims_hold
           COMMAND ${PROJECT_SOURCE_DIR}/scripts/demo.sh --no-build --build-dir ${CMAKE_BINARY_DIR}
                   --report ${CMAKE_BINARY_DIR}/demo-report.html)
  set_tests_properties(demo_claims_hold PROPERTIES TIMEOUT 600 RESOURCE_LOCK hostnccl_shm
                                                   FIXTURES_REQUIRED hostnccl_suite FIXTURES_SETUP demo_report)
endif()
