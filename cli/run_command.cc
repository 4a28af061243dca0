// detnccl run: runs a command with the shim preloaded into it and every process it starts (libdetnccl.so prepended
// to LD_PRELOAD, DETNCCL_* set from the options, the PyTorch step hook prepended to PYTHONPATH), by exec'ing it in
// place.
// RATIONALE: exec rather than fork and wait: the command becomes this process, so its exit status and a signal that
// kills it reach the parent exactly as they would without detnccl (no 128+N translation, no signal forwarding, no
// process in between for a launcher or a job scheduler to stop).
#include <elf.h>
#include <limits.h>
#include <link.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "cli/commands.h"

extern char** environ;

namespace detnccl::cli {
namespace {

namespace fs = std::filesystem;

constexpr int kExitCommandNotFound = 127;       // the shell's status for a command that is not found
constexpr int kExitCommandNotExecutable = 126;  // ... and for one that is found but cannot be run
constexpr const char* kShimName = "libdetnccl.so";
// The PyTorch step hook's directory (its sitecustomize.py, docs/python.md), under the data directory.
constexpr const char* kPythonStepsDirectory = "detnccl/python/autostep";

// The directory of this program (/proc/self/exe), or empty when it cannot be read.
fs::path program_directory() {
  std::error_code error;
  const fs::path self = fs::read_symlink("/proc/self/exe", error);
  return error ? fs::path() : self.parent_path();
}

// Where the shim lies next to this program: build/<preset>/cli/detnccl → build/<preset>/lib, and an installed
// PREFIX/bin/detnccl → PREFIX/lib or PREFIX/<GNUInstallDirs libdir> (DETNCCL_INSTALL_LIBDIR, relative to the prefix
// or absolute). The first that exists; the first candidate when none does (the message names it).
fs::path default_shim() {
  const fs::path directory = program_directory();
  std::vector<fs::path> candidates;
  const fs::path libdir = DETNCCL_INSTALL_LIBDIR;
  candidates.push_back(libdir.is_absolute() ? libdir / kShimName : directory / ".." / libdir / kShimName);
  candidates.push_back(directory / ".." / "lib" / kShimName);
  for (const fs::path& candidate : candidates) {
    std::error_code error;
    if (fs::exists(candidate, error)) return candidate.lexically_normal();
  }
  return candidates.front().lexically_normal();
}

// Where the PyTorch step hook lies next to this program: build/<preset>/cli/detnccl → build/<preset>/share/...
// (interpose/CMakeLists.txt copies it there), and an installed PREFIX/bin/detnccl → PREFIX/<GNUInstallDirs datadir>/...
// (DETNCCL_INSTALL_DATADIR, relative to the prefix or absolute). The first that exists; the first candidate when
// none does (the message names it).
fs::path default_python_steps_directory() {
  const fs::path directory = program_directory();
  std::vector<fs::path> candidates;
  const fs::path datadir = DETNCCL_INSTALL_DATADIR;
  candidates.push_back(datadir.is_absolute() ? datadir / kPythonStepsDirectory
                                             : directory / ".." / datadir / kPythonStepsDirectory);
  candidates.push_back(directory / ".." / "share" / kPythonStepsDirectory);
  for (const fs::path& candidate : candidates) {
    std::error_code error;
    if (fs::is_regular_file(candidate / "sitecustomize.py", error)) return candidate.lexically_normal();
  }
  return candidates.front().lexically_normal();
}

// The first bytes of an ELF file's header (e_ident, e_type, e_machine): the same offsets in both classes.
struct ElfIdentity {
  unsigned char ident[EI_NIDENT];
  std::uint16_t type;
  std::uint16_t machine;
};

// Reads the identity of `path`; an error message when it is not an ELF file.
std::string read_elf_identity(const fs::path& path, ElfIdentity& identity) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return std::string("cannot be read: ") + std::strerror(errno);
  file.read(reinterpret_cast<char*>(&identity), sizeof identity);
  if (file.gcount() != static_cast<std::streamsize>(sizeof identity) ||
      std::memcmp(identity.ident, ELFMAG, SELFMAG) != 0) {
    return "is not an ELF file";
  }
  return {};
}

// Whether the ELF file `path`, of this program's class and byte order, names a program interpreter: a
// position-independent executable (ET_DYN like a shared library), which the loader refuses to preload.
bool has_interpreter(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  ElfW(Ehdr) header{};
  if (!file.read(reinterpret_cast<char*>(&header), sizeof header) || header.e_phentsize != sizeof(ElfW(Phdr))) {
    return false;
  }
  file.seekg(static_cast<std::streamoff>(header.e_phoff));
  for (unsigned i = 0; i < header.e_phnum; ++i) {
    ElfW(Phdr) segment{};
    if (!file.read(reinterpret_cast<char*>(&segment), sizeof segment)) return false;
    if (segment.p_type == PT_INTERP) return true;
  }
  return false;
}

// Why `path` cannot be preloaded into a program of this machine (empty when it can): it must be an ELF shared
// object of this program's class (32/64-bit), byte order and machine, read from /proc/self/exe's own header.
std::string unusable_shim_reason(const fs::path& path) {
  std::error_code error;
  if (!fs::exists(path, error)) return "does not exist";
  if (!fs::is_regular_file(path, error)) return "is not a regular file";
  ElfIdentity shim{};
  if (std::string reason = read_elf_identity(path, shim); !reason.empty()) return reason;
  ElfIdentity self{};
  if (!read_elf_identity("/proc/self/exe", self).empty()) return {};  // nothing to compare with: let the loader say
  if (shim.ident[EI_CLASS] != self.ident[EI_CLASS]) {
    return shim.ident[EI_CLASS] == ELFCLASS32 ? "is a 32-bit ELF file; this machine's programs are 64-bit"
                                              : "is an ELF file of another class (32/64-bit) than this machine's";
  }
  if (shim.ident[EI_DATA] != self.ident[EI_DATA]) return "is an ELF file of the other byte order";
  if (shim.type != ET_DYN || has_interpreter(path)) return "is an ELF file but not a shared library";
  if (shim.machine != self.machine) {
    return "is an ELF shared library for another machine (e_machine " + std::to_string(shim.machine) +
           ", this machine's is " + std::to_string(self.machine) + ")";
  }
  return {};
}

// LD_PRELOAD with the shim first, what was there kept in its order, and no second copy of the shim (an entry that
// is the same file). The loader splits LD_PRELOAD at colons and spaces.
std::string preload_with_shim(const fs::path& shim) {
  std::string preload = shim.string();
  const char* existing = std::getenv("LD_PRELOAD");
  if (existing == nullptr) return preload;
  std::string_view rest = existing;
  while (!rest.empty()) {
    const std::size_t end = rest.find_first_of(": ");
    const std::string entry(rest.substr(0, end));
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    if (entry.empty()) continue;
    std::error_code error;
    if (entry == shim.string() || fs::equivalent(entry, shim, error)) continue;
    preload += ":" + entry;
  }
  return preload;
}

// PYTHONPATH with `directory` first, what was there kept in its order (empty entries too: Python reads them as the
// current directory), and no second copy of `directory`.
std::string python_path_with(const fs::path& directory) {
  std::string path = directory.string();
  const char* existing = std::getenv("PYTHONPATH");
  if (existing == nullptr || *existing == '\0') return path;
  std::string_view rest = existing;
  while (true) {
    const std::size_t end = rest.find(':');
    const std::string entry(rest.substr(0, end));
    std::error_code error;
    if (entry.empty() || (entry != path && !fs::equivalent(entry, directory, error))) path += ":" + entry;
    if (end == std::string_view::npos) break;
    rest = rest.substr(end + 1);
  }
  return path;
}

// Sets `name` when the option was given (replacing the environment's value).
void set_variable(const char* name, const std::optional<std::string>& value) {
  if (value) setenv(name, value->c_str(), 1);
}

// The settings the command will run with, once, on stderr: LD_PRELOAD, PYTHONPATH, every DETNCCL_* variable, the
// command.
void print_settings(const RunCommandOptions& options) {
  const std::vector<std::string>& command = options.command;
  std::cerr << "detnccl run: LD_PRELOAD=" << std::getenv("LD_PRELOAD") << "\n";
  if (options.no_python_steps) {
    std::cerr << "detnccl run: PYTHONPATH left as it was (--no-python-steps: no PyTorch step hook)\n";
  } else if (const char* python_path = std::getenv("PYTHONPATH"); python_path != nullptr) {
    std::cerr << "detnccl run: PYTHONPATH=" << python_path << "\n";
  }
  std::vector<std::string> settings;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    if (std::strncmp(*entry, "DETNCCL_", 8) == 0) settings.emplace_back(*entry);
  }
  std::sort(settings.begin(), settings.end());
  for (const std::string& setting : settings) std::cerr << "detnccl run: " << setting << "\n";
  if (settings.empty()) std::cerr << "detnccl run: no DETNCCL_* setting (nothing is traced)\n";
  std::cerr << "detnccl run: command:";
  for (const std::string& word : command) std::cerr << " " << word;
  std::cerr << std::endl;
}

}  // namespace

int run_command(const RunCommandOptions& options) {
  const fs::path shim = fs::absolute(options.shim ? fs::path(*options.shim) : default_shim()).lexically_normal();
  if (const std::string reason = unusable_shim_reason(shim); !reason.empty()) {
    std::cerr << "detnccl run: the shim " << shim.string() << " " << reason
              << (options.shim ? "" : " (it is looked for next to detnccl; name it with --shim PATH)") << "\n";
    return kExitUnusable;
  }
  setenv("LD_PRELOAD", preload_with_shim(shim).c_str(), 1);
  if (!options.no_python_steps) {
    const fs::path python_steps = default_python_steps_directory();
    std::error_code error;
    if (fs::is_regular_file(python_steps / "sitecustomize.py", error)) {
      setenv("PYTHONPATH", python_path_with(python_steps).c_str(), 1);
    } else {
      // RATIONALE: a job traced without optimizer steps is still traced (steps from the call pattern): say it, go on.
      std::cerr << "detnccl run: the PyTorch step hook " << (python_steps / "sitecustomize.py").string()
                << " does not exist; PYTHONPATH left as it was (Python jobs get no steps from their optimizers)\n";
    }
  }
  // RATIONALE: an absolute DETNCCL_DIR, so that a rank that changes its directory still writes where the user meant.
  std::optional<std::string> dir = options.dir;
  if (dir && !dir->empty()) dir = fs::absolute(*dir).lexically_normal().string();
  set_variable("DETNCCL_DIR", dir);
  set_variable("DETNCCL_RUN", options.run);
  // A bare --deterministic reads as "true" (CLI11's value of a flag without one): it means 1.
  std::optional<std::string> deterministic = options.deterministic;
  if (deterministic == "true") deterministic = "1";
  set_variable("DETNCCL_DETERMINISTIC", deterministic);
  set_variable("DETNCCL_TRACE", options.trace);
  set_variable("DETNCCL_STEPS", options.steps);
  set_variable("DETNCCL_RANKS", options.ranks);
  if (options.print_config) print_settings(options);

  std::vector<char*> arguments;
  for (const std::string& word : options.command) arguments.push_back(const_cast<char*>(word.c_str()));
  arguments.push_back(nullptr);
  std::cout.flush();
  execvp(arguments[0], arguments.data());
  const int error = errno;
  if (error == ENOENT || error == ENOTDIR) {
    std::cerr << "detnccl run: " << options.command[0] << ": command not found\n";
    return kExitCommandNotFound;
  }
  std::cerr << "detnccl run: " << options.command[0] << ": " << std::strerror(error) << "\n";
  return kExitCommandNotExecutable;
}

CommandRun add_run_arguments(CLI::App& app) {
  auto options = std::make_shared<RunCommandOptions>();
  app.add_option("--dir", options->dir, "DETNCCL_DIR: where the per-rank logs go (DIR/RUN/rank-NNNNN.dnc)")
      ->type_name("DIR");
  app.add_option("--run", options->run, "DETNCCL_RUN: the run's name, the directory under DIR")->type_name("NAME");
  app.add_flag("--deterministic", options->deterministic,
               "DETNCCL_DETERMINISTIC: fixed-order reductions; bare it means 1, or --deterministic=0|1|warn")
      ->type_name("[=MODE]");
  app.add_option("--trace", options->trace, "DETNCCL_TRACE: off, meta, steps, hash or segments")->type_name("LEVEL");
  app.add_option("--steps", options->steps, "DETNCCL_STEPS: the steps fingerprinted (1,5,40-44,100-)")
      ->type_name("STEPS");
  app.add_option("--ranks", options->ranks, "DETNCCL_RANKS: the ranks that fingerprint (0,3,8-15)")->type_name("RANKS");
  app.add_flag("--no-python-steps", options->no_python_steps,
               "leave PYTHONPATH alone: no PyTorch step hook (by default its directory goes first on PYTHONPATH, so "
               "that a Python job that imports torch gets its steps from optimizer.step())");
  app.add_option("--shim", options->shim, "the libdetnccl.so to preload (default: the one installed next to detnccl)")
      ->type_name("PATH");
  app.add_flag(
      "--print-config,-v,--verbose", options->print_config,
      "print LD_PRELOAD, PYTHONPATH, every DETNCCL_* setting and the command once on stderr before running it");
  app.add_option("command", options->command, "the command and its arguments, after --")
      ->required()
      ->type_name("-- COMMAND [ARGS...]");
  app.footer(
      "Runs COMMAND in place of detnccl (its exit status and signals are the command's own) with libdetnccl.so "
      "prepended to LD_PRELOAD, detnccl's PyTorch step hook (share/detnccl/python/autostep) prepended to PYTHONPATH "
      "unless --no-python-steps, and the options' DETNCCL_* variables set; every other DETNCCL_* variable passes "
      "through from the environment. A Python job that imports torch then gets its steps from its optimizers' "
      "step() calls, with no change to its code (docs/python.md). The shim checks the values at the job's first "
      "communicator call: an invalid one stops the job with exit status 78 and a message naming the variable "
      "(docs/configuration.md). Exit status: the command's; 127 when it is not found, 126 when it cannot be run, 2 "
      "for bad arguments or an unusable shim.");
  return [options] { return run_command(*options); };
}

}  // namespace detnccl::cli
