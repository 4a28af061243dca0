/* detnccl: the one table of DETNCCL_* environment variables.
 *
 * Every variable detnccl reads is one row. The parser (config.cc), the DETNCCL_PRINT_CONFIG output, the unknown-name
 * check with its "did you mean" suggestion, and the table in docs/configuration.md (checked by tests/test_config.cc)
 * are all generated from it, so they cannot drift apart. Adding a variable: add a row here, a field to Config and a
 * case to the parser (the compiler flags a missing case).
 *
 * Row: X(id, name, default_text, accepted_text, description)
 *   id             the enumerator in detnccl::config::EnvVar
 *   name           the variable's name (always DETNCCL_...)
 *   default_text   what applies when the variable is unset or empty, in words
 *   accepted_text  the values the parser accepts, in words (also quoted by error messages)
 *   description    one line: what it does
 *
 * An empty value means the same as an unset variable (launchers often export empty variables).
 */
#ifndef DETNCCL_CONFIG_ENV_VARS_H
#define DETNCCL_CONFIG_ENV_VARS_H

#define DETNCCL_ENV_VARS(X)                                                                                          \
  X(kDir, "DETNCCL_DIR", "unset (tracing off)", "a directory path",                                                  \
    "Where the per-rank logs go (DIR/RUN/rank-NNNNN.dnc); setting it turns tracing on.")                             \
  X(kRun, "DETNCCL_RUN", "TORCHELASTIC_RUN_ID, else SLURM_JOB_ID[.SLURM_STEP_ID], else run-<first communicator id>", \
    "1 to 128 characters from A-Z a-z 0-9 . _ - (not . or ..)",                                                      \
    "Name of this run: the directory under DETNCCL_DIR; two runs never share one.")                                  \
  X(kTrace, "DETNCCL_TRACE", "hash when DETNCCL_DIR is set, else off", "off, meta, hash or segments (any case)",     \
    "What each call record holds: nothing, metadata only, plus buffer fingerprints, plus per-segment digests.")      \
  X(kSegmentBytes, "DETNCCL_SEGMENT_BYTES", "1M",                                                                    \
    "a multiple of 16K from 16K to 1G (decimal with optional K, M or G suffix, powers of 1024)",                     \
    "Segment size for DETNCCL_TRACE=segments: one digest per segment of each buffer.")                               \
  X(kSteps, "DETNCCL_STEPS", "all", "all, or a comma-separated list of steps and ranges: 1,5,40-44,100-",            \
    "Steps whose calls are fingerprinted; calls of other steps are still counted and recorded.")                     \
  X(kRanks, "DETNCCL_RANKS", "all",                                                                                  \
    "all, or a comma-separated list of global ranks (at most 4294967295) and ranges: 0,3,8-15",                      \
    "Global ranks that fingerprint their calls; other ranks still count and record calls.")                          \
  X(kOps, "DETNCCL_OPS", "all",                                                                                      \
    "all, or a comma-separated list of AllReduce, Reduce, Bcast, Broadcast, AllGather, ReduceScatter, AlltoAll, "    \
    "Gather, Scatter, Send, Recv (any case)",                                                                        \
    "Operations that are fingerprinted; other operations are still counted and recorded.")                           \
  X(kMinBytes, "DETNCCL_MIN_BYTES", "0", "a byte count (decimal with optional K, M or G suffix, powers of 1024)",    \
    "Calls moving fewer bytes than this are counted and recorded but not fingerprinted.")                            \
  X(kLogLevel, "DETNCCL_LOG_LEVEL", "warn", "trace, debug, info, warn, error or off (any case)",                     \
    "Verbosity of detnccl's own messages; each line carries host, pid and rank.")                                    \
  X(kLogFile, "DETNCCL_LOG_FILE", "unset (standard error)", "a path to a file in an existing directory",             \
    "File that receives detnccl's own messages instead of standard error.")                                          \
  X(kPrintConfig, "DETNCCL_PRINT_CONFIG", "0", "0 or 1", "1 prints the effective configuration at initialisation.")  \
  X(kDeterministic, "DETNCCL_DETERMINISTIC", "0", "0, 1 or warn (any case)",                                         \
    "1 computes floating-point AllReduce, ReduceScatter and Reduce in a fixed order (docs/deterministic.md) and "    \
    "stops the job at a reduction it cannot make deterministic; warn runs such a call as is and warns once.")        \
  X(kAlgo, "DETNCCL_ALGO", "auto", "auto, mixed_radix or one_shot (any case)",                                       \
    "Deterministic algorithm; auto picks by message size. Every algorithm gives the same bits.")                     \
  X(kAccumulate, "DETNCCL_ACCUMULATE", "native", "native or fp32 (any case)",                                        \
    "How deterministic mode adds fp16, bf16 and fp8: rounded after each step (native), or in fp32 partial sums "     \
    "rounded once (more traffic, fewer roundings).")

#endif /* DETNCCL_CONFIG_ENV_VARS_H */
