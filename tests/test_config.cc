// Tests of config/: parsing every DETNCCL_* variable, its errors, printing, and the rest of the environment.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "config/value_kinds.h"

namespace detnccl::config {
namespace {

// Parses a list of "NAME=value" entries.
ParsedConfig parse(std::initializer_list<std::string_view> entries) {
  const std::vector<std::string_view> list(entries);
  return parse_config(list);
}

// Parses entries with tracing on at its fullest (DETNCCL_DIR set, DETNCCL_TRACE=segments), so that every tracing
// setting has an effect.
ParsedConfig parse_traced(std::initializer_list<std::string_view> entries) {
  std::vector<std::string_view> list = {"DETNCCL_DIR=/d", "DETNCCL_TRACE=segments"};
  list.insert(list.end(), entries.begin(), entries.end());
  return parse_config(list);
}

// The one error of a parse that must fail on one variable.
ConfigError single_error(const ParsedConfig& parsed) {
  EXPECT_EQ(parsed.errors().size(), 1u) << parsed.error_text();
  return parsed.errors().empty() ? ConfigError{} : parsed.errors().front();
}

bool has_raw_non_ascii(std::string_view text) {
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80 || static_cast<unsigned char>(c) < 0x20) return true;
  }
  return false;
}

TEST(ConfigTable, NamesAreUniqueAndPrefixed) {
  std::set<std::string_view> names;
  for (const EnvVarInfo& info : env_vars()) {
    EXPECT_TRUE(info.name.starts_with("DETNCCL_")) << info.name;
    EXPECT_TRUE(names.insert(info.name).second) << info.name;
    EXPECT_FALSE(info.accepted_text.empty());
    EXPECT_FALSE(info.description.empty());
    EXPECT_EQ(&env_var_info(info.id), &info);
  }
  for (std::string_view required :
       {"DETNCCL_DIR", "DETNCCL_RUN", "DETNCCL_TRACE", "DETNCCL_SEGMENT_BYTES", "DETNCCL_STEPS", "DETNCCL_RANKS",
        "DETNCCL_OPS", "DETNCCL_MIN_BYTES", "DETNCCL_LOG_LEVEL", "DETNCCL_LOG_FILE", "DETNCCL_PRINT_CONFIG",
        "DETNCCL_DETERMINISTIC", "DETNCCL_ALGO"}) {
    EXPECT_TRUE(names.contains(required)) << required;
  }
}

TEST(ConfigTable, TracedOpsAreTheCollectivesAndPointToPointCalls) {
  // Written out here, independently of the API table the library generates them from.
  const std::set<std::string_view> expected = {"AllReduce", "Reduce",        "Bcast",    "Broadcast",
                                               "AllGather", "ReduceScatter", "AlltoAll", "Gather",
                                               "Scatter",   "Send",          "Recv"};
  ASSERT_EQ(kTracedOpCount, expected.size());
  std::set<std::string_view> names;
  for (std::size_t i = 0; i < kTracedOpCount; ++i) names.insert(traced_op_name(static_cast<TracedOp>(i)));
  EXPECT_EQ(names, expected);
  EXPECT_EQ(traced_op_name(TracedOp::ncclAllReduce), "AllReduce");
  EXPECT_EQ(traced_op_from_name("allreduce"), TracedOp::ncclAllReduce);
  EXPECT_EQ(traced_op_from_name("SEND"), TracedOp::ncclSend);
  EXPECT_EQ(traced_op_from_name("ncclSend"), std::nullopt);
  EXPECT_EQ(traced_op_from_name("GroupStart"), std::nullopt);
}

TEST(EditDistance, TheBandedDistanceIsLevenshteinUpToItsLimit) {
  // The parser's edit distance computes only the band within `limit` of the diagonal; against a full Levenshtein
  // table (case-insensitive, as the parser compares names) on random pairs of short names over a small alphabet,
  // where distances around every limit are common, it must give the distance when it is at most limit, else limit + 1.
  const auto levenshtein = [](std::string_view a, std::string_view b) {
    std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
    for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
    for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
      for (std::size_t j = 1; j <= b.size(); ++j) {
        const bool same =
            std::toupper(static_cast<unsigned char>(a[i - 1])) == std::toupper(static_cast<unsigned char>(b[j - 1]));
        d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (same ? 0 : 1)});
      }
    }
    return d[a.size()][b.size()];
  };
  std::mt19937 random(20);
  // The small alphabet makes near names common; the larger one, names with bytes the other lacks (the early exit)
  // and common prefixes and suffixes ("DETN..." both).
  for (const std::string_view alphabet : {std::string_view("abAB_"), std::string_view("abcdefgAB_1")}) {
    const auto random_name = [&] {
      std::string name(random() % 14, ' ');
      for (char& c : name) c = alphabet[random() % alphabet.size()];
      if (random() % 3 == 0) name = "DETN" + name;
      if (random() % 3 == 0) name += "_X";
      return name;
    };
    for (int i = 0; i < 20000; ++i) {
      const std::string a = random_name();
      const std::string b = random_name();
      const std::size_t limit = random() % 6;
      const std::size_t exact = levenshtein(a, b);
      ASSERT_EQ(detnccl::config::parsing::edit_distance(a, b, limit), std::min(exact, limit + 1))
          << a << " / " << b << " limit " << limit;
    }
  }
  // Names longer than the stack row (128) take the allocated one.
  const std::string long_a(200, 'x');
  std::string long_b = long_a;
  long_b[100] = 'y';
  EXPECT_EQ(detnccl::config::parsing::edit_distance(long_a, long_b, 3), 1u);
}

TEST(ParseConfig, EmptyEnvironmentGivesDefaultsAndNoTracing) {
  const ParsedConfig parsed = parse({"PATH=/usr/bin", "HOME=/root", "NCCL_DEBUG=INFO", "no-equals-sign"});
  ASSERT_TRUE(parsed.ok()) << parsed.error_text();
  EXPECT_EQ(parsed.config(), Config{});
  EXPECT_FALSE(parsed.config().tracing());
  EXPECT_EQ(parsed.config().segment_bytes, 1024u * 1024u);
  EXPECT_EQ(parsed.config().log_level, LogLevel::kWarn);
}

TEST(ParseConfig, DirTurnsTracingOnAtHashLevel) {
  const ParsedConfig parsed = parse({"DETNCCL_DIR=/tmp/traces"});
  ASSERT_TRUE(parsed.ok()) << parsed.error_text();
  EXPECT_EQ(parsed.config().dir, "/tmp/traces");
  EXPECT_EQ(parsed.config().trace, TraceLevel::kHash);
}

TEST(ParseConfig, TraceLevels) {
  const std::pair<std::string_view, TraceLevel> cases[] = {{"off", TraceLevel::kOff},
                                                           {"meta", TraceLevel::kMeta},
                                                           {"Steps", TraceLevel::kSteps},
                                                           {"HASH", TraceLevel::kHash},
                                                           {"Segments", TraceLevel::kSegments}};
  for (const auto& [text, level] : cases) {
    const std::string entry = "DETNCCL_TRACE=" + std::string(text);
    const ParsedConfig parsed = parse({"DETNCCL_DIR=/d", entry});
    ASSERT_TRUE(parsed.ok()) << parsed.error_text();
    EXPECT_EQ(parsed.config().trace, level) << text;
  }
  const ConfigError bad = single_error(parse({"DETNCCL_DIR=/d", "DETNCCL_TRACE=hsah"}));
  EXPECT_EQ(bad.variable, "DETNCCL_TRACE");
  EXPECT_NE(bad.message.find("DETNCCL_TRACE=\"hsah\""), std::string::npos) << bad.message;
  EXPECT_NE(bad.message.find("off, meta, steps, hash or segments"), std::string::npos) << bad.message;
}

TEST(ParseConfig, TracingWithoutDirIsAnError) {
  const ConfigError error = single_error(parse({"DETNCCL_TRACE=meta"}));
  EXPECT_EQ(error.variable, "DETNCCL_TRACE");
  EXPECT_NE(error.message.find("DETNCCL_DIR"), std::string::npos) << error.message;
  // Explicitly off without a directory is fine.
  EXPECT_TRUE(parse({"DETNCCL_TRACE=off"}).ok());
  // A directory with tracing explicitly off: nothing is traced.
  const ParsedConfig off = parse({"DETNCCL_DIR=/d", "DETNCCL_TRACE=off"});
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off.config().tracing());
}

TEST(ParseConfig, PathsStartingOrEndingWithWhiteSpaceAreRefused) {
  for (const char* entry : {"DETNCCL_DIR= ", "DETNCCL_DIR= /tmp/x", "DETNCCL_DIR=/tmp/x ", "DETNCCL_DIR=\t",
                            "DETNCCL_LOG_FILE=/tmp/log\n"}) {
    const ParsedConfig parsed = parse({entry});
    ASSERT_FALSE(parsed.ok()) << entry;
    const ConfigError error = single_error(parsed);
    EXPECT_NE(error.message.find("white space"), std::string::npos) << error.message;
  }
  const ParsedConfig inside = parse({"DETNCCL_DIR=/tmp/my traces"});  // white space inside a path is fine
  ASSERT_TRUE(inside.ok()) << inside.error_text();
  EXPECT_EQ(inside.config().dir, "/tmp/my traces");
}

TEST(ParseConfig, EmptyValuesMeanUnset) {
  const ParsedConfig parsed = parse({"DETNCCL_DIR=", "DETNCCL_TRACE=", "DETNCCL_STEPS=", "DETNCCL_OPS=",
                                     "DETNCCL_SEGMENT_BYTES=", "DETNCCL_RUN=", "DETNCCL_DETERMINISTIC="});
  ASSERT_TRUE(parsed.ok()) << parsed.error_text();
  EXPECT_EQ(parsed.config(), Config{});
}

TEST(ParseConfig, UnknownNameSuggestsTheClosestKnownOne) {
  const std::pair<std::string_view, std::string_view> typos[] = {
      {"DETNCCL_TRCE=hash", "DETNCCL_TRACE"},
      {"DETNCCL_STEP=1", "DETNCCL_STEPS"},
      {"DETNCCL_RANK=1", "DETNCCL_RANKS"},
      {"detnccl_dir=/x", "DETNCCL_DIR"},
      {"DETNCCL_SEGMENT=16K", "DETNCCL_SEGMENT_BYTES"},
      {"DETNCCL_DETERMINISM=1", "DETNCCL_DETERMINISTIC"},
      {"DETNCCL_LOGLEVEL=info", "DETNCCL_LOG_LEVEL"},
  };
  for (const auto& [entry, suggestion] : typos) {
    const ConfigError error = single_error(parse({entry}));
    EXPECT_EQ(error.variable, entry.substr(0, entry.find('=')));
    EXPECT_NE(error.message.find("is not a detnccl variable"), std::string::npos) << error.message;
    EXPECT_NE(error.message.find("did you mean " + std::string(suggestion) + "?"), std::string::npos)
        << entry << ": " << error.message;
  }
  const ConfigError unrelated = single_error(parse({"DETNCCL_COMPLETELY_DIFFERENT=1"}));
  EXPECT_EQ(unrelated.message.find("did you mean"), std::string::npos) << unrelated.message;
  EXPECT_NE(unrelated.message.find("docs/configuration.md"), std::string::npos) << unrelated.message;
  // Not ours: other prefixes are ignored (near misses of ours are not: NearMissesOfThePrefixAreRefused).
  EXPECT_TRUE(parse({"DETNCCLX=1", "NCCL_TRACE=1", "NCCL_DIR=1"}).ok());
}

TEST(ParseConfig, UnknownNameListsTheKnownOnes) {
  // The message cannot send the user to DETNCCL_PRINT_CONFIG=1: that runs only once the error is gone.
  const ConfigError error = single_error(parse({"DETNCCL_COMPLETELY_DIFFERENT=1"}));
  EXPECT_EQ(error.message.find("PRINT_CONFIG=1"), std::string::npos) << error.message;
  for (const EnvVarInfo& info : env_vars()) {
    EXPECT_NE(error.message.find(info.name), std::string::npos) << info.name << " missing from: " << error.message;
  }
}

TEST(ParseConfig, NearMissesOfThePrefixAreRefused) {
  const std::pair<std::string_view, std::string_view> typos[] = {
      {"DETNCL_DETERMINISTIC=1", "DETNCCL_DETERMINISTIC"},
      {"DTNCCL_DIR=/x", "DETNCCL_DIR"},
      {"DETNCCLDIR=/x", "DETNCCL_DIR"},
      {"DET_NCCL_DIR=/x", "DETNCCL_DIR"},
      {"DETNCCL-RUN=x", "DETNCCL_RUN"},
      {"detncl_trace=hash", "DETNCCL_TRACE"},
      {"ETNCCL_STEPS=1", "DETNCCL_STEPS"},
      {"DETNNCL_OPS=Send", "DETNCCL_OPS"},
      {"DENCCL_ALGO=one_shot", "DETNCCL_ALGO"},
      {"DETNCL_SEGMENT_BYTE=64K", "DETNCCL_SEGMENT_BYTES"},  // one slip in the prefix, one in the name
  };
  for (const auto& [entry, suggestion] : typos) {
    const ParsedConfig parsed = parse({"DETNCCL_DIR=/d", entry});
    ASSERT_FALSE(parsed.ok()) << entry;
    const ConfigError error = single_error(parsed);
    EXPECT_EQ(error.variable, entry.substr(0, entry.find('='))) << entry;
    EXPECT_NE(error.message.find("did you mean " + std::string(suggestion) + "?"), std::string::npos)
        << entry << ": " << error.message;
  }
  // Reported together with every other error.
  EXPECT_EQ(parse({"DTNCCL_DIR=/x", "DETNCCL_TRACE=loud"}).errors().size(), 2u);
}

TEST(ParseConfig, ARealisticEnvironmentHoldsNoNearMiss) {
  // Variables of NCCL, CUDA, PyTorch, Slurm, Open MPI, PMI/PMIx, Horovod, UCX, containers, hostnccl and the shell, as
  // a training job's environment holds them: none may be taken for a mistyped DETNCCL_ name.
  std::vector<std::string_view> environment;
  std::string_view entries =
      "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL NCCL_DEBUG_FILE=/tmp/nccl.%h.%p NCCL_ALGO=Ring "
      "NCCL_PROTO=Simple NCCL_IB_HCA=mlx5 NCCL_IB_GID_INDEX=3 NCCL_SOCKET_IFNAME=eth0 NCCL_P2P_LEVEL=NVL "
      "NCCL_P2P_DISABLE=0 NCCL_SHM_DISABLE=0 NCCL_NET_GDR_LEVEL=PHB NCCL_NET_GDR_READ=1 NCCL_MIN_NCHANNELS=4 "
      "NCCL_MAX_NCHANNELS=32 NCCL_MIN_CTAS=1 NCCL_MAX_CTAS=32 NCCL_BUFFSIZE=4194304 NCCL_NTHREADS=512 "
      "NCCL_CUMEM_ENABLE=1 NCCL_NVLS_ENABLE=0 NCCL_COLLNET_ENABLE=0 NCCL_LAUNCH_MODE=GROUP NCCL_CROSS_NIC=0 "
      "NCCL_TOPO_FILE=/etc/nccl/topo.xml NCCL_TOPO_DUMP_FILE=/tmp/topo.xml NCCL_GRAPH_DUMP_FILE=/tmp/graph.xml "
      "NCCL_NET_PLUGIN=aws-ofi NCCL_TUNER_PLUGIN=none NCCL_PROFILER_PLUGIN=none NCCL_RUNTIME_CONNECT=1 "
      "NCCL_WORK_FIFO_DEPTH=65536 NCCL_CHECK_POINTERS=0 NCCL_COMM_ID=10.0.0.1:23456 NCCL_HOSTID=node7 "
      "NCCL_RAS_ENABLE=0 NCCL_PXN_DISABLE=0 NCCL_ASYNC_ERROR_HANDLING=1 NCCL_BLOCKING_WAIT=0 "
      "NCCL_VERSION=2.28.3 NV_LIBNCCL_VERSION=2.28.3-1 CUDA_VISIBLE_DEVICES=0,1,2,3 CUDA_LAUNCH_BLOCKING=0 "
      "CUDA_DEVICE_MAX_CONNECTIONS=1 CUDA_MODULE_LOADING=LAZY CUDA_HOME=/usr/local/cuda CUDA_VERSION=12.6 "
      "CUBLAS_WORKSPACE_CONFIG=:4096:8 CUDNN_LOGINFO_DBG=0 NVIDIA_VISIBLE_DEVICES=all "
      "NVIDIA_DRIVER_CAPABILITIES=compute,utility NVSHMEM_BOOTSTRAP=MPI TORCH_DISTRIBUTED_DEBUG=DETAIL "
      "TORCH_NCCL_ASYNC_ERROR_HANDLING=1 TORCH_NCCL_BLOCKING_WAIT=0 TORCH_NCCL_ENABLE_MONITORING=1 "
      "TORCH_NCCL_DUMP_ON_TIMEOUT=1 TORCH_NCCL_TRACE_BUFFER_SIZE=2000 "
      "TORCH_NCCL_DEBUG_INFO_TEMP_FILE=/tmp/nccl_trace_rank_ TORCH_NCCL_HIGH_PRIORITY=0 "
      "TORCH_NCCL_AVOID_RECORD_STREAMS=1 TORCH_CPP_LOG_LEVEL=INFO TORCH_LOGS=+dynamo "
      "TORCH_SHOW_CPP_STACKTRACES=1 TORCH_COMPILE_DEBUG=0 TORCHINDUCTOR_CACHE_DIR=/tmp/inductor "
      "TORCHELASTIC_RUN_ID=none TORCHELASTIC_RESTART_COUNT=0 TORCHELASTIC_MAX_RESTARTS=0 "
      "TORCHELASTIC_USE_AGENT_STORE=True TORCHELASTIC_ERROR_FILE=/tmp/err.json TRITON_CACHE_DIR=/tmp/triton "
      "LOCAL_RANK=0 RANK=0 GROUP_RANK=0 ROLE_RANK=0 LOCAL_WORLD_SIZE=4 WORLD_SIZE=4 MASTER_ADDR=10.0.0.1 "
      "MASTER_PORT=29500 OMP_NUM_THREADS=8 SLURM_JOB_ID=123456 SLURM_STEP_ID=0 SLURM_PROCID=0 SLURM_NTASKS=4 "
      "SLURM_LOCALID=0 SLURM_NODEID=0 SLURM_JOB_NODELIST=node[1-2] SLURM_CPUS_PER_TASK=8 "
      "SLURM_SUBMIT_DIR=/home/u SLURM_JOB_NAME=train SLURM_STEP_NUM_TASKS=4 SLURM_TASK_PID=4242 "
      "SLURMD_NODENAME=node1 SLURM_CLUSTER_NAME=c OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=4 "
      "OMPI_COMM_WORLD_LOCAL_RANK=0 OMPI_MCA_btl=^openib OMPI_MCA_pml=ucx PMI_RANK=0 PMI_SIZE=4 PMI_FD=5 "
      "PMIX_RANK=0 PMIX_NAMESPACE=slurm.pmix.1.0 MPI_LOCALRANKID=0 HOROVOD_RANK=0 HOROVOD_SIZE=4 "
      "UCX_TLS=rc,cuda_copy UCX_NET_DEVICES=mlx5_0:1 HOSTNCCL_REDUCE_ORDER=rank HOSTNCCL_TIMEOUT_S=60 "
      "HOSTNCCL_SLOT_BYTES=65536 HOSTNCCL_RING_BYTES=1048576 HOSTNCCL_ID_FILE=/tmp/id HOSTNCCL_JOB_TAG=t "
      "LD_PRELOAD=/opt/libdetnccl.so LD_LIBRARY_PATH=/usr/lib PATH=/usr/bin HOME=/root USER=root PWD=/work "
      "TMPDIR=/tmp XDG_RUNTIME_DIR=/run/user/0 PYTHONPATH=/work PYTHONUNBUFFERED=1 HF_HOME=/data/hf "
      "WANDB_DIR=/tmp/wandb WANDB_RUN_ID=abc MLFLOW_RUN_ID=abc KUBERNETES_SERVICE_HOST=10.0.0.1 HOSTNAME=node1 "
      "SHLVL=1 TERM=xterm";
  while (!entries.empty()) {
    const std::size_t space = entries.find(' ');
    environment.push_back(entries.substr(0, space));
    entries.remove_prefix(space == std::string_view::npos ? entries.size() : space + 1);
  }
  ASSERT_GT(environment.size(), 120u);
  const ParsedConfig parsed = parse_config(environment);
  EXPECT_TRUE(parsed.ok()) << parsed.error_text();
  EXPECT_EQ(parsed.config(), Config{});
}

TEST(ParseConfig, SettingsWithNoEffectStopTheJobWhenTheirFeatureWasNeverTurnedOn) {
  // Without DETNCCL_DIR nothing is traced: a window or a run name asked for a trace that will not exist.
  for (std::string_view entry : {"DETNCCL_STEPS=3", "DETNCCL_RANKS=1", "DETNCCL_OPS=Send", "DETNCCL_MIN_BYTES=1K",
                                 "DETNCCL_SEGMENT_BYTES=64K", "DETNCCL_RUN=foo"}) {
    const ConfigError error = single_error(parse({entry}));
    EXPECT_EQ(error.variable, entry.substr(0, entry.find('='))) << entry;
    EXPECT_NE(error.message.find("has no effect: tracing is off (DETNCCL_DIR is not set)"), std::string::npos)
        << error.message;
    EXPECT_NE(error.message.find("set DETNCCL_DIR"), std::string::npos) << error.message;
  }
  // Without DETNCCL_DETERMINISTIC nothing is reduced by detnccl: the run would not be deterministic.
  for (std::string_view entry : {"DETNCCL_ALGO=one_shot", "DETNCCL_ACCUMULATE=fp32"}) {
    const ConfigError error = single_error(parse({entry}));
    EXPECT_EQ(error.variable, entry.substr(0, entry.find('='))) << entry;
    EXPECT_NE(error.message.find("has no effect: deterministic mode is off"), std::string::npos) << error.message;
    EXPECT_NE(error.message.find("set DETNCCL_DETERMINISTIC=1"), std::string::npos) << error.message;
  }
  // Tracing at its default level (hash) records no segment digests.
  const ConfigError segments = single_error(parse({"DETNCCL_DIR=/d", "DETNCCL_SEGMENT_BYTES=64K"}));
  EXPECT_EQ(segments.variable, "DETNCCL_SEGMENT_BYTES");
  EXPECT_NE(segments.message.find("DETNCCL_TRACE=segments"), std::string::npos) << segments.message;
  // Every one is reported.
  EXPECT_EQ(parse({"DETNCCL_STEPS=3", "DETNCCL_RUN=foo", "DETNCCL_ALGO=one_shot"}).errors().size(), 3u);
  // Default values spelled out have no effect to miss; nor does a setting of a feature that is on.
  EXPECT_TRUE(parse({"DETNCCL_STEPS=all", "DETNCCL_RANKS=ALL", "DETNCCL_OPS=all", "DETNCCL_MIN_BYTES=0",
                     "DETNCCL_SEGMENT_BYTES=1M", "DETNCCL_ALGO=auto", "DETNCCL_ACCUMULATE=native"})
                  .ok());
  const ParsedConfig effective = parse({"DETNCCL_DIR=/d", "DETNCCL_STEPS=3", "DETNCCL_RUN=foo", "DETNCCL_MIN_BYTES=1K",
                                        "DETNCCL_DETERMINISTIC=1", "DETNCCL_ALGO=one_shot", "DETNCCL_ACCUMULATE=fp32"});
  ASSERT_TRUE(effective.ok()) << effective.error_text();
  EXPECT_TRUE(ineffective_settings(effective.config()).empty());
  // Long values are shortened in the message.
  std::string steps = "DETNCCL_STEPS=0";
  for (int i = 2; i < 20000; i += 2) steps.append(",").append(std::to_string(i));
  EXPECT_LT(single_error(parse({steps})).message.size(), 400u);
}

TEST(ParseConfig, SettingsWithNoEffectAfterAnExplicitOffAreAcceptedAndWarnedAbout) {
  // Turning a feature off explicitly (to compare with a run that had it) may leave its settings in place.
  const auto warned_variables = [](std::initializer_list<std::string_view> entries) {
    const ParsedConfig parsed = parse(entries);
    EXPECT_TRUE(parsed.ok()) << parsed.error_text();
    std::vector<std::string> variables;
    for (const ConfigError& warning : ineffective_settings(parsed.config())) {
      EXPECT_NE(warning.message.find(warning.variable + "="), std::string::npos) << warning.message;
      EXPECT_NE(warning.message.find(" has no effect: "), std::string::npos) << warning.message;
      EXPECT_EQ(warning.message.find('\n'), std::string::npos) << "one line: " << warning.message;
      variables.push_back(warning.variable);
    }
    return variables;
  };
  using Names = std::vector<std::string>;
  EXPECT_EQ(warned_variables({"DETNCCL_TRACE=off", "DETNCCL_STEPS=3", "DETNCCL_RUN=foo"}),
            (Names{"DETNCCL_RUN", "DETNCCL_STEPS"}));
  EXPECT_EQ(warned_variables({"DETNCCL_DIR=/d", "DETNCCL_TRACE=off", "DETNCCL_SEGMENT_BYTES=64K"}),
            (Names{"DETNCCL_SEGMENT_BYTES"}));
  EXPECT_EQ(warned_variables({"DETNCCL_DIR=/d", "DETNCCL_TRACE=meta", "DETNCCL_OPS=Send", "DETNCCL_RUN=r"}),
            (Names{"DETNCCL_OPS"}));
  EXPECT_EQ(warned_variables({"DETNCCL_DIR=/d", "DETNCCL_TRACE=hash", "DETNCCL_SEGMENT_BYTES=64K"}),
            (Names{"DETNCCL_SEGMENT_BYTES"}));
  EXPECT_EQ(warned_variables({"DETNCCL_DETERMINISTIC=0", "DETNCCL_ALGO=one_shot", "DETNCCL_ACCUMULATE=FP32"}),
            (Names{"DETNCCL_ALGO", "DETNCCL_ACCUMULATE"}));
  EXPECT_EQ(
      warned_variables({"DETNCCL_DIR=/d", "DETNCCL_STEPS=3", "DETNCCL_DETERMINISTIC=warn", "DETNCCL_ALGO=mixed_radix"}),
      Names{});
  const ParsedConfig off = parse({"DETNCCL_DETERMINISTIC=0", "DETNCCL_ALGO=one_shot"});
  ASSERT_EQ(ineffective_settings(off.config()).size(), 1u);
  EXPECT_EQ(ineffective_settings(off.config())[0].message,
            "DETNCCL_ALGO=one_shot has no effect: deterministic mode is off.");
}

TEST(ParseConfig, RanksAre32BitAndAWindowMustSelectARankOfTheJob) {
  for (std::string_view text : {"4294967296", "0-4294967296", "4294967296-", "18446744073709551615"}) {
    const std::string entry = "DETNCCL_RANKS=" + std::string(text);
    const ConfigError error = single_error(parse_traced({entry}));
    EXPECT_EQ(error.variable, "DETNCCL_RANKS") << text;
    EXPECT_NE(error.message.find("a rank is at most 4294967295"), std::string::npos) << error.message;
  }
  for (std::string_view text : {"4294967295", "0-4294967295", "7-"}) {
    const std::string entry = "DETNCCL_RANKS=" + std::string(text);
    EXPECT_TRUE(parse_traced({entry}).ok()) << text;
  }
  // The launcher's world size: a window beyond it selects no rank of the job, so nothing would be fingerprinted.
  for (std::string_view world : {"WORLD_SIZE=2", "OMPI_COMM_WORLD_SIZE=2", "SLURM_NTASKS=2", "PMI_SIZE=2"}) {
    for (std::string_view ranks : {"DETNCCL_RANKS=2", "DETNCCL_RANKS=2-", "DETNCCL_RANKS=5,9-12"}) {
      const ConfigError error = single_error(parse({"DETNCCL_DIR=/d", world, ranks}));
      EXPECT_EQ(error.variable, "DETNCCL_RANKS");
      EXPECT_NE(error.message.find("selects no rank of this job, which has 2 ranks (0 to 1)"), std::string::npos)
          << error.message;
    }
    EXPECT_TRUE(parse({"DETNCCL_DIR=/d", world, "DETNCCL_RANKS=1"}).ok());
    EXPECT_TRUE(parse({"DETNCCL_DIR=/d", world, "DETNCCL_RANKS=1-"}).ok());
    EXPECT_TRUE(parse({"DETNCCL_DIR=/d", world, "DETNCCL_RANKS=5,0"}).ok());
  }
  EXPECT_TRUE(parse({"DETNCCL_DIR=/d", "DETNCCL_RANKS=2"}).ok()) << "no world size: known only later";
  // At meta level the window has no effect at all: a warning, not this error.
  const ParsedConfig meta = parse({"DETNCCL_DIR=/d", "DETNCCL_TRACE=meta", "WORLD_SIZE=2", "DETNCCL_RANKS=2"});
  EXPECT_TRUE(meta.ok()) << meta.error_text();
  // The same check for a shim that learns the size from a communicator.
  Config config;
  EXPECT_FALSE(rank_window_problem(config, 2));
  config.ranks = IntervalSet::of({{2, 3}});
  EXPECT_FALSE(rank_window_problem(config, 3));
  EXPECT_FALSE(rank_window_problem(config, 0)) << "unknown size";
  Config empty_window;
  empty_window.ranks = IntervalSet::of({});
  EXPECT_TRUE(rank_window_problem(empty_window, 4)) << "an empty window selects no rank";
  ASSERT_TRUE(rank_window_problem(config, 1));
  EXPECT_EQ(*rank_window_problem(config, 1),
            "DETNCCL_RANKS=2-3 selects no rank of this job, which has 1 rank (0): nothing would be fingerprinted; "
            "select ranks below 1, or unset DETNCCL_RANKS.");
}

// The table's `refines` column is what decides which settings have no effect (env_vars.h): each variable that
// refines a feature is reported exactly when that feature is off, and one that refines nothing never is.
TEST(EnvVarTable, EachRefinedSettingHasNoEffectExactlyWhenItsFeatureIsOff) {
  const std::map<std::string_view, std::string_view> non_default = {
      {"DETNCCL_RUN", "r"},           {"DETNCCL_SEGMENT_BYTES", "64K"},  {"DETNCCL_STEPS", "3"},
      {"DETNCCL_RANKS", "0"},         {"DETNCCL_OPS", "Send"},           {"DETNCCL_MIN_BYTES", "1K"},
      {"DETNCCL_CAPTURE", "1"},       {"DETNCCL_CAPTURE_BYTES", "1M"},   {"DETNCCL_ALGO", "one_shot"},
      {"DETNCCL_ACCUMULATE", "fp32"}, {"DETNCCL_STEP_INFERENCE", "off"}, {"DETNCCL_STEP_BOUNDARY", "Send,comm=1"},
  };
  struct Feature {
    std::vector<std::string_view> off, on;
  };
  const std::map<Refines, Feature> features = {
      {Refines::kTracing, {{"DETNCCL_DIR=/d", "DETNCCL_TRACE=off"}, {"DETNCCL_DIR=/d", "DETNCCL_TRACE=meta"}}},
      {Refines::kFingerprints, {{"DETNCCL_DIR=/d", "DETNCCL_TRACE=meta"}, {"DETNCCL_DIR=/d", "DETNCCL_TRACE=hash"}}},
      {Refines::kSegments, {{"DETNCCL_DIR=/d", "DETNCCL_TRACE=hash"}, {"DETNCCL_DIR=/d", "DETNCCL_TRACE=segments"}}},
      {Refines::kDeterministic, {{"DETNCCL_DETERMINISTIC=0"}, {"DETNCCL_DETERMINISTIC=1"}}},
      {Refines::kCapture, {{"DETNCCL_DIR=/d", "DETNCCL_CAPTURE=0"}, {"DETNCCL_DIR=/d", "DETNCCL_CAPTURE=1"}}},
  };
  std::size_t refining = 0;
  for (const EnvVarInfo& info : env_vars()) {
    if (info.refines == Refines::kNothing) continue;
    ++refining;
    ASSERT_TRUE(non_default.contains(info.name)) << "add a value other than the default of " << info.name;
    ASSERT_TRUE(features.contains(info.refines)) << info.name;
    const std::string setting = std::string(info.name) + "=" + std::string(non_default.at(info.name));
    for (const bool on : {false, true}) {
      std::vector<std::string_view> environment = on ? features.at(info.refines).on : features.at(info.refines).off;
      environment.push_back(setting);
      const ParsedConfig parsed = parse_config(environment);
      ASSERT_TRUE(parsed.ok()) << setting << ": " << parsed.error_text();
      std::vector<std::string> warned;
      for (const ConfigError& warning : ineffective_settings(parsed.config())) warned.push_back(warning.variable);
      EXPECT_EQ(warned, on ? std::vector<std::string>{} : std::vector<std::string>{std::string(info.name)})
          << setting << (on ? " with its feature on" : " with its feature off");
    }
  }
  EXPECT_EQ(refining, non_default.size());

  // Every variable that refines nothing, set with every feature turned off explicitly, counts.
  std::vector<std::string> environment = {"DETNCCL_DIR=/d",          "DETNCCL_TRACE=off",
                                          "DETNCCL_DETERMINISTIC=0", "DETNCCL_LOG_LEVEL=info",
                                          "DETNCCL_LOG_FILE=/tmp/l", "DETNCCL_PRINT_CONFIG=1"};
  const std::vector<std::string_view> views(environment.begin(), environment.end());
  const ParsedConfig parsed = parse_config(views);
  ASSERT_TRUE(parsed.ok()) << parsed.error_text();
  EXPECT_TRUE(ineffective_settings(parsed.config()).empty());
  for (std::string_view entry : views) {
    const std::string_view name = entry.substr(0, entry.find('='));
    for (const EnvVarInfo& info : env_vars()) {
      if (info.name == name) {
        EXPECT_EQ(info.refines, Refines::kNothing) << name;
      }
    }
  }
}

// DETNCCL_OPS's accepted values are generated from the traced operations: every one is listed, in table order.
TEST(EnvVarTable, TheOperationListNamesEveryTracedOperation) {
  std::string expected = "all, or a comma-separated list of ";
  for (std::size_t i = 0; i < kTracedOpCount; ++i) {
    if (i != 0) expected += ", ";
    expected += traced_op_name(static_cast<TracedOp>(i));
  }
  expected += " (any case)";
  EXPECT_EQ(env_var_info(EnvVar::kOps).accepted_text, expected);
  const ConfigError error = single_error(parse_traced({"DETNCCL_OPS=Nope"}));
  EXPECT_NE(error.message.find("; accepted: " + expected + "."), std::string::npos) << error.message;
}

// DETNCCL_ALGO and DETNCCL_ACCUMULATE take the names of collectives/algorithm_names.h, the one list of them: each
// parses to its own enumerator, and the accepted-values texts are generated from the same list.
TEST(EnvVarTable, AlgorithmAndAccumulationNamesComeFromTheCollectivesList) {
  std::string algorithms;
  for (std::size_t i = 0; i < std::size(collectives::kAlgorithmNames); ++i) {
    const auto& entry = collectives::kAlgorithmNames[i];
    const std::string setting = std::string("DETNCCL_ALGO=") + entry.name;
    const ParsedConfig parsed = parse({"DETNCCL_DETERMINISTIC=1", setting});
    ASSERT_TRUE(parsed.ok()) << parsed.error_text();
    EXPECT_EQ(parsed.config().algo, entry.algorithm) << setting;
    if (i != 0) algorithms += i + 1 == std::size(collectives::kAlgorithmNames) ? " or " : ", ";
    algorithms += entry.name;
  }
  EXPECT_EQ(env_var_info(EnvVar::kAlgo).accepted_text, algorithms + " (any case)");
  std::string modes;
  for (std::size_t i = 0; i < std::size(collectives::kAccumulateNames); ++i) {
    const auto& entry = collectives::kAccumulateNames[i];
    const std::string setting = std::string("DETNCCL_ACCUMULATE=") + entry.name;
    const ParsedConfig parsed = parse({"DETNCCL_DETERMINISTIC=1", setting});
    ASSERT_TRUE(parsed.ok()) << parsed.error_text();
    EXPECT_EQ(parsed.config().accumulate, entry.accumulate) << setting;
    if (i != 0) modes += i + 1 == std::size(collectives::kAccumulateNames) ? " or " : ", ";
    modes += entry.name;
  }
  EXPECT_EQ(env_var_info(EnvVar::kAccumulate).accepted_text, modes + " (any case)");
}

TEST(ParseConfig, WhiteSpaceAtEitherEndIsRefusedInEveryVariable) {
  // One rule for every variable: a valid value with white space before or after it is refused.
  const std::map<std::string_view, std::string_view> valid = {
      {"DETNCCL_DIR", "/d"},
      {"DETNCCL_RUN", "r"},
      {"DETNCCL_TRACE", "segments"},
      {"DETNCCL_SEGMENT_BYTES", "16k"},
      {"DETNCCL_STEPS", "1 - 3 , 7-"},
      {"DETNCCL_RANKS", "0"},
      {"DETNCCL_OPS", "Send"},
      {"DETNCCL_MIN_BYTES", "1K"},
      {"DETNCCL_CAPTURE", "1"},
      {"DETNCCL_CAPTURE_BYTES", "1G"},
      {"DETNCCL_LOG_LEVEL", "info"},
      {"DETNCCL_LOG_FILE", "/tmp/l"},
      {"DETNCCL_PRINT_CONFIG", "1"},
      {"DETNCCL_DETERMINISTIC", "1"},
      {"DETNCCL_ALGO", "one_shot"},
      {"DETNCCL_ACCUMULATE", "fp32"},
      {"DETNCCL_STEP_INFERENCE", "calls"},
      {"DETNCCL_STEP_BOUNDARY", "AllReduce,count=1,at=end"},
  };
  for (const EnvVarInfo& info : env_vars()) {
    ASSERT_TRUE(valid.contains(info.name)) << "add a valid value of " << info.name;
    const std::string name(info.name);
    const std::string value(valid.at(info.name));
    const std::string plain = name + "=" + value;
    EXPECT_TRUE(parse_traced({"DETNCCL_DETERMINISTIC=1", plain}).ok()) << plain;
    for (const std::string& padded :
         {name + "= " + value, name + "=" + value + " ", name + "=\t" + value, name + "=" + value + "\n"}) {
      // First occurrence wins: the padded value comes before the settings that make it effective.
      const std::vector<std::string_view> environment = {padded, "DETNCCL_DIR=/d", "DETNCCL_TRACE=segments",
                                                         "DETNCCL_DETERMINISTIC=1"};
      const ParsedConfig parsed = parse_config(environment);
      ASSERT_FALSE(parsed.ok()) << padded;
      EXPECT_EQ(parsed.errors()[0].variable, info.name) << padded;
      EXPECT_NE(parsed.errors()[0].message.find("it starts or ends with white space"), std::string::npos)
          << parsed.errors()[0].message;
    }
  }
}

TEST(ParseConfig, NumbersWithASignAFractionOrHexadecimalSaySo) {
  const std::pair<std::string_view, std::string_view> cases[] = {
      {"DETNCCL_STEPS=-5", "negative numbers are not accepted"},
      {"DETNCCL_STEPS=3--1", "negative numbers are not accepted"},
      {"DETNCCL_RANKS=1,-2", "negative numbers are not accepted"},
      {"DETNCCL_MIN_BYTES=-1", "negative numbers are not accepted"},
      {"DETNCCL_MIN_BYTES=-1K", "negative numbers are not accepted"},
      {"DETNCCL_SEGMENT_BYTES=-16K", "negative numbers are not accepted"},
      {"DETNCCL_MIN_BYTES=+5", "signs are not accepted"},
      {"DETNCCL_STEPS=+5", "signs are not accepted"},
      {"DETNCCL_MIN_BYTES=1.5K", "fractions are not accepted"},
      {"DETNCCL_STEPS=2.5", "fractions are not accepted"},
      {"DETNCCL_MIN_BYTES=0x10", "hexadecimal numbers are not accepted"},
      {"DETNCCL_RANKS=0x1", "hexadecimal numbers are not accepted"},
      {"DETNCCL_STEPS=-", "a range has no start"},
      {"DETNCCL_MIN_BYTES=12X", "unknown suffix"},
      {"DETNCCL_STEPS=a", "not a decimal number"},
  };
  for (const auto& [entry, reason] : cases) {
    const ConfigError error = single_error(parse_traced({entry}));
    EXPECT_EQ(error.variable, entry.substr(0, entry.find('='))) << entry;
    EXPECT_NE(error.message.find(std::string("(").append(reason)), std::string::npos) << entry << ": " << error.message;
  }
}

TEST(ParseConfig, EveryErrorIsReported) {
  const ParsedConfig parsed = parse({"DETNCCL_DIR=/d", "DETNCCL_TRACE=loud", "DETNCCL_STEPS=x", "DETNCCL_BOGUS=1"});
  ASSERT_EQ(parsed.errors().size(), 3u) << parsed.error_text();
  EXPECT_EQ(parsed.errors()[0].variable, "DETNCCL_TRACE");
  EXPECT_EQ(parsed.errors()[1].variable, "DETNCCL_STEPS");
  EXPECT_EQ(parsed.errors()[2].variable, "DETNCCL_BOGUS");
  const std::string text = parsed.error_text();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2);
}

TEST(ParseConfig, FirstOccurrenceWinsAsWithGetenv) {
  const ParsedConfig parsed = parse({"DETNCCL_LOG_LEVEL=debug", "DETNCCL_LOG_LEVEL=bogus"});
  ASSERT_TRUE(parsed.ok()) << parsed.error_text();
  EXPECT_EQ(parsed.config().log_level, LogLevel::kDebug);
}

TEST(ParseConfig, ByteCountsWithSuffixes) {
  const std::pair<std::string_view, std::uint64_t> good[] = {
      {"0", 0},
      {"123", 123},
      {"4k", 4096},
      {"4KiB", 4096},
      {"3M", 3ull << 20},
      {"3mib", 3ull << 20},
      {"2G", 2ull << 30},
      {"18446744073709551615", 18446744073709551615ull},
      {"17179869183G", 17179869183ull << 30},
  };
  for (const auto& [text, bytes] : good) {
    const std::string entry = "DETNCCL_MIN_BYTES=" + std::string(text);
    const ParsedConfig parsed = parse_traced({entry});
    ASSERT_TRUE(parsed.ok()) << text << ": " << parsed.error_text();
    EXPECT_EQ(parsed.config().min_bytes, bytes) << text;
  }
  for (std::string_view text : {"18446744073709551616", "17179869184G", "99999999999999999999999", "12X", "-1", "1.5K",
                                "K", "4 K", "0x10", "4KB", "+5", " 5K "}) {
    const std::string entry = "DETNCCL_MIN_BYTES=" + std::string(text);
    const ConfigError error = single_error(parse_traced({entry}));
    EXPECT_EQ(error.variable, "DETNCCL_MIN_BYTES") << text;
    EXPECT_NE(error.message.find("K, M or G suffix"), std::string::npos) << error.message;
  }
}

TEST(ParseConfig, SegmentBytesAreMultiplesOf16K) {
  for (const auto& [text, bytes] : std::initializer_list<std::pair<std::string_view, std::uint64_t>>{
           {"16K", 16384}, {"32768", 32768}, {"1G", 1ull << 30}, {"48k", 49152}}) {
    const std::string entry = "DETNCCL_SEGMENT_BYTES=" + std::string(text);
    const ParsedConfig parsed = parse_traced({entry});
    ASSERT_TRUE(parsed.ok()) << parsed.error_text();
    EXPECT_EQ(parsed.config().segment_bytes, bytes);
  }
  for (std::string_view text : {"0", "20K", "1000", "2G", "1025M"}) {
    const std::string entry = "DETNCCL_SEGMENT_BYTES=" + std::string(text);
    const ConfigError error = single_error(parse_traced({entry}));
    EXPECT_NE(error.message.find("multiple of 16K"), std::string::npos) << error.message;
  }
}

TEST(ParseConfig, StepWindowMembershipMatchesTheListedSteps) {
  const ParsedConfig parsed = parse_traced({"DETNCCL_STEPS=1,5,40-44, 60 - 61 ,100-"});
  ASSERT_TRUE(parsed.ok()) << parsed.error_text();
  const std::set<std::uint64_t> listed = {1, 5, 40, 41, 42, 43, 44, 60, 61};
  for (std::uint64_t step = 0; step < 200; ++step) {
    EXPECT_EQ(parsed.config().steps.contains(step), listed.contains(step) || step >= 100) << step;
  }
  EXPECT_TRUE(parsed.config().steps.contains(~std::uint64_t{0}));
  EXPECT_TRUE(parsed.config().ranks.is_everything());
}

TEST(ParseConfig, RankWindowMergesOverlaps) {
  const ParsedConfig parsed = parse_traced({"DETNCCL_RANKS=8-15,0,3,10-20,21,2"});
  ASSERT_TRUE(parsed.ok()) << parsed.error_text();
  const std::vector<Interval> expected = {{0, 0}, {2, 3}, {8, 21}};
  EXPECT_EQ(parsed.config().ranks.intervals(), expected);
}

TEST(ParseConfig, WindowErrors) {
  for (std::string_view text : {"5-3", "1,,2", "a", "1-2-3", "1,", ",1", "-4", "1;2", "18446744073709551616"}) {
    const std::string entry = "DETNCCL_STEPS=" + std::string(text);
    const ConfigError error = single_error(parse_traced({entry}));
    EXPECT_EQ(error.variable, "DETNCCL_STEPS") << text;
    EXPECT_NE(error.message.find("comma-separated list"), std::string::npos) << error.message;
  }
  const ParsedConfig all = parse({"DETNCCL_STEPS=ALL"});
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all.config().steps.is_everything());
}

TEST(IntervalSet, MembershipAgreesWithBruteForce) {
  std::mt19937_64 random(12345);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<Interval> intervals;
    std::set<std::uint64_t> members;
    const int count = static_cast<int>(random() % 12);
    for (int i = 0; i < count; ++i) {
      const std::uint64_t first = random() % 300;
      const std::uint64_t last = first + random() % 20;
      intervals.push_back({first, last});
      for (std::uint64_t v = first; v <= last; ++v) members.insert(v);
    }
    const IntervalSet set = IntervalSet::of(intervals);
    for (std::uint64_t v = 0; v < 330; ++v) EXPECT_EQ(set.contains(v), members.contains(v)) << trial << " " << v;
    for (std::size_t i = 1; i < set.intervals().size(); ++i) {
      EXPECT_GT(set.intervals()[i].first, set.intervals()[i - 1].last + 1) << "not merged";
    }
  }
  EXPECT_FALSE(IntervalSet::of({}).contains(0));
  EXPECT_TRUE(IntervalSet().contains(12345));
}

TEST(ParseConfig, OpWindow) {
  const ParsedConfig parsed = parse_traced({"DETNCCL_OPS=AllReduce, send,RECV"});
  ASSERT_TRUE(parsed.ok()) << parsed.error_text();
  for (std::size_t i = 0; i < kTracedOpCount; ++i) {
    const auto op = static_cast<TracedOp>(i);
    const bool expected = op == TracedOp::ncclAllReduce || op == TracedOp::ncclSend || op == TracedOp::ncclRecv;
    EXPECT_EQ(parsed.config().ops.contains(op), expected) << traced_op_name(op);
  }
  const ConfigError error = single_error(parse_traced({"DETNCCL_OPS=AllRduce,Send"}));
  EXPECT_NE(error.message.find("did you mean AllReduce?"), std::string::npos) << error.message;
  EXPECT_NE(error.message.find("ReduceScatter"), std::string::npos) << "accepted values listed: " << error.message;
  EXPECT_FALSE(parse({"DETNCCL_OPS=GroupStart"}).ok());
  EXPECT_FALSE(parse({"DETNCCL_OPS=AllReduce,"}).ok());
}

TEST(ParseConfig, FingerprintWindowCombinesEveryCondition) {
  const ParsedConfig parsed =
      parse({"DETNCCL_DIR=/d", "DETNCCL_STEPS=3-4", "DETNCCL_RANKS=1", "DETNCCL_OPS=Send", "DETNCCL_MIN_BYTES=1K"});
  ASSERT_TRUE(parsed.ok()) << parsed.error_text();
  const Config& config = parsed.config();
  EXPECT_TRUE(config.fingerprints(3, 1, TracedOp::ncclSend, 1024));
  EXPECT_FALSE(config.fingerprints(2, 1, TracedOp::ncclSend, 1024));
  EXPECT_FALSE(config.fingerprints(3, 0, TracedOp::ncclSend, 1024));
  EXPECT_FALSE(config.fingerprints(3, 1, TracedOp::ncclRecv, 1024));
  EXPECT_FALSE(config.fingerprints(3, 1, TracedOp::ncclSend, 1023));
  const ParsedConfig meta = parse({"DETNCCL_DIR=/d", "DETNCCL_TRACE=meta"});
  EXPECT_FALSE(meta.config().fingerprints(0, 0, TracedOp::ncclSend, 1 << 20));
}

TEST(ParseConfig, OtherChoices) {
  const ParsedConfig parsed = parse({"DETNCCL_LOG_LEVEL=Info", "DETNCCL_PRINT_CONFIG=1", "DETNCCL_LOG_FILE=/tmp/x.log",
                                     "DETNCCL_RUN=exp-7.a_b", "DETNCCL_DIR=/d"});
  ASSERT_TRUE(parsed.ok()) << parsed.error_text();
  EXPECT_EQ(parsed.config().log_level, LogLevel::kInfo);
  EXPECT_TRUE(parsed.config().print_config);
  EXPECT_EQ(parsed.config().log_file, "/tmp/x.log");
  EXPECT_EQ(parsed.config().run, "exp-7.a_b");
  for (std::string_view entry : {"DETNCCL_LOG_LEVEL=verbose", "DETNCCL_PRINT_CONFIG=yes", "DETNCCL_PRINT_CONFIG=2",
                                 "DETNCCL_RUN=a/b", "DETNCCL_RUN=..", "DETNCCL_RUN=has space"}) {
    const ConfigError error = single_error(parse({entry}));
    EXPECT_EQ(error.variable, entry.substr(0, entry.find('='))) << entry;
    EXPECT_NE(error.message.find("accepted: "), std::string::npos) << error.message;
  }
  const std::string long_run = "DETNCCL_RUN=" + std::string(129, 'r');
  EXPECT_FALSE(parse({long_run}).ok());
}

TEST(ParseConfig, DeterministicSettings) {
  const ParsedConfig on = parse({"DETNCCL_DETERMINISTIC=1", "DETNCCL_ALGO=mixed_radix", "DETNCCL_ACCUMULATE=FP32"});
  ASSERT_TRUE(on.ok()) << on.error_text();
  EXPECT_EQ(on.config().deterministic, DeterministicMode::kOn);
  EXPECT_TRUE(on.config().deterministic_mode());
  EXPECT_EQ(on.config().algo, DeterministicAlgo::kMixedRadix);
  EXPECT_EQ(on.config().accumulate, Accumulate::kFloat32);
  const ParsedConfig warn = parse({"DETNCCL_DETERMINISTIC=warn", "DETNCCL_ALGO=one_shot"});
  ASSERT_TRUE(warn.ok()) << warn.error_text();
  EXPECT_EQ(warn.config().deterministic, DeterministicMode::kWarn);
  EXPECT_EQ(warn.config().algo, DeterministicAlgo::kOneShot);
  const ParsedConfig off = parse({"DETNCCL_DETERMINISTIC=0", "DETNCCL_ALGO=AUTO"});
  ASSERT_TRUE(off.ok()) << off.error_text();
  EXPECT_EQ(off.config().deterministic, DeterministicMode::kOff);
  EXPECT_FALSE(off.config().deterministic_mode());
  // Anything else is refused, naming the accepted values: a user who asked for determinism must get it or stop.
  for (std::string_view entry :
       {"DETNCCL_DETERMINISTIC=yes", "DETNCCL_DETERMINISTIC=2", "DETNCCL_ALGO=ring", "DETNCCL_ACCUMULATE=fp16"}) {
    const ConfigError error = single_error(parse({entry}));
    EXPECT_EQ(error.variable, entry.substr(0, entry.find('=')));
    EXPECT_NE(error.message.find("accepted: "), std::string::npos) << error.message;
  }
  EXPECT_NE(single_error(parse({"DETNCCL_DETERMINISTIC=maybe"})).message.find("0, 1 or warn"), std::string::npos);
}

TEST(ParseConfig, HostileValuesNeverCrashAndAreQuotedSafely) {
  // Non-UTF-8 bytes and control characters are escaped in messages.
  const ConfigError error = single_error(parse({"DETNCCL_TRACE=\xff\xfe\x1b[31m"}));
  EXPECT_FALSE(has_raw_non_ascii(error.message)) << error.message;
  EXPECT_NE(error.message.find("\\xff\\xfe\\x1b[31m"), std::string::npos) << error.message;
  EXPECT_FALSE(parse({"DETNCCL_RUN=caf\xc3\xa9"}).ok());
  const ConfigError name_error = single_error(parse({"DETNCCL_\xff=1"}));
  EXPECT_FALSE(has_raw_non_ascii(name_error.message)) << name_error.message;

  // Paths are bytes: accepted, and printed escaped.
  const ParsedConfig dir = parse({"DETNCCL_DIR=/tmp/\xff"});
  ASSERT_TRUE(dir.ok());
  EXPECT_NE(format_config(dir.config()).find("DETNCCL_DIR=/tmp/\\xff\n"), std::string::npos);
  const std::string nul_dir("DETNCCL_DIR=/a\0b", 16);
  EXPECT_FALSE(parse({nul_dir}).ok());
  const std::string long_dir = std::string("DETNCCL_DIR=/").append(5000, 'd');
  EXPECT_FALSE(parse({long_dir}).ok());

  // Huge values are refused with their size, and the quote is shortened.
  const std::string huge = "DETNCCL_TRACE=" + std::string(2 << 20, 'x');
  const ConfigError huge_error = single_error(parse({huge}));
  EXPECT_LT(huge_error.message.size(), 1000u);
  EXPECT_NE(huge_error.message.find("(2097152 bytes)"), std::string::npos) << huge_error.message;
}

TEST(ParseConfig, VeryLongListsAreBounded) {
  std::string list;
  for (int rank = 0; rank < 65536; ++rank) {
    if (rank > 0) list += ',';
    list += std::to_string(rank * 2);
  }
  const std::string entry = "DETNCCL_RANKS=" + list;
  const ParsedConfig parsed = parse_traced({entry});
  ASSERT_TRUE(parsed.ok()) << parsed.error_text();
  EXPECT_EQ(parsed.config().ranks.intervals().size(), 65536u);
  EXPECT_TRUE(parsed.config().ranks.contains(131070));
  EXPECT_FALSE(parsed.config().ranks.contains(131069));
  const std::string too_long = entry + ",999999999";
  const ConfigError error = single_error(parse_traced({too_long}));
  EXPECT_NE(error.message.find("more than 65536 entries"), std::string::npos) << error.message.substr(0, 300);
}

TEST(FormatConfig, OneLinePerVariableThatParsesBack) {
  const ParsedConfig parsed =
      parse({"DETNCCL_DIR=/scratch/t", "DETNCCL_RUN=r1", "DETNCCL_TRACE=segments", "DETNCCL_SEGMENT_BYTES=48K",
             "DETNCCL_STEPS=1,5,40-44,100-", "DETNCCL_RANKS=0,3,8-15", "DETNCCL_OPS=Send,AllReduce",
             "DETNCCL_MIN_BYTES=1000", "DETNCCL_LOG_LEVEL=error", "DETNCCL_LOG_FILE=/tmp/l", "DETNCCL_PRINT_CONFIG=1"});
  ASSERT_TRUE(parsed.ok()) << parsed.error_text();
  const std::string text = format_config(parsed.config());
  EXPECT_NE(text.find("DETNCCL_STEPS=1,5,40-44,100-\n"), std::string::npos) << text;
  EXPECT_NE(text.find("DETNCCL_SEGMENT_BYTES=48K\n"), std::string::npos) << text;
  EXPECT_NE(text.find("DETNCCL_OPS=AllReduce,Send\n"), std::string::npos) << text;
  EXPECT_NE(text.find("DETNCCL_DETERMINISTIC=0\n"), std::string::npos) << text;

  std::vector<std::string> lines;
  std::istringstream stream(text);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), env_vars().size());
  const std::vector<std::string_view> views(lines.begin(), lines.end());
  const ParsedConfig again = parse_config(views);
  ASSERT_TRUE(again.ok()) << again.error_text();
  EXPECT_EQ(again.config(), parsed.config());

  // The defaults print and parse back too.
  std::vector<std::string> default_lines;
  std::istringstream default_stream(format_config(Config{}));
  for (std::string line; std::getline(default_stream, line);) default_lines.push_back(line);
  const std::vector<std::string_view> default_views(default_lines.begin(), default_lines.end());
  EXPECT_EQ(parse_config(default_views).config(), Config{});
}

TEST(ConfigDocs, ConfigurationMdEmbedsTheGeneratedTable) {
  std::ifstream file(DETNCCL_SOURCE_DIR "/docs/configuration.md");
  ASSERT_TRUE(file) << "docs/configuration.md is missing";
  const std::string docs((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  for (const EnvVarInfo& info : env_vars()) {
    EXPECT_NE(docs.find(info.name), std::string::npos) << info.name << " is not documented";
  }
  const std::string table = config_reference_markdown();
  EXPECT_NE(docs.find(table), std::string::npos)
      << "docs/configuration.md must hold the generated table exactly; paste this between its markers:\n"
      << table;
}

TEST(ProcessEnvironment, GlobalRankPrecedenceAndFallbacks) {
  const std::vector<std::string_view> torch = {"OMPI_COMM_WORLD_RANK=7", "RANK=3"};
  ASSERT_TRUE(global_rank_from_environment(torch));
  EXPECT_EQ(global_rank_from_environment(torch)->rank, 3u);
  EXPECT_EQ(global_rank_from_environment(torch)->source, "RANK");
  const std::vector<std::string_view> bad_rank = {"RANK=x", "RANKS=1", "SLURM_PROCID=12", "PMI_RANK=4"};
  EXPECT_EQ(global_rank_from_environment(bad_rank)->rank, 12u);
  EXPECT_EQ(global_rank_from_environment(bad_rank)->source, "SLURM_PROCID");
  const std::vector<std::string_view> none = {"RANK=", "RANK_X=1", "PMI_RANK=99999999999", "OMPI_COMM_WORLD_RANK=-1"};
  EXPECT_FALSE(global_rank_from_environment(none));
  const std::vector<std::string_view> sizes = {"WORLD_SIZE=0", "SLURM_NTASKS=16"};
  EXPECT_EQ(world_size_from_environment(sizes), 16u);
  EXPECT_FALSE(world_size_from_environment(none));
}

TEST(ProcessEnvironment, RunNameSources) {
  Config config;
  const std::vector<std::string_view> torch = {"TORCHELASTIC_RUN_ID=job/42 x", "SLURM_JOB_ID=9"};
  EXPECT_EQ(run_name_from_environment(config, torch), "job_42_x");
  const std::vector<std::string_view> restarted = {"TORCHELASTIC_RUN_ID=abc", "TORCHELASTIC_RESTART_COUNT=2"};
  EXPECT_EQ(run_name_from_environment(config, restarted), "abc-restart2");
  const std::vector<std::string_view> slurm = {"TORCHELASTIC_RUN_ID=none", "SLURM_JOB_ID=1234", "SLURM_STEP_ID=0"};
  EXPECT_EQ(run_name_from_environment(config, slurm), "1234.0");
  const std::vector<std::string_view> nothing = {"TORCHELASTIC_RUN_ID=none", "SLURM_JOB_ID=", "TORCHELASTIC_RUN_ID=x"};
  EXPECT_EQ(run_name_from_environment(config, nothing), std::nullopt);
  const std::vector<std::string_view> dots = {"SLURM_JOB_ID=.."};
  EXPECT_EQ(run_name_from_environment(config, dots), std::nullopt);  // ".." would leave DETNCCL_DIR
  config.run = "mine";
  EXPECT_EQ(run_name_from_environment(config, torch), "mine");
}

TEST(ProcessEnvironment, RunNameFromTimeIsUtc) {
  EXPECT_EQ(run_name_from_time(0), "run-19700101-000000");
  EXPECT_EQ(run_name_from_time(1700000000), "run-20231114-221320");
  EXPECT_TRUE(is_valid_run_name(run_name_from_time(1700000000)));
}

TEST(ProcessEnvironment, NcclVariablesAreSortedAndEscaped) {
  const std::vector<std::string_view> environment = {"NCCL_SOCKET_IFNAME=lo", "PATH=/bin", "NCCL_ALGO=Ring",
                                                     "NCCL_DEBUG=\x01x",      "XNCCL_A=1", "DETNCCL_DIR=/d"};
  EXPECT_EQ(nccl_variables(environment), "NCCL_ALGO=Ring\nNCCL_DEBUG=\\x01x\nNCCL_SOCKET_IFNAME=lo\n");
}

TEST(ProcessEnvironment, ConfigFromTheRealEnvironment) {
  ASSERT_EQ(setenv("DETNCCL_LOG_LEVEL", "debug", 1), 0);
  const ParsedConfig parsed = config_from_environment();
  unsetenv("DETNCCL_LOG_LEVEL");
  ASSERT_TRUE(parsed.ok()) << parsed.error_text();
  EXPECT_EQ(parsed.config().log_level, LogLevel::kDebug);
  bool found = false;
  for (std::string_view entry : process_environment()) found = found || entry.starts_with("PATH=");
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace detnccl::config
