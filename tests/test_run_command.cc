// End-to-end tests of `detnccl run`: the binary starts trace_job under hostnccl-run (and inside it) with the shim
// preloaded, and the logs it leaves are checked call by call against trace_job's script; its exit statuses, the
// libraries it refuses, and an installed tree (cmake --install into a temporary prefix) used as a user would.
#include <elf.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/test_support.h"
#include "tests/trace_job_log_checks.h"

namespace {

namespace fs = std::filesystem;
using detnccl::test::CommandResult;
using detnccl::test::TempDir;
using namespace detnccl::test::trace_job_logs;

// Runs a command through the shell with a clean detnccl environment (no LD_PRELOAD or PYTHONPATH inherited from
// whoever runs the tests); stdout and stderr together.
CommandResult run(const std::string& command) {
  return detnccl::test::run_command(
      "unset LD_PRELOAD PYTHONPATH; export HOSTNCCL_TIMEOUT_S=20 PYTHONDONTWRITEBYTECODE=1; (" + command + ") 2>&1");
}

const std::string kLauncher = DETNCCL_LAUNCHER " --timeout 120 --grace 1";

// Every rank's log of DIR/RUN matches trace_job's script over `steps` steps.
void expect_script_logs(const std::string& dir, const std::string& run_name, int nranks, int steps,
                        bool fingerprints_expected) {
  for (int rank = 0; rank < nranks; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    ASSERT_TRUE(fs::exists(rank_log(dir, run_name, rank))) << rank_log(dir, run_name, rank);
    check_against_script(read_log(rank_log(dir, run_name, rank)), rank, nranks, steps, fingerprints_expected);
  }
  EXPECT_FALSE(fs::exists(rank_log(dir, run_name, nranks))) << "a rank more than the job has";
}

std::string read_file(const std::string& path) {
  std::ifstream stream(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>()};
}

TEST(RunCommand, WrapsTheLauncherAndEveryRankIsTraced) {
  TempDir dir;
  const CommandResult job = run(DETNCCL_CLI " run --dir " + dir.path() + " --run r -- " + kLauncher +
                                " -n 4 -- " DETNCCL_TRACE_JOB " --steps 2");
  ASSERT_EQ(job.exit_code, 0) << job.output;
  expect_script_logs(dir.path(), "r", 4, 2, /*fingerprints_expected=*/true);
}

TEST(RunCommand, RunsInsideTheLauncherOnEveryRank) {
  TempDir dir;
  const CommandResult job = run(kLauncher + " -n 2 -- " DETNCCL_CLI " run --dir " + dir.path() +
                                " --run r2 -- " DETNCCL_TRACE_JOB " --steps 3");
  ASSERT_EQ(job.exit_code, 0) << job.output;
  expect_script_logs(dir.path(), "r2", 2, 3, /*fingerprints_expected=*/true);
}

// A relative --dir is made absolute where detnccl run started: a rank that changes directory still writes there.
TEST(RunCommand, ARelativeDirectoryIsTheOneWhereItWasGiven) {
  TempDir dir;
  const CommandResult job = run("cd " + dir.path() + " && " DETNCCL_CLI " run --dir traces --run rel -- " + kLauncher +
                                " -n 2 -- sh -c 'cd / && exec " DETNCCL_TRACE_JOB " --steps 1'");
  ASSERT_EQ(job.exit_code, 0) << job.output;
  expect_script_logs(dir / "traces", "rel", 2, 1, /*fingerprints_expected=*/true);
}

// What the job already preloads stays, after the shim; DETNCCL_* variables of the environment pass through (here
// DETNCCL_TRACE=meta: records without fingerprints), and the options set theirs.
TEST(RunCommand, KeepsThePreloadAndTheEnvironmentsSettings) {
  TempDir dir;
  const CommandResult job = run("env LD_PRELOAD=libm.so.6 DETNCCL_TRACE=meta " DETNCCL_CLI " run --dir " + dir.path() +
                                " --run m -- " + kLauncher + " -n 2 -- sh -c 'echo \"$LD_PRELOAD\" > " + dir.path() +
                                "/preload-$RANK; exec " DETNCCL_TRACE_JOB " --steps 2'");
  ASSERT_EQ(job.exit_code, 0) << job.output;
  expect_script_logs(dir.path(), "m", 2, 2, /*fingerprints_expected=*/false);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(read_file(dir / ("preload-" + std::to_string(rank))), DETNCCL_SHIM_PATH ":libm.so.6\n");
  }
}

TEST(RunCommand, SetsEachOptionsVariableAndPreloadsTheShimOnce) {
  TempDir dir;
  const std::string print = "sh -c 'env | grep -E \"^(LD_PRELOAD|DETNCCL_)\" | sort'";
  const CommandResult job =
      run("env LD_PRELOAD=" DETNCCL_SHIM_PATH " DETNCCL_TRACE=meta DETNCCL_LOG_LEVEL=info " DETNCCL_CLI " run --dir " +
          dir.path() + " --run x --deterministic --trace segments --steps 3-5 " + "--ranks 1 -- " + print);
  ASSERT_EQ(job.exit_code, 0) << job.output;
  EXPECT_EQ(job.output, "DETNCCL_DETERMINISTIC=1\nDETNCCL_DIR=" + dir.path() +
                            "\nDETNCCL_LOG_LEVEL=info\nDETNCCL_RANKS=1\nDETNCCL_RUN=x\nDETNCCL_STEPS=3-5\n"
                            "DETNCCL_TRACE=segments\nLD_PRELOAD=" DETNCCL_SHIM_PATH "\n");
  const CommandResult warn = run(DETNCCL_CLI " run --deterministic=warn -- " + print);
  EXPECT_EQ(warn.output, "DETNCCL_DETERMINISTIC=warn\nLD_PRELOAD=" DETNCCL_SHIM_PATH "\n");
}

// --print-config says the effective settings once, on stderr, before the command's own output.
TEST(RunCommand, PrintConfigSaysTheSettingsOnceOnStandardError) {
  TempDir dir;
  const CommandResult quiet = detnccl::test::run_command("env -u LD_PRELOAD " DETNCCL_CLI " run --print-config --dir " +
                                                         dir.path() + " -- echo done 2>/dev/null");
  EXPECT_EQ(quiet.output, "done\n");
  const CommandResult job = run(DETNCCL_CLI " run --print-config --dir " + dir.path() + " --run p -- echo done");
  ASSERT_EQ(job.exit_code, 0) << job.output;
  EXPECT_EQ(job.output, "detnccl run: LD_PRELOAD=" DETNCCL_SHIM_PATH "\ndetnccl run: PYTHONPATH=" DETNCCL_AUTOSTEP_DIR
                        "\ndetnccl run: DETNCCL_DIR=" +
                            dir.path() + "\ndetnccl run: DETNCCL_RUN=p\ndetnccl run: command: echo done\ndone\n");
  const CommandResult alone = run(DETNCCL_CLI " run --print-config --no-python-steps -- echo done");
  EXPECT_EQ(alone.output, "detnccl run: LD_PRELOAD=" DETNCCL_SHIM_PATH
                          "\ndetnccl run: PYTHONPATH left as it was (--no-python-steps: no PyTorch step hook)\n"
                          "detnccl run: no DETNCCL_* setting (nothing is traced)\ndetnccl run: command: echo done\n"
                          "done\n");
}

// The PyTorch step hook's folder goes first on PYTHONPATH (what was there kept, in order, empty entries too, and no
// second copy of the folder); --no-python-steps leaves PYTHONPATH as it was, set or not.
TEST(RunCommand, PutsThePyTorchStepHookFirstOnThePythonPath) {
  const std::string print = " -- sh -c 'echo \"${PYTHONPATH-unset}\"'";
  EXPECT_EQ(run(DETNCCL_CLI " run" + print).output, DETNCCL_AUTOSTEP_DIR "\n");
  EXPECT_EQ(run("PYTHONPATH= " DETNCCL_CLI " run" + print).output, DETNCCL_AUTOSTEP_DIR "\n");
  EXPECT_EQ(run("PYTHONPATH=/a::/b " DETNCCL_CLI " run" + print).output, DETNCCL_AUTOSTEP_DIR ":/a::/b\n");
  EXPECT_EQ(run("PYTHONPATH=/a:" DETNCCL_AUTOSTEP_DIR "/:/b " DETNCCL_CLI " run" + print).output,
            DETNCCL_AUTOSTEP_DIR ":/a:/b\n");
  EXPECT_EQ(run("PYTHONPATH=/a " DETNCCL_CLI " run --no-python-steps" + print).output, "/a\n");
  EXPECT_EQ(run(DETNCCL_CLI " run --no-python-steps" + print).output, "unset\n");
  EXPECT_TRUE(fs::is_regular_file(DETNCCL_AUTOSTEP_DIR "/sitecustomize.py"));
}

// The command becomes the process (exec): its exit status, and a signal that kills it, are what the parent sees.
TEST(RunCommand, ExitsWithTheCommandsStatusAndSignal) {
  EXPECT_EQ(run(DETNCCL_CLI " run -- sh -c 'exit 7'").exit_code, 7);
  EXPECT_EQ(run(DETNCCL_CLI " run -- false").exit_code, 1);
  TempDir dir;
  const auto killed =
      detnccl::test::run_process({DETNCCL_CLI, "run", "--", "sh", "-c", "kill -TERM $$"},
                                 detnccl::test::environment_with({}), dir / "out", std::chrono::seconds(60));
  EXPECT_EQ(killed.signal, SIGTERM) << killed.exit_code << ": " << killed.output;
  const CommandResult missing = run(DETNCCL_CLI " run -- detnccl-no-such-command --flag");
  EXPECT_EQ(missing.exit_code, 127);
  EXPECT_NE(missing.output.find("detnccl run: detnccl-no-such-command: command not found"), std::string::npos)
      << missing.output;
  std::ofstream(dir / "script") << "#!/bin/sh\nexit 0\n";  // not executable
  const CommandResult not_executable = run(DETNCCL_CLI " run -- " + (dir / "script"));
  EXPECT_EQ(not_executable.exit_code, 126) << not_executable.output;
  EXPECT_EQ(run(DETNCCL_CLI " run --dir " + dir.path()).exit_code, 2) << "no command";
}

// Writes an ELF header: the shim's own first bytes with e_ident's class or e_machine changed.
std::string write_elf_like_the_shim(const TempDir& dir, const std::string& name, int elf_class, int machine_delta) {
  std::string header = read_file(DETNCCL_SHIM_PATH).substr(0, 64);
  header[EI_CLASS] = static_cast<char>(elf_class);
  std::uint16_t machine = 0;
  std::memcpy(&machine, header.data() + 18, sizeof machine);
  machine = static_cast<std::uint16_t>(machine + machine_delta);
  std::memcpy(header.data() + 18, &machine, sizeof machine);
  std::ofstream(dir / name, std::ios::binary) << header << std::string(4096, '\0');
  return dir / name;
}

// A library that is missing, not ELF, 32-bit, for another machine, or a program is refused before anything runs
// (exit 2, the message names the file and why); the command never starts.
TEST(RunCommand, RefusesAShimThatCannotBePreloaded) {
  TempDir dir;
  std::ofstream(dir / "text.so") << "not a library\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {dir / "missing.so", "does not exist"},
      {"/etc/passwd", "is not an ELF file"},
      {dir / "text.so", "is not an ELF file"},
      {dir.path(), "is not a regular file"},
      {write_elf_like_the_shim(dir, "elf32.so", ELFCLASS32, 0), "is a 32-bit ELF file"},
      {write_elf_like_the_shim(dir, "other-machine.so", ELFCLASS64, 1), "is an ELF shared library for another machine"},
      {DETNCCL_TRACE_JOB, ""},  // a program: refused whether it is position-independent (ET_DYN) or not
  };
  for (const auto& [path, reason] : cases) {
    const CommandResult result = run(DETNCCL_CLI " run --shim " + path + " -- touch " + (dir / "started"));
    EXPECT_EQ(result.exit_code, 2) << path << ": " << result.output;
    EXPECT_NE(result.output.find("detnccl run: the shim " + path + " " + reason), std::string::npos) << result.output;
    EXPECT_FALSE(fs::exists(dir / "started")) << path;
  }
  const CommandResult good = run(DETNCCL_CLI " run --shim " DETNCCL_SHIM_PATH " -- touch " + (dir / "started"));
  EXPECT_EQ(good.exit_code, 0) << good.output;
  EXPECT_TRUE(fs::exists(dir / "started"));
}

// `cmake --install` into a temporary prefix gives bin/detnccl, the shim in the libdir, the Python helper, the PyTorch
// step hook and the docs, hostnccl's libnccl only in a private directory; the installed detnccl run finds the installed
// shim and step hook: a PyTorch job without detnccl code gets its steps from its optimizer.
TEST(RunCommandInstalled, AnInstalledTreeTracesAJob) {
  TempDir prefix;
  const CommandResult install =
      run("'" DETNCCL_CMAKE_COMMAND "' --install '" DETNCCL_BINARY_DIR "' --prefix " + prefix.path());
  ASSERT_EQ(install.exit_code, 0) << install.output;
  const std::string libdir = prefix / DETNCCL_INSTALL_LIBDIR;
  for (const std::string& file :
       {prefix / "bin/detnccl", prefix / "bin/detnccl-fingerprint", prefix / "bin/hostnccl-run",
        libdir + "/libdetnccl.so", prefix / "include/detnccl.h", prefix / "share/detnccl/python/detnccl_step.py",
        prefix / "share/detnccl/python/autostep/sitecustomize.py",
        prefix / "share/detnccl/python/autostep/detnccl_autostep.py", prefix / "share/doc/detnccl/python.md",
        prefix / "share/doc/detnccl/README.md", prefix / "share/doc/detnccl/cli.md",
        prefix / "share/doc/detnccl/configuration.md", libdir + "/detnccl/hostnccl/libnccl.so.2"}) {
    EXPECT_TRUE(fs::is_regular_file(file)) << file << " is not installed";
  }
  for (const fs::directory_entry& entry : fs::directory_iterator(libdir)) {
    EXPECT_NE(entry.path().filename().string().rfind("libnccl", 0), 0u)
        << entry.path() << ": an NCCL on the library path would shadow the real one";
  }
  TempDir dir;
  const CommandResult job = run(prefix / "bin/detnccl" + " run --print-config --dir " + dir.path() + " --run i -- " +
                                prefix / "bin/hostnccl-run" + " -n 2 --timeout 120 -- " DETNCCL_TRACE_JOB " --steps 2");
  ASSERT_EQ(job.exit_code, 0) << job.output;
  EXPECT_NE(job.output.find("detnccl run: LD_PRELOAD=" + libdir + "/libdetnccl.so\n"), std::string::npos) << job.output;
  EXPECT_NE(job.output.find("detnccl run: PYTHONPATH=" + prefix / "share/detnccl/python/autostep\n"), std::string::npos)
      << job.output;
  expect_script_logs(dir.path(), "i", 2, 2, /*fingerprints_expected=*/true);
  const CommandResult stats = run(prefix / "bin/detnccl" + " check " + dir / "i");
  EXPECT_EQ(stats.exit_code, 0) << stats.output;

  // The PyTorch job of tests/test_autostep.cc: a broadcast of each of its 4 parameters, then one AllReduce per
  // iteration; a call of iteration K follows K optimizer steps.
  const CommandResult torch = run(DETNCCL_TEST_PYTHON " -c 'import torch'");
  ASSERT_EQ(torch.exit_code, 0) << DETNCCL_TEST_PYTHON << " cannot import torch: run scripts/install-deps.sh (it "
                                << "installs python3-torch). " << torch.output;
  constexpr int kIterations = 3;
  const CommandResult python = run(
      prefix / "bin/detnccl" + " run --dir " + dir.path() + " --run py -- " + prefix / "bin/hostnccl-run" +
      " -n 2 --timeout 120 -- " DETNCCL_TEST_PYTHON " " DETNCCL_AUTOSTEP_JOB " --mode plain --iterations " +
      std::to_string(kIterations) + " --nccl " + libdir + "/detnccl/hostnccl/libnccl.so.2 --events " + dir / "events");
  ASSERT_EQ(python.exit_code, 0) << python.output;
  for (int rank = 0; rank < 2; ++rank) {
    const CommandResult dump =
        run(prefix / "bin/detnccl" + " dump --format jsonl --rank " + std::to_string(rank) + " " + dir / "py");
    std::vector<std::string> steps;
    for (std::size_t at = dump.output.find("\"step\":"); at != std::string::npos;
         at = dump.output.find("\"step\":", at + 1)) {
      steps.push_back(dump.output.substr(at, dump.output.find(',', at) - at));
    }
    std::vector<std::string> expected(4, "\"step\":0");
    for (int iteration = 0; iteration < kIterations; ++iteration) {
      expected.push_back("\"step\":" + std::to_string(iteration));
    }
    EXPECT_EQ(steps, expected) << dump.output;
    EXPECT_EQ(detnccl::test::occurrences(dump.output, "\"step_source\":\"optimizer\""), expected.size()) << dump.output;
  }
}

}  // namespace
