/* detnccl: the one table of DETNCCL_* environment variables.
 *
 * Every variable detnccl reads is one row. Generated from it: the EnvVar enum, the parser and printer of each value
 * (config.cc: parse_value, formatted_value), the "setting without effect" rule (config.cc: find_ineffective), the
 * DETNCCL_PRINT_CONFIG output, the unknown-name check with its "did you mean" suggestion, the list of diagnostic
 * settings that `detnccl diff` and `check` show as notes (cli/analysis/run_logs.cc: is_diagnostic_setting), and the
 * table in docs/configuration.md (checked by tests/test_config.cc), so they cannot drift apart.
 *
 * Adding a variable: add a row here and its field to Config (config.h). The compiler flags a row whose field or kind
 * does not exist and a Config field without a row (config.cc's field count check); the tests flag the documentation
 * (ConfigDocs.ConfigurationMdEmbedsTheGeneratedTable prints the table to paste into docs/configuration.md) and ask
 * for sample values of the new variable in tests/test_config.cc. A new kind of value is
 * one struct in config.cc's `kinds` namespace (parse and format), or for a choice of names one name table there.
 *
 * Row: X(id, name, kind, field, refines, shown, default_text, accepted_text, description)
 *   id             the enumerator in detnccl::config::EnvVar
 *   name           the variable's name (always DETNCCL_...)
 *   kind           how the value is parsed and printed: a type in config.cc's namespace `kinds` (path, run_name,
 *                  byte_count, segment_size, step_list, rank_list, op_list, step_boundary, boolean, or a choice of
 *                  names: trace_level, log_level, deterministic_mode, algorithm, accumulation, step_inference)
 *   field          the member of Config that holds the value
 *   refines        the feature without which a value other than the default has no effect (config::Refines):
 *                  kNothing, kTracing (any DETNCCL_TRACE level), kFingerprints (DETNCCL_TRACE=hash or segments),
 *                  kSegments (DETNCCL_TRACE=segments), kCapture (DETNCCL_CAPTURE=1) or kDeterministic
 *                  (DETNCCL_DETERMINISTIC=1 or warn)
 *   shown          how `detnccl diff` and `check` treat a difference between runs or ranks: diagnostic (it cannot
 *                  change a call's metadata or data, only what is printed or fingerprinted: a note) or result (it
 *                  may change results: a divergence or finding)
 *   default_text   what applies when the variable is unset or empty, in words
 *   accepted_text  the values the parser accepts, in words (also quoted by error messages): a string literal, or a
 *                  std::string_view generated at compile time from the table the names come from: kOpListText (the
 *                  traced operations) or kinds::<kind>::kAccepted (a choice of names, e.g. the algorithms of
 *                  collectives/algorithm_names.h)
 *   description    one line: what it does
 *
 * Only config.cc expands kind, field, refines and accepted_text; other readers of the table (the CLI) use name and
 * shown alone, and need no more than this header.
 *
 * An empty value means the same as an unset variable (launchers often export empty variables).
 */
#ifndef DETNCCL_CONFIG_ENV_VARS_H
#define DETNCCL_CONFIG_ENV_VARS_H

#define DETNCCL_ENV_VARS(X)                                                                                          \
  X(kDir, "DETNCCL_DIR", path, dir, kNothing, result, "unset (tracing off)", "a directory path",                     \
    "Where the per-rank logs go (DIR/RUN/rank-NNNNN.dnc); setting it turns tracing on.")                             \
  X(kRun, "DETNCCL_RUN", run_name, run, kTracing, result,                                                            \
    "TORCHELASTIC_RUN_ID, else SLURM_JOB_ID[.SLURM_STEP_ID], else run-<first communicator id>",                      \
    "1 to 128 characters from A-Z a-z 0-9 . _ - (not . or ..)",                                                      \
    "Name of this run: the directory under DETNCCL_DIR; two runs never share one.")                                  \
  X(kTrace, "DETNCCL_TRACE", trace_level, trace, kNothing, diagnostic, "hash when DETNCCL_DIR is set, else off",     \
    kinds::trace_level::kAccepted,                                                                                   \
    "What the log holds: nothing; call metadata; only a digest per communicator and step (fingerprints included: "   \
    "the broad trace); call records with buffer fingerprints; plus per-segment digests.")      \
  X(kSegmentBytes, "DETNCCL_SEGMENT_BYTES", segment_size, segment_bytes, kSegments, diagnostic, "1M",                \
    "a multiple of 16K from 16K to 1G (decimal with optional K, M or G suffix, powers of 1024)",                     \
    "Segment size for DETNCCL_TRACE=segments: one digest per segment of each buffer.")                               \
  X(kSteps, "DETNCCL_STEPS", step_list, steps, kFingerprints, diagnostic, "all",                                     \
    "all, or a comma-separated list of steps and ranges: 1,5,40-44,100-",                                            \
    "Steps whose calls are fingerprinted; calls of other steps are still counted and recorded.")                     \
  X(kRanks, "DETNCCL_RANKS", rank_list, ranks, kFingerprints, diagnostic, "all",                                     \
    "all, or a comma-separated list of global ranks (at most 4294967295) and ranges: 0,3,8-15",                      \
    "Global ranks that fingerprint their calls; other ranks still count and record calls.")                          \
  X(kOps, "DETNCCL_OPS", op_list, ops, kFingerprints, diagnostic, "all", kOpListText,                                \
    "Operations that are fingerprinted; other operations are still counted and recorded.")                           \
  X(kMinBytes, "DETNCCL_MIN_BYTES", byte_count, min_bytes, kFingerprints, diagnostic, "0",                           \
    "a byte count (decimal with optional K, M or G suffix, powers of 1024)",                                         \
    "Calls moving fewer bytes than this are counted and recorded but not fingerprinted.")                            \
  X(kCapture, "DETNCCL_CAPTURE", boolean, capture, kFingerprints, diagnostic, "0", "0 or 1",                         \
    "1 saves the whole input and output buffers of every fingerprinted call (the windows above choose them) in "      \
    "DIR/RUN/rank-NNNNN.cap, each content stored once; needs call records (DETNCCL_TRACE=hash or segments).")        \
  X(kCaptureBytes, "DETNCCL_CAPTURE_BYTES", byte_count, capture_bytes, kCapture, diagnostic, "1G",                   \
    "a byte count (decimal with optional K, M or G suffix, powers of 1024)",                                         \
    "Most bytes a rank's capture file may hold; past them capture stops with one warning and later calls are "       \
    "recorded as not captured.")                                                                                     \
  X(kStepInference, "DETNCCL_STEP_INFERENCE", step_inference, step_inference, kTracing, diagnostic, "auto",          \
    kinds::step_inference::kAccepted,                                                                                \
    "How steps are numbered when the job marks none: auto (optimizer steps in PyTorch jobs, else the call "          \
    "pattern), calls (the call pattern only), off (every call at step 0).")                                          \
  X(kStepBoundary, "DETNCCL_STEP_BOUNDARY", step_boundary, step_boundary, kTracing, diagnostic,                      \
    "unset (steps from the optimizer or the call pattern)", steps::kStepBoundaryAccepted,                            \
    "The call that starts (or with at=end ends) each iteration, for jobs whose call pattern is irregular.")          \
  X(kLogLevel, "DETNCCL_LOG_LEVEL", log_level, log_level, kNothing, diagnostic, "warn", kinds::log_level::kAccepted, \
    "Verbosity of detnccl's own messages; each line carries host, pid and rank.")                                    \
  X(kLogFile, "DETNCCL_LOG_FILE", path, log_file, kNothing, diagnostic, "unset (standard error)",                    \
    "a path to a file in an existing directory",                                                                     \
    "File that receives detnccl's own messages instead of standard error.")                                          \
  X(kPrintConfig, "DETNCCL_PRINT_CONFIG", boolean, print_config, kNothing, diagnostic, "0", "0 or 1",                \
    "1 prints the effective configuration at initialisation.")                                                       \
  X(kDeterministic, "DETNCCL_DETERMINISTIC", deterministic_mode, deterministic, kNothing, result, "0",               \
    kinds::deterministic_mode::kAccepted,                                                                            \
    "1 computes floating-point AllReduce, ReduceScatter and Reduce in a fixed order (docs/deterministic.md) and "    \
    "stops the job at a reduction it cannot make deterministic; warn runs such a call as is and warns once.")        \
  X(kAlgo, "DETNCCL_ALGO", algorithm, algo, kDeterministic, result, "auto", kinds::algorithm::kAccepted,             \
    "Deterministic algorithm; auto picks by message size. Every algorithm gives the same bits.")                     \
  X(kAccumulate, "DETNCCL_ACCUMULATE", accumulation, accumulate, kDeterministic, result, "native",                   \
    kinds::accumulation::kAccepted,                                                                                  \
    "How deterministic mode adds fp16, bf16 and fp8: rounded after each step (native), or in fp32 partial sums "     \
    "rounded once (more traffic, fewer roundings).")

/* DETNCCL_ENV_SHOWN_<shown>(...) expands to its arguments for the diagnostic rows and to nothing for the others, so
 * that a generator can select the diagnostic rows (a misspelt `shown` does not compile). */
#define DETNCCL_ENV_SHOWN_diagnostic(...) __VA_ARGS__
#define DETNCCL_ENV_SHOWN_result(...)

#endif /* DETNCCL_CONFIG_ENV_VARS_H */
