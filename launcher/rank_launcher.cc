#include "launcher/rank_launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string_view>

#include "hostnccl/settings.h"
#include "hostnccl/shm_names.h"
#include "launcher/job_shm.h"
#include "launcher/line_prefixer.h"
#include "posix/io.h"

extern char** environ;

namespace detnccl::launcher {
namespace {

using Clock = std::chrono::steady_clock;

// Written by the signal handler, read by the poll loop (the self-pipe trick): the loop learns of SIGCHLD and of
// interrupts without racing against poll().
int g_signal_pipe_write = -1;

void on_signal(int signo) {
  const int saved_errno = errno;
  const unsigned char byte = static_cast<unsigned char>(signo);
  [[maybe_unused]] const ssize_t ignored = write(g_signal_pipe_write, &byte, 1);
  errno = saved_errno;
}

// The signals the launcher handles: SIGCHLD, and the interrupts it forwards to every rank's process group.
constexpr std::array kHandledSignals = {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT};

// Sent to a rank by the kernel when the launcher dies without stopping it (say, SIGKILLed): a rank must never
// outlive its launcher, which alone can stop the job and remove what it leaves behind.
constexpr int kLauncherDeathSignal = SIGKILL;

sigset_t handled_signal_set() {
  sigset_t set;
  sigemptyset(&set);
  for (const int signo : kHandledSignals) sigaddset(&set, signo);
  return set;
}

using posix::write_all;

void report(const std::string& message) { write_all(STDERR_FILENO, "hostnccl-run: " + message + "\n"); }

std::string errno_text(int error) { return std::strerror(error); }

std::string format_seconds(std::chrono::milliseconds duration) {
  std::array<char, 32> text{};
  std::snprintf(text.data(), text.size(), "%g", std::chrono::duration<double>(duration).count());
  return text.data();
}

// One of the launcher's standard streams. Once a write fails (say, `hostnccl-run ... | head` closed the pipe),
// the job keeps running and further output to that stream is dropped.
struct OutputStream {
  int fd;
  bool open = true;
  void write(std::string_view text) {
    if (open && !write_all(fd, text)) open = false;
  }
};

// A pipe from one rank's stdout or stderr to the launcher.
struct RelayedStream {
  int fd = -1;  // read end; -1 once the stream has ended
  std::unique_ptr<LinePrefixer> prefixer;
};

struct Rank {
  int index = 0;
  pid_t pid = -1;  // also the rank's process-group id
  bool running = false;
  std::array<RelayedStream, 2> streams;  // stdout, stderr
};

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int signo = WTERMSIG(status);
    const char* name = strsignal(signo);
    std::string text = "was killed by signal " + std::to_string(signo) + " (" + (name ? name : "unknown") + ")";
    if (WCOREDUMP(status)) text += ", core dumped";
    return text;
  }
  return "stopped with wait status " + std::to_string(status);
}

bool wait_status_failed(int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 0); }

int exit_code_for(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// A free TCP port on 127.0.0.1 for MASTER_PORT (what torchrun --standalone does): programs that also start
// torch.distributed need one. Nothing listens on it until a rank does; 0 when none could be found.
int find_free_loopback_port() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  close(fd);
  return port;
}

// The environment of one rank: the launcher's own, with the torchrun-style variables and the job's
// HOSTNCCL_ID_FILE and HOSTNCCL_JOB_TAG replaced.
std::vector<std::string> rank_environment(int rank, int world_size, const std::string& id_file,
                                          const std::string& job_tag, int master_port) {
  std::vector<std::pair<std::string, std::string>> ours = {
      {"RANK", std::to_string(rank)},       {"WORLD_SIZE", std::to_string(world_size)},
      {"LOCAL_RANK", std::to_string(rank)}, {"LOCAL_WORLD_SIZE", std::to_string(world_size)},
      {"MASTER_ADDR", "127.0.0.1"},         {"HOSTNCCL_ID_FILE", id_file},
      {hostnccl::kJobTagVariable, job_tag},
  };
  if (master_port > 0) ours.emplace_back("MASTER_PORT", std::to_string(master_port));
  std::vector<std::string> environment;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    const std::string_view key = text.substr(0, text.find('='));
    const bool replaced = std::any_of(ours.begin(), ours.end(), [&](const auto& kv) { return kv.first == key; });
    if (!replaced) environment.emplace_back(text);
  }
  for (const auto& [key, value] : ours) environment.push_back(key + "=" + value);
  return environment;
}

std::vector<char*> as_pointer_array(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (std::string& text : strings) pointers.push_back(text.data());
  pointers.push_back(nullptr);
  return pointers;
}

// Runs in the forked child, which starts with the handled signals blocked (see start_ranks): the rank's own process
// group, default signal dispositions, death with the launcher, the relay pipes as stdout/stderr, then exec. Only
// async-signal-safe calls (the launcher has one thread, but stay safe anyway).
[[noreturn]] void exec_rank(const std::string& program_path, char* const* argv, char* const* envp, int stdin_fd,
                            int stdout_fd, int stderr_fd, pid_t launcher_pid) {
  setpgid(0, 0);
  // RATIONALE: until here the launcher's handler is installed; a signal caught by it would write into the launcher's
  // signal pipe (inherited) and pass for one sent to the launcher. Blocked, it waits for the default disposition.
  // Ignored signals and the blocked mask survive exec, so the program must start with defaults anyway.
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  for (const int signo : kHandledSignals) sigaction(signo, &default_action, nullptr);
  sigaction(SIGPIPE, &default_action, nullptr);
  // RATIONALE: the launcher may have died before prctl; then nothing will ever send the signal, so act on it here.
  if (prctl(PR_SET_PDEATHSIG, static_cast<unsigned long>(kLauncherDeathSignal)) != 0 || getppid() != launcher_pid) {
    raise(kLauncherDeathSignal);
  }
  sigset_t empty_mask;
  sigemptyset(&empty_mask);
  sigprocmask(SIG_SETMASK, &empty_mask, nullptr);
  if (stdin_fd >= 0 && dup2(stdin_fd, STDIN_FILENO) < 0) _exit(127);
  if (stdout_fd >= 0 && dup2(stdout_fd, STDOUT_FILENO) < 0) _exit(127);
  if (stderr_fd >= 0 && dup2(stderr_fd, STDERR_FILENO) < 0) _exit(127);
  execve(program_path.c_str(), argv, envp);
  // RATIONALE: between fork and exec only async-signal-safe calls: strerrordesc_np reads a constant table (strerror
  // may translate, and so lock).
  const char* reason = strerrordesc_np(errno);
  if (reason == nullptr) reason = "unknown error";
  constexpr std::string_view kPrefix = "hostnccl-run: cannot execute ";
  [[maybe_unused]] ssize_t ignored = write(STDERR_FILENO, kPrefix.data(), kPrefix.size());
  ignored = write(STDERR_FILENO, program_path.data(), program_path.size());
  ignored = write(STDERR_FILENO, ": ", 2);
  ignored = write(STDERR_FILENO, reason, std::strlen(reason));
  ignored = write(STDERR_FILENO, "\n", 1);
  _exit(127);
}

// The supervision of one job: state, and the poll loop that drives it.
class Job {
 public:
  explicit Job(const LaunchOptions& options) : options_(options) {}

  ~Job() {
    for (Rank& rank : ranks_) {
      for (RelayedStream& stream : rank.streams) {
        if (stream.fd >= 0) close(stream.fd);
      }
    }
    if (!temp_dir_.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(temp_dir_, ignored);
    }
    if (null_stdin_ >= 0) close(null_stdin_);
    if (signal_pipe_[0] >= 0) close(signal_pipe_[0]);
    if (signal_pipe_[1] >= 0) close(signal_pipe_[1]);
    g_signal_pipe_write = -1;
  }

  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  int run() {
    if (!prepare()) return kExitUsage;
    if (!start_ranks()) {
      stop_all(SIGKILL);
      wait_for_all_ranks();
      remove_leftover_shared_memory();
      return kExitUsage;
    }
    supervise();
    remove_leftover_shared_memory();
    return result_.value_or(0);
  }

 private:
  bool prepare() {
    const char* tmpdir = std::getenv("TMPDIR");
    std::string pattern = std::string(tmpdir && *tmpdir ? tmpdir : "/tmp") + "/hostnccl-run.XXXXXX";
    // mkdtemp creates the directory with mode 0700: only this user can read the unique id.
    if (mkdtemp(pattern.data()) == nullptr) {
      report("cannot create a private directory " + pattern + ": " + errno_text(errno));
      return false;
    }
    temp_dir_ = pattern;
    id_file_ = temp_dir_ + "/unique-id";
    std::string why;
    if (!make_job_tag(&job_tag_, &why)) {
      report("cannot make a job tag: " + why);
      return false;
    }

    if (pipe2(signal_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
      report("cannot create a pipe: " + errno_text(errno));
      return false;
    }
    g_signal_pipe_write = signal_pipe_[1];
    struct sigaction action {};
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    for (const int signo : kHandledSignals) sigaction(signo, &action, nullptr);
    // A closed stdout must not kill the launcher (it would orphan the ranks); OutputStream handles EPIPE.
    signal(SIGPIPE, SIG_IGN);
    return true;
  }

  bool start_ranks() {
    // RATIONALE: a rank is not in the terminal's foreground process group, so reading the terminal would stop it
    // (SIGTTIN) and hang the job; ranks read /dev/null instead. A file or pipe on stdin is inherited as is.
    if (isatty(STDIN_FILENO)) null_stdin_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
    const char* port_override = std::getenv("MASTER_PORT");
    const int master_port = (port_override && *port_override) ? 0 : find_free_loopback_port();
    std::vector<std::string> argv_strings = options_.argv;
    std::vector<char*> argv = as_pointer_array(argv_strings);
    ranks_.resize(static_cast<std::size_t>(options_.world_size));
    for (int index = 0; index < options_.world_size; ++index) {
      Rank& rank = ranks_[static_cast<std::size_t>(index)];
      rank.index = index;
      std::vector<std::string> environment_strings =
          rank_environment(index, options_.world_size, id_file_, job_tag_, master_port);
      std::vector<char*> envp = as_pointer_array(environment_strings);

      std::array<std::array<int, 2>, 2> pipes{{{-1, -1}, {-1, -1}}};
      if (options_.prefix_output) {
        for (auto& ends : pipes) {
          if (pipe2(ends.data(), O_CLOEXEC) != 0) {
            report("cannot create the output pipes of rank " + std::to_string(index) + ": " + errno_text(errno));
            for (auto& opened : pipes) {
              for (int& fd : opened) {
                if (fd >= 0) close(fd);
              }
            }
            return false;
          }
        }
      }
      // RATIONALE: the child inherits the launcher's handlers; until it has reset them, the handled signals stay
      // blocked in it (the launcher forwards SIGTERM to ranks that may not have reached exec yet).
      const sigset_t handled = handled_signal_set();
      sigset_t previous_mask;
      sigprocmask(SIG_BLOCK, &handled, &previous_mask);
      const pid_t launcher_pid = getpid();
      const pid_t pid = fork();
      if (pid == 0) {
        if (options_.in_forked_rank_for_test) options_.in_forked_rank_for_test(index);
        exec_rank(options_.program_path, argv.data(), envp.data(), null_stdin_, pipes[0][1], pipes[1][1], launcher_pid);
      }
      const int fork_error = errno;
      sigprocmask(SIG_SETMASK, &previous_mask, nullptr);
      if (pid < 0) {
        report("cannot start rank " + std::to_string(index) + ": fork: " + errno_text(fork_error));
        for (auto& ends : pipes) {
          for (int& fd : ends) {
            if (fd >= 0) close(fd);
          }
        }
        return false;
      }
      // RATIONALE: set the group from both sides, so that it exists before either side relies on it.
      setpgid(pid, pid);
      rank.pid = pid;
      rank.running = true;
      const std::string prefix = "[rank " + std::to_string(index) + "] ";
      for (std::size_t s = 0; s < rank.streams.size(); ++s) {
        if (!options_.prefix_output) continue;
        close(pipes[s][1]);
        rank.streams[s].fd = pipes[s][0];
        OutputStream* out = &outputs_[s];
        rank.streams[s].prefixer =
            std::make_unique<LinePrefixer>(prefix, [out](std::string_view text) { out->write(text); });
      }
    }
    if (options_.timeout.count() > 0) deadline_ = Clock::now() + options_.timeout;
    return true;
  }

  void supervise() {
    std::optional<Clock::time_point> drain_deadline;
    while (true) {
      reap_ranks();
      const Clock::time_point now = Clock::now();
      if (deadline_ && now >= *deadline_ && !result_) {
        report("timeout: the job ran longer than " + format_seconds(options_.timeout) + " s; stopping all ranks");
        result_ = kExitTimeout;
        begin_stopping();
      }
      if (kill_at_ && now >= *kill_at_) {
        stop_all(SIGKILL);
        kill_at_.reset();
      }
      if (!any_running()) {
        if (!drain_deadline) {
          // RATIONALE: every rank's main process is gone; anything still in their process groups (background
          // children) would outlive the job and keep the output pipes open, so it goes too.
          stop_all(SIGKILL);
          drain_deadline = now + std::chrono::seconds(2);
        }
        if (!any_stream_open() || now >= *drain_deadline) break;
      }
      poll_once(next_wakeup(now, drain_deadline));
    }
    for (Rank& rank : ranks_) {
      for (RelayedStream& stream : rank.streams) {
        if (stream.prefixer) stream.prefixer->finish();
      }
    }
  }

  std::chrono::milliseconds next_wakeup(Clock::time_point now, std::optional<Clock::time_point> drain_deadline) {
    // A periodic wake-up as well, so that a lost SIGCHLD can delay reaping but never stall it.
    Clock::time_point wakeup = now + std::chrono::milliseconds(250);
    for (const auto& when : {deadline_, kill_at_, drain_deadline}) {
      if (when && *when < wakeup) wakeup = *when;
    }
    return std::max(std::chrono::milliseconds(0), std::chrono::ceil<std::chrono::milliseconds>(wakeup - now));
  }

  void poll_once(std::chrono::milliseconds wait) {
    std::vector<pollfd> fds;
    std::vector<RelayedStream*> owners;
    fds.push_back({signal_pipe_[0], POLLIN, 0});
    owners.push_back(nullptr);
    for (Rank& rank : ranks_) {
      for (RelayedStream& stream : rank.streams) {
        if (stream.fd < 0) continue;
        fds.push_back({stream.fd, POLLIN, 0});
        owners.push_back(&stream);
      }
    }
    const int ready = poll(fds.data(), fds.size(), static_cast<int>(wait.count()));
    if (ready <= 0) return;  // timeout, or EINTR: the loop re-checks everything anyway
    if (fds[0].revents & POLLIN) handle_signals();
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents != 0) read_stream(*owners[i]);
    }
  }

  void read_stream(RelayedStream& stream) {
    std::array<char, 64 * 1024> buffer;
    const ssize_t count = read(stream.fd, buffer.data(), buffer.size());
    if (count > 0) {
      stream.prefixer->consume(std::string_view(buffer.data(), static_cast<std::size_t>(count)));
      return;
    }
    if (count < 0 && (errno == EINTR || errno == EAGAIN)) return;
    stream.prefixer->finish();
    close(stream.fd);
    stream.fd = -1;
  }

  void handle_signals() {
    std::array<unsigned char, 64> received;
    ssize_t count;
    while ((count = read(signal_pipe_[0], received.data(), received.size())) > 0) {
      for (ssize_t i = 0; i < count; ++i) {
        const int signo = received[static_cast<std::size_t>(i)];
        if (signo == SIGCHLD) continue;  // reaped at the top of the loop
        if (interrupted_) {
          // A second interrupt means "now": no more grace.
          report("received " + std::string(strsignal(signo)) + " again; killing all ranks");
          stop_all(SIGKILL);
          continue;
        }
        interrupted_ = true;
        report("received " + std::string(strsignal(signo)) + "; forwarding it to all ranks");
        if (!result_) result_ = 128 + signo;
        stop_all(signo);
        if (!kill_at_) kill_at_ = Clock::now() + options_.kill_grace;
      }
    }
  }

  void reap_ranks() {
    for (Rank& rank : ranks_) {
      if (!rank.running) continue;
      int status = 0;
      const pid_t reaped = waitpid(rank.pid, &status, WNOHANG);
      if (reaped < 0 && errno == ECHILD) {
        // Not ours to wait for any more (cannot happen unless something else reaped it): count it as failed.
        status = W_EXITCODE(1, 0);
      } else if (reaped != rank.pid) {
        continue;
      }
      rank.running = false;
      if (!wait_status_failed(status) || result_) continue;
      result_ = exit_code_for(status);
      const std::size_t others = static_cast<std::size_t>(
          std::count_if(ranks_.begin(), ranks_.end(), [](const Rank& other) { return other.running; }));
      report("rank " + std::to_string(rank.index) + " " + describe_wait_status(status) +
             (others > 0 ? "; stopping the other " + std::to_string(others) + " rank(s)" : ""));
      begin_stopping();
    }
  }

  // RATIONALE: hostnccl's ranks remove their segments themselves, unless all of them die while a communicator is
  // being created. Once no rank is left, whatever carries the job's tag is such a leftover: nobody can attach to it.
  void remove_leftover_shared_memory() {
    if (job_tag_.empty()) return;
    const std::vector<std::string> removed =
        remove_entries_with_prefix(hostnccl::kShmDirectory, hostnccl::job_shm_prefix(job_tag_));
    if (removed.empty()) return;
    constexpr std::size_t kNamesShown = 4;
    std::string names;
    for (std::size_t i = 0; i < removed.size() && i < kNamesShown; ++i) {
      names += ' ';
      names += removed[i];
    }
    if (removed.size() > kNamesShown) names += " and " + std::to_string(removed.size() - kNamesShown) + " more";
    std::string message = "removed ";
    message += std::to_string(removed.size());
    message += " shared-memory object(s) the job left in ";
    message += hostnccl::kShmDirectory;
    message += ':';
    message += names;
    report(message);
  }

  void begin_stopping() {
    stop_all(SIGTERM);
    if (!kill_at_) kill_at_ = Clock::now() + options_.kill_grace;
  }

  // Signals every rank's whole process group, so that children the ranks started go too.
  void stop_all(int signo) {
    for (const Rank& rank : ranks_) {
      if (rank.pid > 0) kill(-rank.pid, signo);
    }
  }

  void wait_for_all_ranks() {
    for (Rank& rank : ranks_) {
      if (!rank.running) continue;
      int status = 0;
      while (waitpid(rank.pid, &status, 0) < 0 && errno == EINTR) {
      }
      rank.running = false;
    }
  }

  bool any_running() const {
    return std::any_of(ranks_.begin(), ranks_.end(), [](const Rank& rank) { return rank.running; });
  }

  bool any_stream_open() const {
    return std::any_of(ranks_.begin(), ranks_.end(), [](const Rank& rank) {
      return std::any_of(rank.streams.begin(), rank.streams.end(),
                         [](const RelayedStream& stream) { return stream.fd >= 0; });
    });
  }

  const LaunchOptions& options_;
  std::string temp_dir_;
  std::string id_file_;
  std::string job_tag_;  // HOSTNCCL_JOB_TAG of every rank: names the job's shared memory
  int signal_pipe_[2] = {-1, -1};
  int null_stdin_ = -1;  // /dev/null for the ranks' stdin when the launcher's is a terminal
  std::vector<Rank> ranks_;
  std::array<OutputStream, 2> outputs_{{{STDOUT_FILENO}, {STDERR_FILENO}}};
  std::optional<int> result_;                  // the exit code, decided by the first failure or stop reason
  std::optional<Clock::time_point> deadline_;  // end of --timeout
  std::optional<Clock::time_point> kill_at_;   // when SIGTERM'd ranks get SIGKILL
  bool interrupted_ = false;
};

}  // namespace

std::string find_program(const std::string& name, std::string* why) {
  const auto executable_file = [](const std::string& path) {
    struct stat info {};
    return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) && access(path.c_str(), X_OK) == 0;
  };
  if (name.empty()) {
    *why = "the program name is empty";
    return {};
  }
  if (name.find('/') != std::string::npos) {
    if (executable_file(name)) return name;
    *why = "'" + name + "' is not an executable file";
    return {};
  }
  const char* path_variable = std::getenv("PATH");
  const std::string search_path = path_variable ? path_variable : "/usr/local/bin:/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= search_path.size()) {
    std::size_t end = search_path.find(':', start);
    if (end == std::string::npos) end = search_path.size();
    const std::string directory = search_path.substr(start, end - start);
    const std::string candidate = (directory.empty() ? std::string(".") : directory) + "/" + name;
    if (executable_file(candidate)) return candidate;
    start = end + 1;
  }
  *why = "'" + name + "' was not found in PATH";
  return {};
}

int launch_ranks(const LaunchOptions& options) {
  Job job(options);
  return job.run();
}

}  // namespace detnccl::launcher
