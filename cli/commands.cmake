# The `detnccl` command (dump, diff, merge, check, stats, report, run; fingerprint forwards to detnccl-fingerprint) and the analysis
# library it is built on (reading runs, aligning calls, diff and its partial results, check, stats), which tests and benchmarks link too.
add_library(detnccl_analysis STATIC
  analysis/run_logs.cc analysis/call_layout.cc analysis/call_matching.cc analysis/parallel.cc analysis/run_diff.cc analysis/partial_diff.cc analysis/rank_comparison.cc analysis/divergence.cc analysis/run_check.cc analysis/configuration_check.cc
  analysis/run_jobs.cc analysis/run_stats.cc analysis/run_map.cc analysis/magnitude_report.cc analysis/call_members.cc analysis/divergence_magnitude.cc)
target_link_libraries(detnccl_analysis PUBLIC detnccl_records detnccl_steps detnccl_hash detnccl_abi detnccl_numerics Threads::Threads
                                       PRIVATE detnccl_options nlohmann_json::nlohmann_json)

# The commands and the command line's parser are a library (detnccl_commands), which the CLI-argument fuzz target
# (fuzz/cli_args_fuzz.cc) links too. The target is detnccl-cli (the name `detnccl` is the shim's library); the program
# is `detnccl`, built next to detnccl-fingerprint so that `detnccl fingerprint` finds it.
# The page of `detnccl report`, compiled in: report.html becomes a raw string literal at build time.
set(report_template_cc ${CMAKE_CURRENT_BINARY_DIR}/generated/report_template.cc)
add_custom_command(
  OUTPUT ${report_template_cc}
  COMMAND ${CMAKE_COMMAND} -DINPUT=${CMAKE_CURRENT_SOURCE_DIR}/report/report.html -DOUTPUT=${report_template_cc}
          -DHEADER=cli/report/report_template.h -DNAMESPACE=detnccl::cli -DFUNCTION=report_template
          -P ${PROJECT_SOURCE_DIR}/cmake/EmbedText.cmake
  DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/report/report.html ${PROJECT_SOURCE_DIR}/cmake/EmbedText.cmake
  COMMENT "Embedding cli/report/report.html")
add_library(detnccl_commands STATIC command_line.cc terminal.cc dump_command.cc diff_command.cc merge_command.cc
                                    check_command.cc stats_command.cc report_command.cc run_command.cc
                                    replay_command.cc ${report_template_cc})
target_link_libraries(detnccl_commands PUBLIC detnccl_analysis CLI11::CLI11
                                       PRIVATE nlohmann_json::nlohmann_json detnccl_options)
# `detnccl run` finds the shim in PREFIX/<libdir> when installed (and in build/<preset>/lib in the build tree), and
# the PyTorch step hook in PREFIX/<datadir>/detnccl/python/autostep (build/<preset>/share/... in the build tree).
target_compile_definitions(detnccl_commands PRIVATE DETNCCL_INSTALL_LIBDIR="${CMAKE_INSTALL_LIBDIR}"
                                                    DETNCCL_INSTALL_DATADIR="${CMAKE_INSTALL_DATADIR}")
add_executable(detnccl-cli detnccl_main.cc)
set_target_properties(detnccl-cli PROPERTIES OUTPUT_NAME detnccl)
target_link_libraries(detnccl-cli PRIVATE detnccl_commands detnccl_options)
install(TARGETS detnccl-cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
