// posix/: FileDescriptor, write_all, read_full, fill_random and replace_file.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "posix/file_descriptor.h"
#include "posix/io.h"
#include "tests/test_support.h"

namespace fs = std::filesystem;
using detnccl::posix::FileDescriptor;
using detnccl::test::TempDir;

namespace {

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool is_open(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

}  // namespace

TEST(PosixFileDescriptor, ClosesOnScopeExitUnlessReleased) {
  int kept = -1;
  int closed = -1;
  {
    FileDescriptor first(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    FileDescriptor second(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(first.valid());
    ASSERT_TRUE(second.valid());
    closed = first.get();
    kept = second.release();
    EXPECT_FALSE(second.valid());
    EXPECT_EQ(second.get(), -1);
  }
  EXPECT_FALSE(is_open(closed));
  EXPECT_TRUE(is_open(kept));
  ::close(kept);
  const FileDescriptor none(-1);  // a failed open owns nothing and closes nothing
  EXPECT_FALSE(none.valid());
}

TEST(PosixIo, WriteAllAndReadFullMoveEveryByteThroughAPipe) {
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const FileDescriptor read_end(pipe_fds[0]);
  FileDescriptor write_end(pipe_fds[1]);
  std::vector<char> data(40000);  // under the pipe's 64 KiB, so one thread can write all of it first
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 + 3);
  ASSERT_TRUE(detnccl::posix::write_all(write_end.get(), data.data(), data.size()));
  ASSERT_TRUE(detnccl::posix::write_all(write_end.get(), std::string_view("tail")));
  ::close(write_end.release());
  std::vector<char> got(data.size() + 10);
  ASSERT_EQ(detnccl::posix::read_full(read_end.get(), got.data(), got.size()),
            static_cast<ssize_t>(data.size() + 4));  // short only because the stream ended
  EXPECT_TRUE(std::equal(data.begin(), data.end(), got.begin()));
  EXPECT_EQ(std::string(got.data() + data.size(), 4), "tail");
}

TEST(PosixIo, WriteAllAndReadFullReportErrors) {
  errno = 0;
  EXPECT_FALSE(detnccl::posix::write_all(-1, "x", 1));
  EXPECT_EQ(errno, EBADF);
  char byte = 0;
  EXPECT_EQ(detnccl::posix::read_full(-1, &byte, 1), -1);
}

TEST(PosixIo, FillRandomFillsTheWholeBuffer) {
  std::array<unsigned char, 4096> first{}, second{};
  ASSERT_EQ(detnccl::posix::fill_random(first.data(), first.size()), 0);
  ASSERT_EQ(detnccl::posix::fill_random(second.data(), second.size()), 0);
  EXPECT_NE(first, second);
  // Every byte is written: the last 64 bytes all zero has probability 2^-512.
  bool tail_written = false;
  for (std::size_t i = first.size() - 64; i < first.size(); ++i) tail_written |= first[i] != 0;
  EXPECT_TRUE(tail_written);
}

TEST(PosixIo, ReplaceFileWritesTheWholeFileWithItsModeAndLeavesNoTemporary) {
  const TempDir dir;
  const std::string path = dir / "id";
  std::string error;
  ASSERT_TRUE(detnccl::posix::replace_file(path, "first", 5, &error)) << error;
  ASSERT_TRUE(detnccl::posix::replace_file(path, "second", 6, &error,
                                           {.mode = 0644, .exclusive = false, .sync_directory = true}))
      << error;
  EXPECT_EQ(read_text(path), "second");
  struct stat info {};
  ASSERT_EQ(::stat(path.c_str(), &info), 0);
  const mode_t mask = ::umask(0);
  ::umask(mask);
  EXPECT_EQ(info.st_mode & 0777, 0644u & ~mask);
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir.path())) names.push_back(entry.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"id"});
}

TEST(PosixIo, ReplaceFileFailsWithAMessageAndLeavesThePathAlone) {
  const TempDir dir;
  const std::string path = dir / "id";
  std::string error;
  ASSERT_TRUE(detnccl::posix::replace_file(path, "kept", 4, &error)) << error;
  // An exclusive replacement refuses a temporary file that is already there.
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  std::ofstream(temporary) << "stale";
  EXPECT_FALSE(detnccl::posix::replace_file(path, "new", 3, &error, {.mode = 0600, .exclusive = true}));
  EXPECT_EQ(error.rfind("cannot create " + temporary + ": ", 0), 0u) << error;
  EXPECT_EQ(read_text(path), "kept");
  // A rename onto a directory fails; the temporary file is removed again.
  fs::remove(temporary);
  const std::string directory_path = dir / "subdir";
  fs::create_directory(directory_path);
  fs::create_directory(directory_path + "/occupied");  // a non-empty directory cannot be renamed over
  EXPECT_FALSE(detnccl::posix::replace_file(directory_path, "x", 1, &error));
  EXPECT_EQ(error.rfind("cannot rename ", 0), 0u) << error;
  EXPECT_FALSE(fs::exists(directory_path + ".tmp." + std::to_string(::getpid())));
}
