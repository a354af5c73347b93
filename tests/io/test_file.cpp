// io::write_file_atomic where the path is not a plain file: a symlink, a FIFO, a directory.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <stdexcept>
#include <string>

#include "io/file.hpp"
#include "tests/test_files.hpp"

namespace fs = std::filesystem;
using tg::io::write_file_atomic;

TEST_CASE("io.file.a_symlink_is_replaced_never_the_file_it_names") {
  // The file it names may be shared (a Hugging Face cache's blobs serve several snapshots).
  const std::string target = tg::testing::write_bytes("file_link_target.txt", "old");
  const std::string link = tg::testing::scratch("file_link.txt");
  fs::remove(link);
  fs::create_symlink(target, link);
  write_file_atomic(link, "new");
  CHECK_FALSE(fs::is_symlink(fs::symlink_status(link)));
  CHECK(tg::testing::read_bytes(link) == "new");
  CHECK(tg::testing::read_bytes(target) == "old");
}

TEST_CASE("io.file.a_descriptor_by_name_is_written_where_it_stands") {
  // --out /dev/stdout with stdout appended to a file (>>): the file keeps what it held and gets the
  // bytes after it, through the descriptor (not a rename over the file, nor a reopen at offset 0).
  const std::string path = tg::testing::write_bytes("file_fd_append.txt", "kept\n");
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND);
  REQUIRE(fd >= 0);
  write_file_atomic("/dev/fd/" + std::to_string(fd), "added\n");
  write_file_atomic("/proc/self/fd/" + std::to_string(fd), "again\n");
  ::close(fd);
  CHECK(tg::testing::read_bytes(path) == "kept\nadded\nagain\n");
  CHECK(tg::io::is_stdout("/dev/stdout"));
  CHECK_FALSE(tg::io::is_stdout(path));
}

TEST_CASE("io.file.a_fifo_is_written_through_not_replaced") {
  // As for /dev/stdout or /dev/null: renaming a file over the node would replace it (as root,
  // /dev/null with a regular file). A reader opened first (non-blocking), a write that fits the
  // pipe's buffer: no thread needed, and a FIFO replaced by a rename would leave it reading nothing.
  const std::string fifo = tg::testing::scratch("file_fifo");
  fs::remove(fifo);
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const int rd = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  REQUIRE(rd >= 0);
  write_file_atomic(fifo, "through the pipe");
  char buf[64] = {};
  const ssize_t n = ::read(rd, buf, sizeof buf);
  ::close(rd);
  CHECK(std::string(buf, n > 0 ? static_cast<size_t>(n) : 0) == "through the pipe");
  CHECK(fs::is_fifo(fs::status(fifo)));
}

TEST_CASE("io.file.a_directory_is_refused_by_name") {
  const std::string dir = tg::testing::scratch("file_a_dir");
  fs::create_directories(dir);
  CHECK_THROWS_WITH_AS(write_file_atomic(dir, "x"), ("cannot write " + dir + ": is a directory").c_str(),
                       std::runtime_error);
}
