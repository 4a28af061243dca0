// The LD_PRELOAD shim (interpose/): it exports exactly the NCCL API and its own detnccl_* functions, and it is
// transparent — a program gives the same answers, return codes and error messages with and without it, over the
// real NCCL and over hostnccl, and the dynamic linker really routes the calls through it.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "config/config.h"
#include "interpose/traced_op.h"
#include "records/log_format.h"
#include "tests/test_support.h"

namespace {

using detnccl::test::CommandResult;

// Runs a command; its output holds stdout and stderr together.
CommandResult run(const std::string& command) { return detnccl::test::run_command(command + " 2>&1"); }

std::string preload(const std::string& command) { return "LD_PRELOAD=" DETNCCL_SHIM_PATH " " + command; }

// Every entry point named in the API table, read from the table's text (independently of the macros).
std::set<std::string> table_entry_points() {
  std::ifstream table(DETNCCL_ABI_TABLE_H);
  std::stringstream text;
  text << table.rdbuf();
  const std::string source = text.str();
  const std::regex row(R"(X\((?:ncclResult_t|const char\*),\s*(nccl\w+),)");
  std::set<std::string> names;
  for (auto it = std::sregex_iterator(source.begin(), source.end(), row); it != std::sregex_iterator(); ++it) {
    names.insert((*it)[1]);
  }
  return names;
}

TEST(Interpose, ExportsExactlyTheNcclApiAndNoPncclSymbol) {
  const CommandResult nm = run("nm -D --defined-only " DETNCCL_SHIM_PATH);
  ASSERT_EQ(nm.exit_code, 0) << nm.output;
  std::set<std::string> exported;
  std::istringstream lines(nm.output);
  std::string address, type, name;
  while (lines >> address >> type >> name) exported.insert(name);

  std::set<std::string> expected = table_entry_points();
  ASSERT_GT(expected.size(), 30u);
  expected.insert({"detnccl_set_step", "detnccl_set_optimizer_step", "detnccl_flush"});  // the public C API (detnccl.h)
  EXPECT_EQ(exported, expected);
  for (const std::string& symbol : exported) EXPECT_NE(symbol.rfind("pnccl", 0), 0u) << symbol;
}

// A preload library the loader cannot load is skipped with one line on stderr and the job runs without detnccl: the
// shim may need only what every Linux system with a C++ runtime has (no libxxhash, no CUDA runtime, no NCCL).
TEST(Interpose, NeedsOnlyTheCAndCxxRuntimes) {
  const CommandResult readelf = run("readelf -d " DETNCCL_SHIM_PATH);
  ASSERT_EQ(readelf.exit_code, 0) << readelf.output;
  const std::regex needed_entry(R"(\(NEEDED\)\s+Shared library: \[([^\]]+)\])");
  std::set<std::string> needed;
  for (auto it = std::sregex_iterator(readelf.output.begin(), readelf.output.end(), needed_entry);
       it != std::sregex_iterator(); ++it) {
    needed.insert((*it)[1]);
  }
  ASSERT_FALSE(needed.empty()) << readelf.output;
  const std::regex allowed(R"((libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux-x86-64)\.so\.\d+)");
  // Sanitizer builds add their runtime (libasan, libubsan, libtsan), which the job under test then preloads too.
  const std::regex sanitizer(R"(lib(asan|ubsan|tsan)\.so\.\d+)");
  for (const std::string& library : needed) {
    EXPECT_TRUE(std::regex_match(library, allowed) || std::regex_match(library, sanitizer))
        << "libdetnccl.so needs " << library;
  }
}

TEST(Interpose, DoesNothingInAProcessThatNeverLoadsNccl) {
  const CommandResult result = run(preload("/bin/sh -c 'echo hello'"));
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.output, "hello\n");
}

#ifdef DETNCCL_PROBE_REAL
// Over the real NCCL 2.28 (no GPU here): ncclGetVersion answers NCCL's own version, and the failing
// ncclCommInitRank returns NCCL's own error code and ncclGetLastError message, exactly as without the shim.
TEST(Interpose, TransparentOverTheRealNccl) {
  const CommandResult direct = run(DETNCCL_PROBE_REAL);
  const CommandResult shimmed = run(preload(DETNCCL_PROBE_REAL));
  ASSERT_EQ(direct.exit_code, 0) << direct.output;
  EXPECT_EQ(shimmed.exit_code, 0);
  EXPECT_EQ(shimmed.output, direct.output);
  EXPECT_NE(direct.output.find("version 22809"), std::string::npos) << direct.output;
}

// The same with tracing on: the shim's own work never changes NCCL's answers.
TEST(Interpose, TransparentOverTheRealNcclWithTracingOn) {
  const detnccl::test::TempDir temp("detnccl-interpose");
  const std::string& dir = temp.path();
  const CommandResult direct = run(DETNCCL_PROBE_REAL);
  const CommandResult traced = run("DETNCCL_DIR=" + dir + " DETNCCL_RUN=real " + preload(DETNCCL_PROBE_REAL));
  EXPECT_EQ(traced.exit_code, 0);
  EXPECT_EQ(traced.output, direct.output);
}

TEST(Interpose, CallsAreRoutedThroughTheShimToTheRealNccl) {
  const CommandResult traced = run("LD_DEBUG=bindings " + preload(DETNCCL_PROBE_REAL));
  // The program's call binds to the shim, and the shim's lookup binds to the real library's strong symbol.
  EXPECT_TRUE(
      std::regex_search(traced.output, std::regex(R"(interpose_probe_real.*to .*libdetnccl\.so.*`ncclAllReduce')")))
      << traced.output.substr(0, 4000);
  EXPECT_TRUE(std::regex_search(traced.output, std::regex(R"(libdetnccl\.so.*to .*libnccl\.so\.2.*`pncclAllReduce')")));
}
#endif

#ifdef DETNCCL_PROBE_HOST
TEST(Interpose, TransparentOverHostnccl) {
  const CommandResult direct = run(DETNCCL_PROBE_HOST);
  const CommandResult shimmed = run(preload(DETNCCL_PROBE_HOST));
  ASSERT_EQ(direct.exit_code, 0) << direct.output;
  EXPECT_EQ(shimmed.exit_code, 0);
  EXPECT_EQ(shimmed.output, direct.output);
  const CommandResult traced = run("LD_DEBUG=bindings " + preload(DETNCCL_PROBE_HOST));
  EXPECT_TRUE(std::regex_search(traced.output, std::regex(R"(libdetnccl\.so.*to .*libnccl\.so\.2.*`pncclAllReduce')")));
}
#endif

// The shim maps a call's OpId to its DETNCCL_OPS operation with a table built at compile time; it must agree with
// the name mapping DETNCCL_OPS is parsed with, for every number an OpId can hold, and reach every operation.
static_assert(detnccl::interpose::traced_op_of(detnccl::records::OpId::kAllReduce) ==
              detnccl::config::TracedOp::ncclAllReduce);
static_assert(!detnccl::interpose::traced_op_of(detnccl::records::OpId::kUnknown));

TEST(Interpose, OpIdToTracedOpTableAgreesWithTheNameMapping) {
  using detnccl::config::TracedOp;
  std::set<TracedOp> reached;
  for (unsigned number = 0; number <= 0xffff; ++number) {
    const auto op = static_cast<detnccl::records::OpId>(number);
    const std::optional<TracedOp> by_name = detnccl::config::traced_op_from_name(detnccl::records::op_name(op));
    const std::optional<TracedOp> by_table = detnccl::interpose::traced_op_of(op);
    ASSERT_EQ(by_table, by_name) << "OpId " << number << " (" << detnccl::records::op_name(op) << ")";
    if (by_table) reached.insert(*by_table);
  }
  EXPECT_EQ(reached.size(), detnccl::config::kTracedOpCount);
}

}  // namespace
