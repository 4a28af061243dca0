// Soak: 8 ranks make thousands of mixed calls (every collective, groups, Send/Recv, communicator splits) with the
// shim tracing every one (tests/soak_job.cc under hostnccl-run). At the end `detnccl check` must find every
// relation between the ranks' records intact, and each rank's memory must have stayed flat after warm-up: its
// anonymous memory (the shim's heap) and its whole resident set (the mapped log included).
//
// The CI run is bounded (SOAK_STEPS, default 4,000 steps: 52,000 calls per rank, about 30 s on 2 cores;
// 1,000 under sanitizers); scripts/soak.sh runs a longer one.
// Deterministic mode is on (SOAK_DETERMINISTIC=0 turns it off): the float reductions go through detnccl's own
// algorithms, inside and outside groups, on split communicators too.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_support.h"
#include "tests/trace_job_script.h"

namespace {

using detnccl::test::environment_with;
using detnccl::test::ProcessOutcome;
using detnccl::test::run_process;
using detnccl::test::TempDir;
using nlohmann::json;

int environment_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::atoi(value) : fallback;
}

std::vector<long> parse_samples(const std::string& text) {
  std::vector<long> samples;
  std::stringstream stream(text);
  for (std::string item; std::getline(stream, item, ',');) samples.push_back(std::stol(item));
  return samples;
}

TEST(Soak, EightRanksOfMixedCallsKeepEveryRelationAndFlatMemory) {
  constexpr int kRanks = 8, kSplitEvery = 5;
  const int steps = environment_int("SOAK_STEPS", DETNCCL_SOAK_SANITIZED ? 1000 : 4000);
  TempDir scratch("detnccl-soak");
  std::vector<std::string> argv = {DETNCCL_LAUNCHER,
                                   "-n",
                                   std::to_string(kRanks),
                                   "--timeout",
                                   "3000",
                                   "--grace",
                                   "1",
                                   "--",
                                   "/usr/bin/env",
                                   "LD_PRELOAD=" DETNCCL_SHIM_PATH,
                                   "DETNCCL_DIR=" + scratch.path(),
                                   "DETNCCL_RUN=soak"};
  if (environment_int("SOAK_DETERMINISTIC", 1) == 1) argv.push_back("DETNCCL_DETERMINISTIC=1");
  argv.insert(argv.end(),
              {DETNCCL_SOAK_JOB, "--steps", std::to_string(steps), "--split-every", std::to_string(kSplitEvery)});
  const ProcessOutcome job = run_process(argv, environment_with({"HOSTNCCL_TIMEOUT_S=120"}),
                                         scratch / "soak-output.txt", std::chrono::seconds(3600));
  ASSERT_EQ(job.exit_code, 0) << job.output;
  std::printf("soak: %d ranks x %d steps in %.1f s\n", kRanks, steps, job.seconds);

  // Memory: after the first tenth (warm-up: buffers, the log's first growth), anonymous memory stays flat.
  int ranks_reported = 0;
  std::istringstream lines(job.output);
  for (std::string text; std::getline(lines, text);) {
    int rank = -1, steps_done = 0, splits_done = 0;
    char anon_text[4096] = {}, rss_text[4096] = {};
    // The launcher prefixes each line with "[rank R] ".
    const std::size_t at = text.find("soak rank ");
    if (at == std::string::npos ||
        std::sscanf(text.c_str() + at, "soak rank %d: steps %d splits %d rss_anon_kib %4095s rss_kib %4095s", &rank,
                    &steps_done, &splits_done, anon_text, rss_text) != 5) {
      continue;
    }
    ++ranks_reported;
    const std::vector<long> anon = parse_samples(anon_text);
    ASSERT_GE(anon.size(), 2u);
    std::printf("soak rank %d: RssAnon %ld KiB -> %ld KiB (VmRSS samples %s)\n", rank, anon.front(), anon.back(),
                rss_text);
    // RATIONALE: a leak of even 100 bytes per call shows up as more than this over thousands of calls. Under
    // sanitizers the allocator's quarantine grows anonymous memory by design; their leak checker stands in.
    // The whole resident set too: the log's written pages are handed back as it grows (RecordWriter), so a log of
    // tens of MiB adds at most a few MiB.
    const std::vector<long> rss = parse_samples(rss_text);
    ASSERT_GE(rss.size(), 2u);
    if (!DETNCCL_SOAK_SANITIZED) {
      EXPECT_LT(anon.back() - anon.front(), 1024) << "rank " << rank << " RssAnon samples " << anon_text;
      EXPECT_LT(rss.back() - rss.front(), 8 * 1024) << "rank " << rank << " VmRSS samples " << rss_text;
    }
  }
  EXPECT_EQ(ranks_reported, kRanks) << job.output;

  // Every relation between the ranks' records holds.
  const ProcessOutcome check =
      run_process({DETNCCL_CLI, "check", "--json", scratch / "soak"}, environment_with({"NO_COLOR=1"}),
                  scratch / "check.txt", std::chrono::seconds(600));
  EXPECT_EQ(check.exit_code, 0) << check.output;
  const json result =
      json::parse(check.output.substr(std::min(check.output.find('{'), check.output.size())), nullptr, false);
  ASSERT_FALSE(result.is_discarded()) << check.output;
  EXPECT_EQ(result["verdict"], "consistent") << check.output;
  const std::size_t per_step = detnccl::test::script_step(0, kRanks, 0).size();
  const std::size_t splits = static_cast<std::size_t>(steps / kSplitEvery);
  EXPECT_EQ(result["calls"], kRanks * (steps * per_step + 2 * splits));
  EXPECT_GT(result["content_checks"].get<std::size_t>(), static_cast<std::size_t>(steps) * 4);
  EXPECT_EQ(result["findings"].size(), 0u);
}

}  // namespace
