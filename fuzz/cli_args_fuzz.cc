// Fuzz target: `detnccl`'s command line (cli::parse_command_line, every subcommand's options and their checks), in
// memory: no process, and no file read but the absence of the ones named (report's page of an unusable run is written,
// then removed).
//
// The input is the argument vector after "detnccl", one argument per line ('\n'; at most kMaxArguments). So that no
// argument can name a file or directory that exists, every '/' becomes '_' and an argument (or the value after an
// '=') that is "." or ".." becomes "_", and the commands run with an empty directory as the working directory (the
// one before is restored after each input, and what a command wrote there, e.g. report's page, removed): every path
// they get is a name in that empty directory. `detnccl run` is parsed but never run (it would start its command).
// Standard output and error are swallowed.
// Checked, beyond "no crash": the parser either picks a subcommand or returns 0 (help, version, with text on its
// output) or 2 (bad arguments, with a message); a command picked, run on paths that do not exist, exits 2 (unusable
// input or bad arguments) with a message, never 0 or 1.
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "cli/command_line.h"

namespace {

namespace cli = detnccl::cli;

constexpr std::size_t kMaxArguments = 48;

void require(bool condition) {
  if (!condition) std::abort();
}

// An argument that names nothing outside the working directory.
std::string confined(std::string_view argument) {
  std::string text(argument);
  for (char& c : text) {
    if (c == '/') c = '_';
  }
  const std::size_t equals = text.find('=');
  const std::string_view value =
      equals == std::string::npos ? std::string_view(text) : std::string_view(text).substr(equals + 1);
  if (value == "." || value == "..") text.replace(text.size() - value.size(), value.size(), "_");
  return text;
}

// An empty directory two levels below a fresh temporary one (so that ".." would be empty too), made once.
const std::string& empty_directory() {
  static const std::string path = [] {
    std::string top = "/tmp/detnccl-cli-args-fuzz-XXXXXX";
    require(mkdtemp(top.data()) != nullptr);
    const std::string inner = top + "/a";
    require(mkdir(inner.c_str(), 0700) == 0 || errno == EEXIST);
    require(mkdir((inner + "/b").c_str(), 0700) == 0 || errno == EEXIST);
    return inner + "/b";
  }();
  // Removed at exit (nothing is ever written in it), so that runs leave no folders behind.
  static const bool removed_at_exit = [] {
    return std::atexit([] {
             const std::string& b = empty_directory();
             const std::string a = b.substr(0, b.rfind('/'));
             rmdir(b.c_str());
             rmdir(a.c_str());
             rmdir(a.substr(0, a.rfind('/')).c_str());
           }) == 0;
  }();
  (void)removed_at_exit;
  return path;
}

// Removes what a command wrote in the working directory (`detnccl report -o PAGE` writes the page of an unusable
// run, as it should), so that every input starts from an empty one and no input can read another's output.
void empty_the_working_directory() {
  DIR* const directory = opendir(".");
  require(directory != nullptr);
  while (const dirent* entry = readdir(directory)) {
    const std::string_view name = entry->d_name;
    if (name == "." || name == "..") continue;
    require(unlinkat(dirfd(directory), entry->d_name, 0) == 0 ||
            unlinkat(dirfd(directory), entry->d_name, AT_REMOVEDIR) == 0);
  }
  closedir(directory);
}

// Swallows what is written to it.
class NullBuffer : public std::streambuf {
 protected:
  int overflow(int c) override { return c == EOF ? 0 : c; }
  std::streamsize xsputn(const char*, std::streamsize n) override { return n; }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> arguments{"detnccl"};
  while (!input.empty() && arguments.size() <= kMaxArguments) {
    const std::size_t end = input.find('\n');
    arguments.push_back(confined(input.substr(0, end)));
    if (end == std::string_view::npos) break;
    input.remove_prefix(end + 1);
  }
  // `detnccl fingerprint` execs another program before any parsing (detnccl_main.cc): not the parser's.
  if (arguments.size() >= 2 && arguments[1] == "fingerprint") return 0;
  std::vector<const char*> argv;
  for (const std::string& argument : arguments) argv.push_back(argument.c_str());
  const int argc = static_cast<int>(argv.size());

  std::ostringstream out, err;
  const cli::ParsedCommandLine parsed = cli::parse_command_line(argc, argv.data(), out, err);
  if (!parsed.run) {
    require(parsed.status == cli::kExitSame || parsed.status == cli::kExitUnusable);
    require(parsed.status == cli::kExitSame ? !out.str().empty() : !err.str().empty());
    return 0;
  }
  require(parsed.name != nullptr);
  if (std::strcmp(parsed.name, "run") == 0) return 0;

  const int previous = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  require(previous >= 0 && chdir(empty_directory().c_str()) == 0);
  // The commands write to std::cout and std::cerr themselves.
  NullBuffer null;
  std::ostringstream command_err;
  std::streambuf* const cout_buffer = std::cout.rdbuf(&null);
  std::streambuf* const cerr_buffer = std::cerr.rdbuf(command_err.rdbuf());
  const int status = cli::run_parsed_command(parsed, argc, argv.data(), out, std::cerr);
  std::cout.rdbuf(cout_buffer);
  std::cerr.rdbuf(cerr_buffer);
  empty_the_working_directory();
  require(fchdir(previous) == 0);
  close(previous);
  require(status == cli::kExitUnusable && !command_err.str().empty());
  return 0;
}
