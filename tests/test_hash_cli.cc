// detnccl-fingerprint end to end: the real binary on files this test writes.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "hash/fingerprint.h"

namespace {

namespace fs = std::filesystem;
using detnccl::hash::format_digest;
using detnccl::hash::kLeafBytes;

struct ToolRun {
  int status;
  std::string output;  // stdout and stderr together
};

ToolRun run_tool(const std::string& arguments) {
  const std::string command = std::string(DETNCCL_FINGERPRINT_TOOL) + " " + arguments + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("cannot run " + command);
  ToolRun run{0, {}};
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) run.output.append(buffer, n);
  const int raw = ::pclose(pipe);
  run.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return run;
}

class FingerprintTool : public testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "detnccl-test-cli-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<std::uint8_t> write(const std::string& name, std::size_t bytes) {
    std::vector<std::uint8_t> data(bytes);
    std::mt19937 rng(static_cast<unsigned>(bytes));
    for (auto& b : data) b = static_cast<std::uint8_t>(rng());
    std::ofstream(dir_ / name, std::ios::binary)
        .write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(bytes));
    return data;
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

TEST_F(FingerprintTool, PrintsOneLinePerFile) {
  const auto a = write("a.bin", 3 * kLeafBytes + 11);
  const auto empty = write("empty.bin", 0);
  const ToolRun run = run_tool(path("a.bin") + " " + path("empty.bin"));
  EXPECT_EQ(run.status, 0) << run.output;
  EXPECT_EQ(run.output, format_digest(detnccl::hash::fingerprint(a.data(), a.size())) + "  " + path("a.bin") + "\n" +
                            format_digest(detnccl::hash::fingerprint(nullptr, 0)) + "  " + path("empty.bin") + "\n");
}

TEST_F(FingerprintTool, PrintsSegmentDigestsIndentedUnderTheFile) {
  const auto a = write("a.bin", 5 * kLeafBytes + 1);
  const auto segments = detnccl::hash::segment_digests(a.data(), a.size(), 2 * kLeafBytes);
  ASSERT_EQ(segments.size(), 3U);
  std::string expected = format_digest(detnccl::hash::fingerprint(a.data(), a.size())) + "  " + path("a.bin") + "\n";
  expected += "  " + format_digest(segments[0]) + "  segment 0 offset 0 bytes 32768\n";
  expected += "  " + format_digest(segments[1]) + "  segment 1 offset 32768 bytes 32768\n";
  expected += "  " + format_digest(segments[2]) + "  segment 2 offset 65536 bytes 16385\n";
  // "32KiB" and "32768" are the same size; standard input ('-') reads the same bytes through the streaming path.
  for (const std::string size : {"32KiB", "32768"}) {
    const ToolRun run = run_tool("--segment-bytes " + size + " " + path("a.bin"));
    EXPECT_EQ(run.status, 0);
    EXPECT_EQ(run.output, expected);
  }
  const ToolRun piped = run_tool("--segment-bytes 32768 - < " + path("a.bin"));
  EXPECT_EQ(piped.output, expected.substr(0, 16) + "  -\n" + expected.substr(expected.find('\n') + 1));
}

TEST_F(FingerprintTool, NamesAMissingFileAndExitsWithTwo) {
  const auto a = write("a.bin", 10);
  const ToolRun run = run_tool(path("missing.bin") + " " + path("a.bin"));
  EXPECT_EQ(run.status, 2);
  EXPECT_NE(run.output.find(path("missing.bin") + ": cannot open"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find(format_digest(detnccl::hash::fingerprint(a.data(), a.size()))), std::string::npos)
      << "the readable file is still printed";
}

// --segment-bytes 0 is not a positive multiple of the leaf size either: refused like 1000, not taken as "no segments".
// Bad arguments exit with 2, as for every `detnccl` command (docs/cli.md).
TEST_F(FingerprintTool, RejectsASegmentSizeOfZero) {
  write("a.bin", 10);
  const ToolRun zero = run_tool("--segment-bytes 0 " + path("a.bin"));
  EXPECT_EQ(zero.status, 2) << zero.output;
  EXPECT_NE(zero.output.find("multiple of 16384"), std::string::npos) << zero.output;
}

TEST_F(FingerprintTool, RejectsABadSegmentSizeAndMissingArguments) {
  write("a.bin", 10);
  const ToolRun bad = run_tool("--segment-bytes 1000 " + path("a.bin"));
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.output.find("multiple of 16384"), std::string::npos) << bad.output;
  EXPECT_EQ(run_tool("").status, 2);
  EXPECT_EQ(run_tool("--frobnicate " + path("a.bin")).status, 2);
  // A thread count no machine has is a bad argument too, not an abort while starting the threads.
  const ToolRun threads = run_tool("--threads 4000000000 " + path("a.bin"));
  EXPECT_EQ(threads.status, 2) << threads.output;
  EXPECT_NE(threads.output.find("--threads"), std::string::npos) << threads.output;
  const ToolRun help = run_tool("--help");
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.output.find("--segment-bytes"), std::string::npos);
}

}  // namespace
